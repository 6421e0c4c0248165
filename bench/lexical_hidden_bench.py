"""Lexical search time against items its caller may not read (issue 30).

Three stores of one tenant on the embedded default (SQLite), each holding the SciFact corpus (public
data we did not write) readable by the caller:

- `alone`: nothing else;
- `hidden, other words`: plus N items the caller may not read, with text that shares no word with
  the queries (the tenant is as large, the matches are not);
- `hidden, same words`: plus N items the caller may not read that are copies of SciFact abstracts,
  so they hold the claims' words as often as the corpus does, interleaved with the readable ones.

The hidden items are hidden each way the filter decides without a clock (another group's ACL, a
sensitivity above the caller's, a scope the task lacks, a status it does not read). Each SciFact
claim is searched through the lexical connector on all three stores in turn, and the benchmark
reports the p50 and p95 of each against `alone` (target for `hidden, same words`: at most 1.5x),
whether any claim's status differed, and how much of each claim's top 50 is the same as `alone`'s
(not all of it: BM25's document frequencies count hidden items too, so scores move; see
docs/http-api.md, "Lexical search never ranks what the caller may not see").

    .venv/bin/python bench/lexical_hidden_bench.py --data-set /work/shared/data/scifact            # 10,000 hidden
    .venv/bin/python bench/lexical_hidden_bench.py --data-set /work/shared/data/scifact --hidden 2000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors.sql.lexical import FullTextConnector  # noqa: E402
from core.constraints import ItemFilter  # noqa: E402
from core.records import RecallQuery  # noqa: E402
from core.store import close_store, open_store  # noqa: E402
from gateway.writes.items import ingest  # noqa: E402

TENANT = "scifact"
CALLER = ItemFilter(
    tenant=TENANT,
    principals=("*", "user:reader", "group:sales"),
    sensitivities=("public", "internal"),
    valid_at=datetime(2026, 12, 1, tzinfo=timezone.utc),
    scopes=("sales",),
    kinds=("memory", "document"),
    statuses=("active",),
)
HIDE = ({"acl": ["group:finance"]}, {"sensitivity": "restricted"}, {"scope": ["hr"]}, {"status": "retracted"})
OTHER_WORDS = "zephyr quillon brambleton cassowary fennimore glockenspiel marquetry obsidian"


def load(data_set: Path, claims: int) -> tuple[list[dict[str, Any]], list[str]]:
    corpus = [json.loads(line) for line in (data_set / "corpus.jsonl").open()]
    queries = [json.loads(line)["text"] for line in (data_set / "queries.jsonl").open()]
    random.Random(7).shuffle(queries)
    return corpus, queries[:claims]


def readable(corpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"id": f"doc_{doc['_id']}", "kind": "memory", "acl": ["*"], "text": f"{doc.get('title', '')} {doc['text']}"[:4000]}
        for doc in corpus
    ]


def hidden(corpus: list[dict[str, Any]], n: int, same_words: bool) -> list[dict[str, Any]]:
    rng = random.Random(11)
    items = []
    for i in range(n):
        text = readable([rng.choice(corpus)])[0]["text"] if same_words else " ".join(rng.choices(OTHER_WORDS.split(), k=120))
        items.append({"id": f"hidden_{i}", "kind": "memory", "acl": ["*"], **HIDE[i % len(HIDE)], "text": text})
    return items


def build(directory: Path, items: list[dict[str, Any]]) -> Any:
    engine = open_store(f"sqlite:///{directory / 'store.db'}")
    rows = list(items)
    random.Random(3).shuffle(rows)  # hidden and readable rows interleave, as they would in a real tenant
    for start in range(0, len(rows), 2000):
        report = ingest(engine, TENANT, rows[start : start + 2000])
        assert not report.rejected, report.rejected[:3]
    with engine.begin() as conn:  # what FTS5's automerge would reach over time, the same for every store
        for (name,) in conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE name LIKE 'item_fts_%' AND sql LIKE 'CREATE VIRTUAL%'"
        ):
            conn.exec_driver_sql(f"INSERT INTO {name}({name}) VALUES ('optimize')")
    return engine


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-set", type=Path, required=True, help="the SciFact directory (BEIR layout)")
    parser.add_argument("--hidden", type=int, default=10_000, help="items the caller may not read (default 10,000)")
    parser.add_argument("--claims", type=int, default=300, help="claims searched (default 300)")
    parser.add_argument("--rounds", type=int, default=3, help="times each claim is searched per store")
    args = parser.parse_args()
    corpus, claims = load(args.data_set, args.claims)
    stores = {
        "alone": readable(corpus),
        "hidden, other words": readable(corpus) + hidden(corpus, args.hidden, same_words=False),
        "hidden, same words": readable(corpus) + hidden(corpus, args.hidden, same_words=True),
    }
    with tempfile.TemporaryDirectory() as tmp:
        engines = {}
        for name, items in stores.items():
            started = time.perf_counter()
            (Path(tmp) / name).mkdir()
            engines[name] = build(Path(tmp) / name, items)
            print(f"loaded {name!r}: {len(items):,} items in {time.perf_counter() - started:.0f} s")
        connectors = {name: FullTextConnector(engine) for name, engine in engines.items()}
        times: dict[str, list[float]] = {name: [] for name in stores}
        differing, overlap = 0, list[float]()

        async def run() -> None:
            nonlocal differing
            for claim in claims:  # warm-up: every statement built, every page cached
                for connector in connectors.values():
                    await connector.search(CALLER, RecallQuery(text=claim, limit=50))
            for _ in range(args.rounds):
                for claim in claims:
                    answers = {}
                    for name, connector in connectors.items():  # interleaved: drift hits every store alike
                        started = time.perf_counter()
                        result = await connector.search(CALLER, RecallQuery(text=claim, limit=50))
                        times[name].append((time.perf_counter() - started) * 1000)
                        answers[name] = (result.status, {c.record.id for c in result.candidates})
                    differing += len({status for status, _ in answers.values()}) > 1
                    alone = answers["alone"][1]
                    overlap.extend(len(found & alone) / len(found | alone) for _, found in answers.values() if found | alone)

        asyncio.run(run())
        for engine in engines.values():
            close_store(engine)
    base50, base95 = statistics.median(times["alone"]), percentile(times["alone"], 0.95)
    print(
        f"\n=== lexical search, {len(claims)} SciFact claims x {args.rounds}, {len(corpus):,} readable abstracts, "
        f"{args.hidden:,} items the caller may not read ==="
    )
    print(f"{'store':<22} {'p50 ms':>8} {'p95 ms':>8} {'p50 ratio':>10} {'p95 ratio':>10}")
    for name, values in times.items():
        p50, p95 = statistics.median(values), percentile(values, 0.95)
        print(f"{name:<22} {p50:>8.2f} {p95:>8.2f} {p50 / base50:>9.2f}x {p95 / base95:>9.2f}x")
    print(f"claims whose lexical status differed between stores: {differing} of {len(claims) * args.rounds}")
    print(f"top-50 overlap with 'alone' (Jaccard, mean over claims and stores): {statistics.mean(overlap):.3f}")
    print("target: 'hidden, same words' p50 and p95 at most 1.5x 'alone'")


if __name__ == "__main__":
    main()
