"""pgvector's HNSW and IVFFlat indexes on the same rows: the semantic stage's cost for one caller.

On the databases `bench/scale_bench.py --postgres` leaves in `--work` (`scale_N`, HNSW) and its
`--pgvector-index ivfflat` copies (`scale_N_ivfflat`), the connector's own search (`_search`, the
plan the service runs: admitted rows counted, then exact ranking or the index) is timed for one
caller on the same SciFact claims, the two indexes alternating (who goes first rotates), after a
few warm-up claims each. Reported per index: p50 and p95 ms, the plans, and how many of the limit
the two answers share.

    .venv/bin/python bench/pgvector_index_bench.py --work /tmp/scale-pg --size 1000000 --caller 50% --queries 30
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import code_revision, percentile, scifact  # noqa: E402
from scale_bench import CALLERS, SERVICE_LIMIT, WARMUP, backend, caller_filter, rotated  # noqa: E402

from core.records import RecallQuery  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data-set", type=Path, default=Path("/work/shared/data/scifact"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/scale-bench"))
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--caller", choices=tuple(CALLERS), default="50%")
    parser.add_argument("--queries", type=int, default=30)
    args = parser.parse_args()

    from connectors.sql.pgvector import PgvectorConnector
    from core.store import open_store
    from gateway.settings import load_settings
    from gateway.writes.embeddings import load_embedder

    _, claims = scifact(args.data_set, 10**9)
    warmups, claims = claims[:WARMUP], claims[WARMUP : WARMUP + args.queries]
    embedder, why = load_embedder(load_settings({"data_dir": Path(tempfile.mkdtemp(prefix="pgv-index-"))}, environ={}))
    if embedder is None:
        raise SystemExit(f"no embedding model: {why}")

    def query(claim: str) -> RecallQuery:
        vector = tuple(float(x) for x in embedder.embed([claim])[0])
        return RecallQuery(text=claim, vector=vector, model=embedder.model_id, limit=SERVICE_LIMIT)

    where = caller_filter(args.caller)
    with backend(True, args.work) as database:
        assert database is not None
        engines = {
            "hnsw": open_store(database(f"scale_{args.size}")),
            "ivfflat": open_store(database(f"scale_{args.size}_ivfflat")),
        }
        connectors = {
            index: PgvectorConnector(engine, embedder.model_id, embedder.dims, index=index) for index, engine in engines.items()
        }
        print(
            f"pgvector index bench: code {code_revision()}, {os.cpu_count()} cores, {args.size:,} items, caller {args.caller}, "
            f"limit {SERVICE_LIMIT}, {len(claims)} claims",
            flush=True,
        )
        for claim in warmups:
            for connector in connectors.values():
                connector._search(where, query(claim))
        samples: dict[str, list[float]] = {index: [] for index in connectors}
        plans: dict[str, Counter[str]] = {index: Counter() for index in connectors}
        shared: list[int] = []
        for turn, claim in enumerate(claims):
            asked = query(claim)  # embedded once, outside the clock
            found: dict[str, set[str]] = {}
            for index in rotated(list(connectors), turn):
                started = time.perf_counter()
                candidates, plan = connectors[index]._search(where, asked)
                samples[index].append((time.perf_counter() - started) * 1000)
                plans[index][plan] += 1
                found[index] = {c.record.id for c in candidates}
            shared.append(len(found["hnsw"] & found["ivfflat"]))
        for index, values in samples.items():
            print(
                f"  {index:>7}: p50 {percentile(values, 50):7.1f} ms, p95 {percentile(values, 95):7.1f} ms, plans {dict(plans[index])}",
                flush=True,
            )
        print(f"  answers in common (of {SERVICE_LIMIT}): p50 {percentile([float(n) for n in shared], 50):.0f}", flush=True)
        for engine in engines.values():
            engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
