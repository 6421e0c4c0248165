"""Tenant isolation of lexical search: does another tenant's data change one tenant's timing or status?

Tenant A holds a modest corpus (2,000 items by default). Tenant B then ingests N items that all
contain a rare word W. A searches, through the lexical connector with A's constraints, for W (only B
holds it) and for a control word C (nobody holds it): for A both queries find nothing, so they should
cost the same. The report gives A's p50/p95 for W and C and the ratio W/C, measured in the same run,
for N = 0 and after B's ingest (40,000 by default), sequentially and with several searches in flight
under the service's default source deadline (where a slow search becomes `timeout`, `partial: true`).

    .venv/bin/python bench/tenant_lexical_bench.py                      # SQLite, N = 40,000 (~2 min on 2 cores)
    .venv/bin/python bench/tenant_lexical_bench.py --postgres           # also PostgreSQL (GATEWAY_TEST_POSTGRES_URL)
    .venv/bin/python bench/tenant_lexical_bench.py --items-b 5000 --queries 100   # quick

See bench/README.md ("Tenant isolation of lexical search").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness import bench_dir, code_revision, interrupted, percentile
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

from connectors.sql.lexical import FullTextConnector
from core.constraints import ItemFilter
from core.records import RecallQuery
from core.store import migrate_store, open_store
from gateway.pipeline.recall import run_source
from gateway.writes.items import ingest

SEED = 20261130
LOAD_CHUNK = 5000
WORD_B = "xylophage"  # only tenant B holds it
CONTROL = "quixotry"  # nobody holds it
DEADLINE_MS = 250  # GATEWAY_CONNECTOR_DEADLINE_MS's default
RATIO_TARGET = 1.2
WARMUP = 20
# Pseudo-words from syllables without x, y or q, so no filler word is W or C.
SYLLABLES = "ba be bi bo bu ka ke ki ko ku la le li lo lu ma me mi mo mu na ne ni no nu ra re ri ro ru sa se si so su ta te ti to tu va ve vi vo zu".split()
POSTGRES_URL = os.environ.get("GATEWAY_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def vocabulary(size: int = 3000) -> list[str]:
    rng = random.Random(SEED)
    words: dict[str, None] = {}
    while len(words) < size:
        words["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))] = None
    return list(words)


def items(
    prefix: str, count: int, rng: random.Random, words: list[str], extra: str | None = None
) -> Iterator[list[dict[str, Any]]]:
    """Memories of 20-40 filler words (with `extra` among them), readable by everyone, in load chunks."""
    for start in range(0, count, LOAD_CHUNK):
        chunk = []
        for i in range(start, min(start + LOAD_CHUNK, count)):
            text_ = rng.choices(words, k=rng.randint(20, 40))
            if extra:
                text_.insert(rng.randrange(len(text_)), extra)
            chunk.append({"id": f"{prefix}_{i:06d}", "kind": "memory", "text": " ".join(text_), "acl": ["*"]})
        yield chunk


def load(
    engine: Engine, tenant: str, prefix: str, count: int, rng: random.Random, words: list[str], extra: str | None = None
) -> float:
    started, done = time.perf_counter(), 0
    for chunk in items(prefix, count, rng, words, extra):
        report = ingest(engine, tenant, chunk)
        if report.rejected:
            raise SystemExit(f"ingest rejected {len(report.rejected)} items, first: {report.rejected[0]}")
        done += len(chunk)
        if count > LOAD_CHUNK:
            print(f"  {tenant}: {done:>6,}/{count:,} items ({done / (time.perf_counter() - started):,.0f} items/s)", flush=True)
    return time.perf_counter() - started


def constraints(tenant: str) -> ItemFilter:
    return ItemFilter(
        tenant=tenant,
        principals=("*", "user:bench"),
        sensitivities=("public", "internal"),
        valid_at=datetime.now(timezone.utc),
        scopes=(),
        kinds=("memory", "document"),
        statuses=("active",),
    )


@dataclass
class Timings:
    ms: dict[str, list[float]] = field(default_factory=lambda: {WORD_B: [], CONTROL: []})
    statuses: dict[str, Counter[str]] = field(default_factory=lambda: {WORD_B: Counter(), CONTROL: Counter()})


async def measure(engine: Engine, tenant: str, queries: int, concurrency: int) -> Timings:
    """`queries` searches per word, W and C interleaved; with concurrency > 1, that many in flight,
    each under the default source deadline (as the service runs them)."""
    connector = FullTextConnector(engine)
    where = constraints(tenant)
    timings = Timings()

    async def one(word: str, record: bool) -> None:
        query = RecallQuery(text=word, limit=10)
        started = time.perf_counter()
        result = await run_source("lexical", lambda: connector.search(where, query), DEADLINE_MS)
        if record:
            timings.ms[word].append((time.perf_counter() - started) * 1000)
            timings.statuses[word][result.status] += 1

    for n in range(WARMUP):
        await one((WORD_B, CONTROL)[n % 2], record=False)
    # W C C W W C ...: neither word always goes first, so order effects cancel out.
    order = [word for n in range(queries) for word in ((WORD_B, CONTROL) if n % 2 == 0 else (CONTROL, WORD_B))]
    if concurrency == 1:
        for word in order:
            await one(word, record=True)
    else:
        for start in range(0, len(order), concurrency):
            await asyncio.gather(*(one(word, record=True) for word in order[start : start + concurrency]))
    return timings


def pg_plan(engine: Engine, tenant: str) -> str:
    """The indexes PostgreSQL reads `item` through for A's search of W (EXPLAIN of the connector's query)."""
    statement = FullTextConnector(engine)._postgres_statement(constraints(tenant), RecallQuery(text=WORD_B, limit=10), [WORD_B])
    compiled = statement.compile(dialect=engine.dialect, compile_kwargs={"render_postcompile": True})
    with engine.connect() as conn:
        plan = conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {compiled.string}", compiled.params).scalar_one()
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("Alias") == "item":
                names = [node.get("Index Name")] + [child.get("Index Name") for child in node.get("Plans", [])]
                found.append(f"{node['Node Type']} via {', '.join(n for n in names if n) or 'no index'}")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(plan)
    return "; ".join(found)


def row(label: str, timings: Timings) -> list[str]:
    lines = []
    for word, name in ((WORD_B, "W (B's word)"), (CONTROL, "C (nobody's)")):
        values = timings.ms[word]
        statuses = ", ".join(f"{s} {c}" for s, c in sorted(timings.statuses[word].items()))
        lines.append(
            f"  {label:<24} {name:<13} p50 {percentile(values, 50):8.2f} ms  p95 {percentile(values, 95):8.2f} ms   [{statuses}]"
        )
    w, c = timings.ms[WORD_B], timings.ms[CONTROL]
    ratio50, ratio95 = percentile(w, 50) / percentile(c, 50), percentile(w, 95) / percentile(c, 95)
    paired = percentile([a / b for a, b in zip(w, c)], 50)  # each W against the C run next to it
    lines.append(
        f"  {label:<24} {'ratio W/C':<13} p50 {ratio50:8.2f}x     p95 {ratio95:8.2f}x     (median of paired ratios {paired:.2f}x)"
    )
    return lines


def run_store(name: str, engine: Engine, args: argparse.Namespace) -> bool:
    rng = random.Random(SEED)
    words = vocabulary()
    print(f"\n[{name}] tenant A: {args.items_a:,} items", flush=True)
    load(engine, "tenant-a", "a", args.items_a, rng, words)
    before = asyncio.run(measure(engine, "tenant-a", args.queries, 1))
    before_conc = asyncio.run(measure(engine, "tenant-a", args.queries, args.concurrency))
    print(f"[{name}] tenant B: {args.items_b:,} items, each with W = {WORD_B!r}", flush=True)
    load_s = load(engine, "tenant-b", "b", args.items_b, rng, words, extra=WORD_B)
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(text("ANALYZE"))  # as autovacuum would soon after a bulk load
    after = asyncio.run(measure(engine, "tenant-a", args.queries, 1))
    after_conc = asyncio.run(measure(engine, "tenant-a", args.queries, args.concurrency))
    own = asyncio.run(FullTextConnector(engine).search(constraints("tenant-b"), RecallQuery(text=WORD_B, limit=10)))

    n0, n1 = "N = 0", f"N = {args.items_b:,}"
    print(
        f"\n=== tenant isolation of lexical search, {name}: A holds {args.items_a:,} items; {args.queries} queries per word "
        f"per phase; {os.cpu_count()} CPUs; code {code_revision()} ==="
    )
    print(
        f"B's ingest: {args.items_b / load_s:,.0f} items/s; B's own search for W: {own.status}, {len(own.candidates)} hits (sanity)"
    )
    if engine.dialect.name == "postgresql":
        print(f"plan of A's search for W: {pg_plan(engine, 'tenant-a')}")
    print("A's lexical search, 1 client (connector call, in-process):")
    print("\n".join(row(n0, before) + row(n1, after)))
    print(f"A's lexical search, {args.concurrency} in flight, deadline {DEADLINE_MS} ms:")
    print("\n".join(row(n0, before_conc) + row(n1, after_conc)))
    ratio = percentile(after.ms[WORD_B], 50) / percentile(after.ms[CONTROL], 50)
    growth = percentile(after.ms[WORD_B], 50) / percentile(before.ms[WORD_B], 50)
    bad = sum(
        t.statuses[w][s]
        for t in (before, after, before_conc, after_conc)
        for w in (WORD_B, CONTROL)
        for s in ("timeout", "error", "ok")
    )
    print("targets:")
    print(
        f"  W/C p50 ratio at {n1} <= {RATIO_TARGET}: {ratio:.2f}x -> {'MET' if ratio <= RATIO_TARGET else 'MISSED'}"
        f"   (A's W p50 at {n1} vs N = 0: {growth:.2f}x)"
    )
    print(f"  every A search `empty`, none `timeout`/`error`: {'MET' if bad == 0 else f'MISSED ({bad} not empty)'}")
    return ratio <= RATIO_TARGET and bad == 0


def postgres_engine(url: str) -> tuple[Engine, Engine, str]:
    admin = create_engine(url)
    schema = "gw_bench_" + secrets.token_hex(6)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    migrate_store(f"{url}?options=-csearch_path%3D{schema}")  # a PostgreSQL store is migrated before it is opened
    return open_store(f"{url}?options=-csearch_path%3D{schema}"), admin, schema


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items-a", type=int, default=2000, help="tenant A's items (default 2000)")
    parser.add_argument("--items-b", type=int, default=40_000, help="tenant B's items, each holding W (default 40000)")
    parser.add_argument("--queries", type=int, default=200, help="searches per word per phase (default 200)")
    parser.add_argument("--concurrency", type=int, default=4, help="searches in flight in the concurrent phase (default 4)")
    parser.add_argument(
        "--data", type=Path, help="data directory for the SQLite store (default: a fresh temp dir, removed at the end)"
    )
    parser.add_argument(
        "--postgres",
        nargs="?",
        const=POSTGRES_URL,
        metavar="URL",
        help=f"also run on PostgreSQL, in a schema of its own dropped at the end (default URL {POSTGRES_URL})",
    )
    args = parser.parse_args(argv)
    if min(args.items_a, args.items_b, args.queries, args.concurrency) < 1:
        parser.error("counts must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally blocks drop the schema and temp dir
    with bench_dir(args.data, "gateway-tenant-bench-") as data_dir:
        path = data_dir / "tenant_lexical.db"
        if path.exists():
            raise SystemExit(f"{path} exists: remove it or use a fresh --data dir")
        ok = True
        try:
            engine = open_store(f"sqlite:///{path.resolve()}")
            try:
                ok = run_store("sqlite", engine, args) and ok
            finally:
                engine.dispose()
            if args.postgres:
                engine, admin, schema = postgres_engine(args.postgres)
                try:
                    ok = run_store("postgresql", engine, args) and ok
                finally:
                    engine.dispose()
                    with admin.begin() as conn:
                        conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
                    admin.dispose()
        except KeyboardInterrupt:
            return interrupted()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
