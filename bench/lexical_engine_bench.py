"""Lexical search's engines side by side (issue 57): Tantivy (the default) and FTS5, at the
connector, on public text: SciFact's quality and the cost of a search as the store grows.

1. **Quality**: SciFact's 5,183 abstracts, every training claim with qrels, lexical search only
   (the connector, everyone's filter, 100 results): nDCG@10 and recall@100 for each engine.
2. **Cost by size and share**: the abstracts and their tagged copies grown to each `--sizes`, each
   row readable by one of 1,000 groups and one of 2, searched by callers admitted to 0.1%, 1% and
   50% of the rows with SciFact claims (limit 10): p50/p95 per engine, against the engine's own floor
   in the same run (Tantivy: the bare top-k query with the filter inside it; FTS5: the bare
   `MATCH ... ORDER BY bm25 LIMIT` with the `vis` filter), and Tantivy's top 10 against its
   exhaustive ranking of every admitted match (recall@10). Plus the Tantivy index's build time and
   the process's peak RSS.

    .venv/bin/python bench/lexical_engine_bench.py                                  # 1k,10k,100k (~10 min)
    .venv/bin/python bench/lexical_engine_bench.py --sizes 1000,1000000 --queries 100
"""

from __future__ import annotations

import argparse
import asyncio
import math
import resource
import sys
import tempfile
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import code_revision, percentile  # noqa: E402
from quality_bench import read_data_set  # noqa: E402

from connectors.sql.lexical import FullTextConnector, query_terms, visibility_groups, visible_match  # noqa: E402
from connectors.sql.text_index import TextIndex  # noqa: E402
from core.constraints import ItemFilter  # noqa: E402
from core.records import RecallQuery  # noqa: E402
from core.store import lexical_table, open_store  # noqa: E402
from gateway.writes.items import ingest  # noqa: E402

TENANT = "bench"
CHUNK = 5_000
EVERYONE = ItemFilter(
    tenant=TENANT,
    principals=("*",),
    sensitivities=("public", "internal", "confidential"),
    valid_at=datetime(2026, 12, 7, tzinfo=timezone.utc),
    scopes=(),
    kinds=("document",),
    statuses=("active",),
    subjects=(),
)
CALLERS = {
    "0.1%": ("group:s0",),
    "1%": tuple(f"group:s{n}" for n in range(10)),
    "50%": ("group:h0",),
}


def ndcg(ranking: list[str], gains: dict[str, int], k: int = 10) -> float:
    dcg = sum(gains.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranking[:k]))
    ideal = sum(g / math.log2(i + 2) for i, g in enumerate(sorted(gains.values(), reverse=True)[:k]))
    return dcg / ideal if ideal else 0.0


def search(connector: FullTextConnector, where: ItemFilter, claim: str, limit: int) -> tuple[float, list[str]]:
    started = time.perf_counter()
    result = asyncio.run(connector.search(where, RecallQuery(text=claim, limit=limit)))
    return (time.perf_counter() - started) * 1000, [c.record.id for c in result.candidates]


def quality(data_set: Path, work: Path) -> None:
    data = read_data_set(data_set)
    engine = open_store(f"sqlite:///{work}/quality.db")
    rows = [
        {"id": d["_id"], "kind": "document", "section": d["title"], "text": f"{d['title']}\n{d['text']}", "acl": ["*"]}
        for d in data.corpus
    ]
    for start in range(0, len(rows), CHUNK):
        assert not ingest(engine, TENANT, rows[start : start + CHUNK]).rejected
    print(f"quality: SciFact train, {len(data.queries)} claims with qrels, {len(rows):,} abstracts, lexical only")
    for name in ("tantivy", "fts5"):
        connector = FullTextConnector(engine, name)
        scores, recalls = [], []
        for query_id, claim in data.queries:
            _, ranking = search(connector, EVERYONE, claim, 100)
            gains = data.qrels[query_id]
            scores.append(ndcg(ranking, gains))
            recalls.append(len(set(ranking) & set(gains)) / len(gains))
        print(f"  {name:8} nDCG@10 {sum(scores) / len(scores):.3f}   recall@100 {sum(recalls) / len(recalls):.3f}")
    engine.dispose()


def grown(data_set: Path, start: int, stop: int) -> list[dict[str, Any]]:
    data = read_data_set(data_set)
    docs = data.corpus
    out = []
    for i in range(start, stop):
        d, copy = docs[i % len(docs)], i // len(docs)
        out.append(
            {
                "id": f"{d['_id']}_{copy}",
                "kind": "document",
                "tags": [f"copy{copy}"],
                "text": f"{d['title']}\n{d['text']}",
                "acl": [f"group:s{i % 1000}", f"group:h{i % 2}"],
            }
        )
    return out


def tantivy_floor(text_index: TextIndex, where: ItemFilter, claim: str) -> float:
    index = text_index.state_of(TENANT)
    groups = visibility_groups(where)
    assert index is not None and groups is not None
    started = time.perf_counter()
    text_index.search(index, query_terms(claim), groups, 50)
    return (time.perf_counter() - started) * 1000


def fts5_floor(engine: Any, where: ItemFilter, claim: str) -> float:
    match = visible_match(query_terms(claim), where)
    table = lexical_table(TENANT)
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        started = time.perf_counter()
        raw.execute(
            f"SELECT rowid, bm25({table}, 1.0, 0.0) AS s FROM {table} WHERE {table} MATCH ? ORDER BY s LIMIT 50", (match,)
        ).fetchall()
        return (time.perf_counter() - started) * 1000


def cost(data_set: Path, work: Path, sizes: list[int], queries: int) -> None:
    data = read_data_set(data_set)
    claims = [claim for _, claim in data.queries][:queries]
    engine = open_store(f"sqlite:///{work}/scale.db")
    loaded = 0
    print(f"\ncost: {len(claims)} claims a caller, limit 10; ms p50 / p95 (x the engine's own floor, p50)")
    for size in sizes:
        for start in range(loaded, size, CHUNK):
            assert not ingest(engine, TENANT, grown(data_set, start, min(size, start + CHUNK))).rejected
        loaded = size
        tantivy, fts5 = FullTextConnector(engine, "tantivy"), FullTextConnector(engine, "fts5")
        assert tantivy.text is not None
        started = time.perf_counter()
        with engine.connect() as conn:
            tantivy.text.build_now_max = 10**9
            tantivy.text.state(conn, TENANT)
        build_s = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"\n{size:,} items (Tantivy index built in {build_s:.1f} s; process peak RSS {peak:,.0f} MiB)")
        for caller, groups in CALLERS.items():
            where = replace(EVERYONE, principals=groups)
            line = f"  {caller:>5}"
            for name, connector in (("tantivy", tantivy), ("fts5", fts5)):
                for claim in claims[:5]:
                    search(connector, where, claim, 10)
                times = [search(connector, where, claim, 10)[0] for claim in claims]
                floors = [
                    tantivy_floor(tantivy.text, where, claim) if name == "tantivy" else fts5_floor(engine, where, claim)
                    for claim in claims
                ]
                p50 = percentile(times, 50)
                line += f"   {name} {p50:7.2f} / {percentile(times, 95):7.2f} ms ({p50 / percentile(floors, 50):4.1f}x floor {percentile(floors, 50):.2f})"
            hits = total = 0
            for claim in claims:
                top = search(tantivy, where, claim, 10)[1]
                everything = search(tantivy, where, claim, 1000)[1][:10]
                hits, total = hits + len(set(top) & set(everything)), total + len(everything)
            print(line + f"   recall@10 vs exhaustive {hits / max(total, 1):.3f}", flush=True)
    engine.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data-set", type=Path, default=Path("/work/shared/data/scifact"))
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--skip-quality", action="store_true")
    args = parser.parse_args()
    print(f"lexical engines: code {code_revision()}")
    with tempfile.TemporaryDirectory(prefix="lexical-engines-") as tmp:
        if not args.skip_quality:
            quality(args.data_set, Path(tmp))
        cost(args.data_set, Path(tmp), sorted(int(s) for s in args.sizes.split(",")), args.queries)
    return 0


if __name__ == "__main__":
    sys.exit(main())
