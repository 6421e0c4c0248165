"""Filtered vector search: recall@10 and latency of the embedded index at several permitted shares.

Loads N synthetic items with clustered unit vectors (no model: this measures the index, not the
embedder) straight into a fresh SQLite store, grants group:p100 / p50 / p5 / p1 / p01 to 100%, 50%,
5%, 1% and 0.1% of them, and for each share asks the same queries four ways: exact (numpy over the
permitted subset as SQL lists it: the truth), listed (numpy over the admitted rows as the lexical
index lists them, whatever their count), approximate (HNSW proposing, SQL admitting, window
widening) and auto (what the connector picks: listed up to `EXACT_MAX` admitted rows, else
approximate). Recall@10 is measured against exact. `listed` beside `approximate` is where the
cutoff comes from.

    .venv/bin/python bench/vector_recall_bench.py [--items 100000] [--queries 200]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from sqlalchemy import insert

from connectors.sql.lexical import FullTextConnector
from connectors.sql.vectors import EXACT_MAX, VectorIndex
from core.constraints import ItemFilter
from core.records import RecallQuery
from core.store import open_store, writer
from core.tables import Item, ItemPrincipal, ItemVector

SHARES = {"p100": 1.0, "p50": 0.5, "p5": 0.05, "p1": 0.01, "p01": 0.001}
DIMS = 384
MODEL = "synthetic-clustered"


def vectors(rng: np.random.Generator, n: int, centroids: np.ndarray, noise: float) -> np.ndarray:
    picks = centroids[rng.integers(0, len(centroids), n)]
    rows = picks + rng.normal(0, noise, (n, DIMS))
    unit: np.ndarray = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    return unit


def load(engine, n: int, rng: np.random.Generator, centroids: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    data = vectors(rng, n, centroids, noise=0.35)
    draws = rng.random(n)
    item, principal, vector = Item.__table__, ItemPrincipal.__table__, ItemVector.__table__  # type: ignore[attr-defined]
    chunk = 10_000
    stamp = time.time_ns()  # as the embedding worker stamps what it writes
    with writer(engine).begin() as conn:
        for start in range(0, n, chunk):
            stop = min(start + chunk, n)
            conn.execute(
                insert(item),
                [
                    {
                        "pk": i + 1,
                        "tenant": "t",
                        "id": f"v{i}",
                        "kind": "document",
                        "text": "",
                        "tags": [],
                        "acl": [f"group:{name}" for name, share in SHARES.items() if draws[i] < share],
                        "scope": [],
                        "scoped": False,
                        "sensitivity": "internal",
                        "authority": "unreviewed",
                        "status": "active",
                        "content_hash": "h",
                    }
                    for i in range(start, stop)
                ],
            )
            conn.execute(
                insert(principal),
                [
                    {"item_pk": i + 1, "principal": f"group:{name}"}
                    for i in range(start, stop)
                    for name, share in SHARES.items()
                    if draws[i] < share
                ],
            )
            conn.execute(
                insert(vector),
                [
                    {
                        "item_pk": i + 1,
                        "model": MODEL,
                        "dims": DIMS,
                        "vector": data[i].tobytes(),
                        "content_hash": "h",
                        "seq": stamp,
                    }
                    for i in range(start, stop)
                ],
            )


def constraints(group: str) -> ItemFilter:
    return ItemFilter(
        tenant="t",
        principals=(f"group:{group}",),
        sensitivities=("internal",),
        valid_at=datetime(2026, 11, 30, tzinfo=timezone.utc),
        scopes=("any",),
        kinds=("document",),
        statuses=("active",),
    )


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(values, p)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    centroids = rng.normal(0, 1, (300, DIMS))
    with tempfile.TemporaryDirectory() as tmp:
        engine = open_store(f"sqlite:///{Path(tmp) / 'vectors.db'}")
        started = time.perf_counter()
        load(engine, args.items, rng, centroids)
        print(f"loaded {args.items} items with {DIMS}-d clustered vectors in {time.perf_counter() - started:.1f} s")
        lexical = FullTextConnector(engine)
        assert lexical.text is not None
        lexical.text.build_now_max = 10**9
        started = time.perf_counter()
        index = VectorIndex(engine, MODEL, DIMS, admitted=lexical.admitted)
        with engine.connect() as conn:
            lexical.text.state(conn, "t")
        print(f"lexical index (the admitted rows' lister) built in {time.perf_counter() - started:.1f} s")
        queries = vectors(rng, args.queries, centroids, noise=0.45)
        warm = RecallQuery(vector=tuple(map(float, queries[0])), model=MODEL, limit=args.k)
        started = time.perf_counter()
        index.nearest(constraints("p100"), warm, "approximate")  # mirror load + HNSW build
        print(f"index mirror and HNSW graph built in {time.perf_counter() - started:.1f} s (ann_min_items={index.ann_min_items})")
        print(
            f"\n{'permitted':>9} {'auto uses':>12} {'recall@10 auto':>15} {'recall@10 ann':>14}   "
            f"{'exact p50/p95 ms':>17} {'listed p50/p95':>15} {'ann p50/p95 ms':>15} {'auto p50/p95 ms':>16}  auto p50 vs exact"
        )
        for group, share in SHARES.items():
            times: dict[str, list[float]] = {"exact": [], "listed": [], "approximate": [], "auto": []}
            recall: dict[str, list[float]] = {"listed": [], "approximate": [], "auto": []}
            used: dict[str, int] = {}
            for q in queries:
                query = RecallQuery(vector=tuple(map(float, q)), model=MODEL, limit=args.k)
                found = {}
                for strategy in ("exact", "listed", "approximate", "auto"):
                    index.exact_max = 10**9 if strategy == "listed" else EXACT_MAX
                    t = time.perf_counter()
                    best, actual = index.nearest(constraints(group), query, "auto" if strategy == "listed" else strategy)  # type: ignore[arg-type]
                    times[strategy].append((time.perf_counter() - t) * 1000)
                    found[strategy] = {pk for pk, _ in best}
                    if strategy == "auto":
                        used[actual] = used.get(actual, 0) + 1
                truth = found["exact"]
                for strategy in ("listed", "approximate", "auto"):
                    recall[strategy].append(len(found[strategy] & truth) / max(1, len(truth)))
            mostly = max(used, key=lambda s: used[s])
            ratio = statistics.median(times["auto"]) / statistics.median(times["exact"])
            print(
                f"{share:>9.1%} {mostly:>12} {statistics.mean(recall['auto']):>15.3f} {statistics.mean(recall['approximate']):>14.3f}   "
                f"{pct(times['exact'], 50):>8.1f}/{pct(times['exact'], 95):<8.1f} {pct(times['listed'], 50):>7.1f}/{pct(times['listed'], 95):<7.1f} "
                f"{pct(times['approximate'], 50):>7.1f}/{pct(times['approximate'], 95):<7.1f} "
                f"{pct(times['auto'], 50):>8.1f}/{pct(times['auto'], 95):<7.1f}  {ratio:.2f}x"
            )
        engine.dispose()


if __name__ == "__main__":
    main()
