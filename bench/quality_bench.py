"""Retrieval quality benchmark: SciFact through the real service, lexical vs semantic vs fused vs reranked.

Loads the SciFact corpus (BEIR layout) through `PUT /v1/items` once; then, for each embedding model
(`--models`, default bge-small and minilm), embeds it with `gateway embed` and sends every training
claim that has qrels to `POST /v1/retrieve` as semantic only, fused (GATEWAY_RERANK=off) and
reranked (the default, GATEWAY_RERANK=vectors), and once lexical only; it scores the order of
`items` with nDCG@10 and recall@100. With `--floor-zero`, semantic, fused and reranked run again
with the semantic floor at 0 so ranking quality and the cost of abstention show separately. Run
from the project root with the project's venv:

    .venv/bin/python bench/quality_bench.py --data-set /work/shared/data/scifact --queries 100   # quick
    .venv/bin/python bench/quality_bench.py --data-set /work/shared/data/scifact                 # all 809 claims

The data set is read where it lies and never copied into the project. See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import harness
import httpx
from harness import Server, bench_dir, clean_env, code_revision, free_port, gateway_executable, interrupted, load_through_api
from sqlalchemy import text

from core.store import open_store

TENANT = "scifact"
ID_PREFIX = "scifact_"
LIMIT = 100
BUDGET_BYTES = 200_000
NDCG_K = 10
RECALL_K = 100
RATE_LIMITED_RETRIES = 20
RETRIES = 2  # sequential re-asks of an answer whose source timed out under concurrent load
# A task whose policy does not mask personal data: this benchmark scores ids, and masking would make
# every query analyse its ~100 abstracts at request time (the PII benchmark measures masking).
TASK = {"type": "compliance_review"}
MODES = {
    "lexical": {"exact": False, "lexical": True, "semantic": False},
    "semantic": {"exact": False, "lexical": False, "semantic": True},
    "fused": {"exact": False, "lexical": True, "semantic": True},
    "reranked": {"exact": False, "lexical": True, "semantic": True},
}
RERANK = {"semantic": "off", "fused": "off", "reranked": "vectors"}  # GATEWAY_RERANK of each mode's server
MODEL_ENV: dict[str, str] = {}  # GATEWAY_EMBEDDINGS of every subprocess (the model being measured)
BM25_TEST_REFERENCE = 0.665  # BEIR paper, SciFact *test* split, nDCG@10

# ---------------------------------------------------------------- data set


@dataclass(frozen=True, slots=True)
class DataSet:
    corpus: list[dict[str, str]]
    queries: list[tuple[str, str]]  # (query id, claim), only those with qrels, file order
    qrels: dict[str, dict[str, int]]  # query id -> corpus id -> graded gain


def read_data_set(path: Path, split: str = "train") -> DataSet:
    corpus_path, queries_path, qrels_path = path / "corpus.jsonl", path / "queries.jsonl", path / "qrels" / f"{split}.tsv"
    for required in (corpus_path, queries_path, qrels_path):
        if not required.is_file():
            raise SystemExit(f"--data-set: {required} is missing (expected the BEIR layout)")
    with open(corpus_path, encoding="utf-8") as handle:
        corpus = [json.loads(line) for line in handle if line.strip()]
    qrels: dict[str, dict[str, int]] = {}
    with open(qrels_path, encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            if int(row["score"]) > 0:
                qrels.setdefault(row["query-id"], {})[row["corpus-id"]] = int(row["score"])
    with open(queries_path, encoding="utf-8") as handle:
        queries = [(q["_id"], q["text"]) for q in map(json.loads, filter(str.strip, handle)) if q["_id"] in qrels]
    return DataSet(corpus, queries, qrels)


def corpus_items(corpus: list[dict[str, str]]) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{ID_PREFIX}{doc['_id']}",
            "kind": "document",
            "document": doc["_id"],
            "section": doc["title"],
            "text": f"{doc['title']}\n{doc['text']}",
            "acl": ["*"],
        }
        for doc in corpus
    ]


# ---------------------------------------------------------------- the gateway as subprocesses


def create_key(data_dir: Path, principal: str, role: str) -> str:
    return harness.create_key(data_dir, TENANT, principal, role, groups="compliance")  # compliance_review is granted to it


def embed_cli(data_dir: Path) -> tuple[int, float]:
    """`gateway embed --threads 2`; its progress bar goes to our stderr. Returns (items embedded, seconds)."""
    print("Embedding with `gateway embed --threads 2` (server stopped)...", flush=True)
    started = time.perf_counter()
    done = subprocess.run(
        [gateway_executable(), "embed", "--data", str(data_dir), "--threads", "2"],
        stdout=subprocess.PIPE,
        text=True,
        env=clean_env(MODEL_ENV),
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"gateway embed failed with code {done.returncode}: {done.stdout.strip()}")
    print(f"  {done.stdout.strip()}", flush=True)
    first = done.stdout.strip().split()
    return (int(first[0]) if first and first[0].isdigit() else 0), seconds


def started_server(data_dir: Path, env: dict[str, str], label: str) -> Server:
    server = Server(data_dir, free_port(), env={**MODEL_ENV, **env}, label=f"quality-{label}")
    server.start()
    server.wait_ready()
    return server


# ---------------------------------------------------------------- the store


def model_of(kind: str) -> tuple[str, float]:
    """The model id and default semantic floor of GATEWAY_EMBEDDINGS=`kind` (loaded in this process)."""
    from gateway.settings import load_settings
    from gateway.writes.embeddings import load_embedder

    embedder, note = load_embedder(load_settings({"embeddings": kind}))
    if embedder is None or note:
        raise SystemExit(f"--models {kind}: {note}")
    return embedder.model_id, float(getattr(embedder, "floor"))


def store_state(data_dir: Path) -> tuple[int, int, int]:
    """(items of any tenant, scifact documents, scifact documents with a current vector of the model
    being measured); no server running."""
    current = model_of(MODEL_ENV["GATEWAY_EMBEDDINGS"])[0]
    engine = open_store(f"sqlite:///{(data_dir / 'gateway.db').resolve()}")
    try:
        with engine.connect() as conn:
            total = int(conn.execute(text("SELECT count(*) FROM item")).scalar_one())
            ours = int(
                conn.execute(
                    text("SELECT count(*) FROM item WHERE tenant = :t AND kind = 'document'"), {"t": TENANT}
                ).scalar_one()
            )
            embedded = int(
                conn.execute(
                    text(
                        "SELECT count(*) FROM item JOIN item_vector v ON v.item_pk = item.pk AND v.content_hash = item.content_hash "
                        "WHERE item.tenant = :t AND item.kind = 'document' AND v.model = :m"
                    ),
                    {"t": TENANT, "m": current},
                ).scalar_one()
            )
    finally:
        engine.dispose()
    return total, ours, embedded


# ---------------------------------------------------------------- retrieving


@dataclass(slots=True)
class Answer:
    query_id: str
    status: int
    ranking: list[str] = field(default_factory=list)  # corpus ids, in the order of `items`
    budget_dropped: int = 0
    source_status: dict[str, str] = field(default_factory=dict)
    lag: int | None = None
    strategy: str | None = None  # the semantic connector's search: "exact" or "approximate" (HNSW)
    ms: float = 0.0
    error: str | None = None
    waited: int = 0  # 429s waited out before this answer (admission: one actor's concurrent heavy calls)


@dataclass(slots=True)
class Run:
    mode: str
    floor: float
    answers: list[Answer]
    wall_s: float
    code: str = "unknown"
    model: str = "-"
    retried: int = 0  # answers with a timed-out source, asked again one at a time


def body_for(claim: str, mode: str) -> dict[str, Any]:
    return {"task": TASK, "query": claim, "limit": LIMIT, "budget": {"bytes": BUDGET_BYTES}, "sources": MODES[mode]}


async def ask(client: httpx.AsyncClient, query_id: str, claim: str, mode: str) -> Answer:
    """One claim, asked as a well-behaved client asks: a 429 is waited out (its Retry-After) and
    asked again, up to RATE_LIMITED_RETRIES times; `waited` counts those."""
    waited = 0
    while True:
        started = time.perf_counter()
        try:
            response = await client.post("/v1/retrieve", json=body_for(claim, mode))
        except httpx.HTTPError as exc:  # counted as a failure (status 0), never silently skipped
            return Answer(query_id, 0, ms=(time.perf_counter() - started) * 1000, error=f"{type(exc).__name__}: {exc}")
        if response.status_code != 429 or waited >= RATE_LIMITED_RETRIES:
            break
        waited += 1
        await asyncio.sleep(float(response.headers.get("retry-after") or 1))
    ms = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        return Answer(query_id, response.status_code, ms=ms, error=response.text[:300])
    payload = response.json()
    ranking = [item["id"].removeprefix(ID_PREFIX) for item in payload["items"]]
    per_source = payload["budget"].get("per_source") or {}
    sources = payload["sources"]
    return Answer(
        query_id,
        200,
        ranking,
        budget_dropped=sum(int(stats.get("dropped", 0)) for stats in per_source.values()),
        source_status={name: entry["status"] for name, entry in sources.items() if entry["status"] != "skipped"},
        lag=sources.get("semantic", {}).get("lag"),
        strategy=next(
            (word for word in ("exact", "approximate") if f"{word} search" in (sources.get("semantic", {}).get("detail") or "")),
            None,
        ),
        ms=ms,
        waited=waited,
    )


async def run_mode(url: str, key: str, queries: list[tuple[str, str]], mode: str, floor: float, concurrency: int) -> Run:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    answers: list[Answer] = []
    jobs = iter(queries)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, limits=limits, timeout=60) as client:

        async def worker() -> None:
            for query_id, claim in jobs:
                answers.append(await ask(client, query_id, claim, mode))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
        # A source over the connector deadline (GATEWAY_CONNECTOR_DEADLINE_MS, 250 ms) makes a partial answer:
        # that is the service's latency under this load, not its ranking. Ask those again, alone.
        claims = dict(queries)
        retried = 0
        for attempt in range(RETRIES):
            for index, answer in enumerate(answers):
                if "timeout" in answer.source_status.values():
                    retried += attempt == 0
                    answers[index] = await ask(client, answer.query_id, claims[answer.query_id], mode)
    waited = sum(answer.waited for answer in answers)
    print(
        f"  {mode:<8} floor {floor:.2f}: {len(answers)} queries in {wall:.1f} s ({len(answers) / wall:.1f} req/s)"
        + (f"; {retried} answers with a timed-out source asked again one at a time" if retried else "")
        + (f"; {waited} 429s waited out (Retry-After) and asked again" if waited else ""),
        flush=True,
    )
    return Run(mode, floor, answers, wall, retried=retried)


def wait_for_vectors(url: str, key: str, claim: str, timeout_s: float = 600) -> None:
    """Warm the vector index and make sure the worker reports nothing waiting (lag absent or 0)."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
        while True:
            payload = client.post("/v1/retrieve", json=body_for(claim, "semantic")).json()
            semantic = payload.get("sources", {}).get("semantic", {})
            if semantic.get("status") == "timeout" and time.monotonic() < deadline:
                time.sleep(1)  # a cold first search on a busy machine: warm it, ask again
                continue
            if semantic.get("status") not in ("ok", "empty"):
                raise SystemExit(f"semantic source is {semantic.get('status')}: {semantic.get('detail')}")
            if not semantic.get("lag"):
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"still {semantic['lag']} items waiting for a vector after {timeout_s:.0f} s")
            print(f"  waiting for the embedding worker: {semantic['lag']} items left", flush=True)
            time.sleep(2.5)  # the worker counts its lag every 2 s


# ---------------------------------------------------------------- scoring


def ndcg(ranking: list[str], gains: dict[str, int], k: int = NDCG_K) -> float:
    """BEIR / trec_eval nDCG@k: linear graded gains, log2(rank + 1) discount, ideal from the qrels."""
    dcg = sum(gains.get(doc, 0) / math.log2(rank + 1) for rank, doc in enumerate(ranking[:k], start=1))
    ideal = sum(gain / math.log2(rank + 1) for rank, gain in enumerate(sorted(gains.values(), reverse=True)[:k], start=1))
    return dcg / ideal if ideal else 0.0


def recall(ranking: list[str], gains: dict[str, int], k: int = RECALL_K) -> float:
    relevant = {doc for doc, gain in gains.items() if gain > 0}
    return len(relevant & set(ranking[:k])) / len(relevant) if relevant else 0.0


@dataclass(frozen=True, slots=True)
class Scores:
    ndcg: float
    recall: float
    abstained: int
    mean_items: float
    budget_cut: int  # answers with fewer than RECALL_K items because the budget dropped some
    budget_any: int  # answers where the budget dropped anything
    failed: int  # non-200 answers (scored as empty)
    degraded: Counter[str]  # "source:status" for timeouts and errors
    p50_ms: float
    strategies: Counter[str]


def score(run: Run, qrels: dict[str, dict[str, int]]) -> Scores:
    answers = run.answers
    n = len(answers) or 1
    degraded: Counter[str] = Counter()
    for answer in answers:
        for source, status in answer.source_status.items():
            if status in ("timeout", "error"):
                degraded[f"{source}:{status}"] += 1
    latencies = sorted(a.ms for a in answers)
    return Scores(
        ndcg=sum(ndcg(a.ranking, qrels[a.query_id]) for a in answers) / n,
        recall=sum(recall(a.ranking, qrels[a.query_id]) for a in answers) / n,
        abstained=sum(1 for a in answers if a.status == 200 and not a.ranking),
        mean_items=sum(len(a.ranking) for a in answers) / n,
        budget_cut=sum(1 for a in answers if a.budget_dropped and len(a.ranking) < RECALL_K),
        budget_any=sum(1 for a in answers if a.budget_dropped),
        failed=sum(1 for a in answers if a.status != 200),
        degraded=degraded,
        p50_ms=latencies[len(latencies) // 2] if latencies else float("nan"),
        strategies=Counter(a.strategy for a in answers if a.strategy),
    )


# ---------------------------------------------------------------- reporting


def report(
    runs: list[Run],
    data: DataSet,
    args: argparse.Namespace,
    load: dict[str, float] | None,
    embed: dict[str, tuple[int, float]],
) -> bool:
    """Print the report; returns False when any request failed or any source timed out / errored."""
    n = len(runs[0].answers)
    scored = [(run, score(run, data.qrels)) for run in runs]
    print(
        f"\n=== retrieval quality: SciFact train split, {n} claims with qrels, {len(data.corpus):,} abstracts, "
        f"limit {LIMIT}, budget {BUDGET_BYTES:,} B, {args.concurrency} clients, {os.cpu_count()} CPUs, "
        f"code {'/'.join(sorted({run.code for run in runs}))} ==="
    )
    if load:
        print(
            f"load:  {len(data.corpus):,} items via PUT /v1/items in {load['batches']:.0f} batches, {load['seconds']:.1f} s "
            f"= {load['rate']:,.0f} items/s (created {load.get('created', 0):.0f}, updated {load.get('updated', 0):.0f}, "
            f"unchanged {load.get('unchanged', 0):.0f}, rejected 0)"
        )
    for model, (count, seconds) in embed.items():
        print(
            f"embed: {count:,} items with {model} via `gateway embed --threads 2`, {seconds:.1f} s = {count / seconds:,.1f} items/s "
            f"(includes model load)"
            if count
            else f"embed: nothing was waiting for a vector of {model}"
        )
    print(
        f"{'model':<12} {'mode':<9} {'floor':>5}  {'nDCG@10':>7}  {'recall@100':>10}  {'abstained':>9}  {'items/q':>7}  "
        f"{'budget-cut':>10}  {'p50 ms':>6}"
    )
    for run, s in scored:
        floor_label = "  -  " if run.mode == "lexical" else f"{run.floor:.2f}"
        print(
            f"{run.model:<12} {run.mode:<9} {floor_label:>5}  {s.ndcg:7.4f}  {s.recall:10.4f}  {s.abstained:>9}  {s.mean_items:7.1f}  "
            f"{s.budget_cut:>10}  {s.p50_ms:6.0f}"
        )
    print(
        f"reference: BM25 nDCG@10 {BM25_TEST_REFERENCE} on the SciFact *test* split (BEIR paper, 300 claims); "
        f"this run uses the *train* split ({n} claims), so the figures are comparable in kind, not to the decimal."
    )
    print(
        "abstained = answers with no items (scored 0 in both metrics); budget-cut = answers with < 100 items "
        f"because the {BUDGET_BYTES:,}-byte budget dropped some "
        f"(any budget drop: {', '.join(f'{r.mode}@{r.floor:.2f} {s.budget_any}' for r, s in scored)})"
    )
    lexical = next((s for run, s in scored if run.mode == "lexical"), None)
    by_key = {(run.model, run.mode, run.floor): s for run, s in scored}
    for model, f in sorted({(run.model, run.floor) for run in runs if run.mode != "lexical"}, key=lambda m: (m[0], -m[1])):
        semantic, fused = by_key.get((model, "semantic", f)), by_key.get((model, "fused", f))
        reranked = by_key.get((model, "reranked", f))
        if not (lexical and semantic and fused and reranked):
            continue
        for metric in ("ndcg", "recall"):
            values = {
                name: getattr(s, metric)
                for name, s in (("lexical", lexical), ("semantic", semantic), ("fused", fused), ("reranked", reranked))
            }
            beats = values["reranked"] > values["lexical"] and values["reranked"] > values["semantic"]
            label = "nDCG@10" if metric == "ndcg" else "recall@100"
            print(
                f"{model} floor {f:.2f}: reranked {label} {values['reranked']:.4f} (fused {values['fused']:.4f}) vs lexical "
                f"{values['lexical']:.4f} / semantic {values['semantic']:.4f} -> reranked "
                f"{'BEATS BOTH' if beats else 'does NOT beat both'}"
            )
    for run, s in scored:
        if s.strategies:
            print(
                f"semantic search, {run.model} {run.mode} floor {run.floor:.2f}: "
                + ", ".join(f"{name} {count}" for name, count in sorted(s.strategies.items()))
            )
    retried = [f"{r.mode}@{r.floor:.2f} {r.retried}" for r in runs if r.retried]
    if retried:
        print(f"re-asked one at a time after a source timeout under {args.concurrency} clients: {', '.join(retried)} answers")
    if len({run.code for run in runs}) > 1:
        print(f"!!! the gateway code changed between passes: {', '.join(f'{r.mode}@{r.floor:.2f} {r.code}' for r in runs)}")
    ok = True
    for run, s in scored:
        if s.failed or s.degraded:
            ok = False
            first = next((a for a in run.answers if a.status != 200), None)
            print(
                f"!!! {run.mode} floor {run.floor:.2f}: {s.failed} failed requests, degraded sources {dict(s.degraded)}"
                + (f"; first failure: HTTP {first.status} {first.error}" if first else "")
            )
    if not ok:
        print("!!! THE FIGURES ABOVE INCLUDE FAILED OR PARTIAL ANSWERS")
    else:
        print(f"errors: none (all {sum(len(r.answers) for r in runs)} responses were 200, no source timed out or failed)")
    return ok


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data-set",
        type=Path,
        required=True,
        help="the SciFact directory (BEIR layout: corpus.jsonl, queries.jsonl, qrels/train.tsv)",
    )
    parser.add_argument("--data", type=Path, help="gateway data directory (default: a fresh temp dir, removed at the end)")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="skip loading (and embedding, when nothing waits) when --data already holds the corpus",
    )
    parser.add_argument("--queries", type=int, help="use the first N claims with qrels (default: all)")
    parser.add_argument("--floor", type=float, help="GATEWAY_SEMANTIC_FLOOR for the first pass (default: the gateway's default)")
    parser.add_argument(
        "--models",
        default="bge-small,minilm",
        help="GATEWAY_EMBEDDINGS values to measure, in order, comma-separated (bge-small, minilm, minilm-float)",
    )
    parser.add_argument("--floor-zero", action="store_true", help="also run semantic, fused and reranked with the floor at 0")
    parser.add_argument("--concurrency", type=int, default=4, help="concurrent clients (default 4)")
    parser.add_argument("--save", type=Path, help="also write every ranking (per mode, floor and claim) to this JSON file")
    args = parser.parse_args(argv)
    if args.queries is not None and args.queries < 1 or args.concurrency < 1:
        parser.error("--queries and --concurrency must be positive")
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not args.models or any(m not in ("bge-small", "minilm", "minilm-float") for m in args.models):
        parser.error("--models: a comma-separated list of bge-small, minilm, minilm-float")
    return args


def prepare(data_dir: Path, data: DataSet, reuse: bool) -> tuple[str, dict[str, float] | None, tuple[int, float] | None]:
    """Keys, then the corpus through the ingest API and `gateway embed`, unless --reuse finds them in place."""
    total, ours, embedded = store_state(data_dir)
    load_stats = embed_stats = None
    if reuse and ours == len(data.corpus) and total == ours:
        print(f"Reusing {ours:,} SciFact items in {data_dir} ({embedded:,} with a current vector)")
    elif total:
        hint = "" if reuse else "; pass --reuse to evaluate it as is"
        raise SystemExit(f"{data_dir} already holds {total} items ({ours} SciFact documents){hint} (or use a fresh --data dir)")
    else:
        ingest_key = create_key(data_dir, "user:scifact-loader", "ingest")
        # Semantic search off while loading, so the load rate is ingest alone and every vector comes from
        # `gateway embed` (no background worker competing for the 2 cores).
        loader = started_server(data_dir, {"GATEWAY_EMBEDDINGS": "none"}, "load")
        try:
            load_stats = load_through_api(loader.url, ingest_key, corpus_items(data.corpus))
        finally:
            loader.stop()
        embedded = store_state(data_dir)[2]
    if embedded < len(data.corpus):
        embed_stats = embed_cli(data_dir)
        if store_state(data_dir)[2] != len(data.corpus):
            raise SystemExit("gateway embed finished but some items still have no current vector")
    agent_key = create_key(data_dir, "user:scifact-agent", "agent")
    return agent_key, load_stats, embed_stats


def evaluate(
    data_dir: Path,
    key: str,
    queries: list[tuple[str, str]],
    floor: float,
    floor_env: dict[str, str],
    modes: tuple[str, ...],
    concurrency: int,
    label: str,
) -> list[Run]:
    server = started_server(data_dir, floor_env, label)
    try:
        print(f"Server ready at {server.url}, semantic floor {floor:.2f} (log: {server.log_path})", flush=True)
        code = code_revision()  # what this server imported (within seconds)
        wait_for_vectors(server.url, key, queries[0][1])
        runs = [asyncio.run(run_mode(server.url, key, queries, mode, floor, concurrency)) for mode in modes]
        for run in runs:
            run.code = code
        return runs
    finally:
        server.stop()


def save(path: Path, runs: list[Run]) -> None:
    """Rankings for offline analysis (e.g. other fusion settings over the lexical and semantic lists)."""
    path.write_text(
        json.dumps(
            [
                {
                    "model": run.model,
                    "mode": run.mode,
                    "floor": run.floor,
                    "answers": [
                        {
                            "query": a.query_id,
                            "status": a.status,
                            "ranking": a.ranking,
                            "budget_dropped": a.budget_dropped,
                            "sources": a.source_status,
                            "strategy": a.strategy,
                        }
                        for a in run.answers
                    ],
                }
                for run in runs
            ]
        )
    )
    print(f"rankings written to {path}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally blocks stop the server
    data = read_data_set(args.data_set)
    queries = data.queries[: args.queries] if args.queries else data.queries
    with bench_dir(args.data, "gateway-quality-") as data_dir:
        runs: list[Run] = []
        embeds: dict[str, tuple[int, float]] = {}
        load_stats = None
        try:
            for number, model in enumerate(args.models):
                # One vector per item: the next model's `gateway embed` re-embeds the whole corpus.
                MODEL_ENV["GATEWAY_EMBEDDINGS"] = model
                _, default_floor = model_of(model)
                floor = default_floor if args.floor is None else args.floor
                floor_env = {} if args.floor is None else {"GATEWAY_SEMANTIC_FLOOR": repr(args.floor)}
                key, loaded, embedded = prepare(data_dir, data, args.reuse or number > 0)
                load_stats = load_stats or loaded
                if embedded:
                    embeds[model] = embedded
                print(f"Evaluating {len(queries)} claims x modes with {model}, {args.concurrency} clients", flush=True)
                passes = [(floor, floor_env)] + (
                    [(0.0, {"GATEWAY_SEMANTIC_FLOOR": "0"})] if args.floor_zero and floor != 0 else []
                )
                for at, env in passes:
                    label = f"{model}-floor-{at:.2f}"
                    plain = ("lexical", "semantic", "fused") if number == 0 and at == floor else ("semantic", "fused")
                    done = evaluate(data_dir, key, queries, at, {**env, "GATEWAY_RERANK": "off"}, plain, args.concurrency, label)
                    done += evaluate(
                        data_dir, key, queries, at, {**env, "GATEWAY_RERANK": "vectors"}, ("reranked",), args.concurrency, label
                    )
                    for run in done:
                        run.model = "-" if run.mode == "lexical" else model
                    runs += done
            if args.save:
                save(args.save, runs)
            return 0 if report(runs, data, args, load_stats, embeds) else 1
        except KeyboardInterrupt:
            return interrupted()


if __name__ == "__main__":
    sys.exit(main())
