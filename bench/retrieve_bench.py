"""Retrieve benchmark: load N synthetic items, start the real service, measure POST /v1/retrieve over HTTP.

Run from the project root with the project's venv:

    .venv/bin/python bench/retrieve_bench.py --items 5000 --requests 300   # quick
    .venv/bin/python bench/retrieve_bench.py                               # 100k items, 2000 requests per phase

See bench/history/retrieve_bench.md ("Reading the report") for what each printed figure means.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
from harness import Server, bench_dir, code_revision, free_port, interrupted, percentile, request_timed, send_all, serving
from sqlalchemy import text
from sqlalchemy.engine import Engine

from core.store import open_store
from gateway.auth import create_api_key
from gateway.writes.items import ingest

SEED = 20261130
QUERY_SEED = 7
LOAD_CHUNK = 5000
WARMUP_REQUESTS = 30
TENANTS = (("acme", 90), ("globex", 10))
AGENT: dict[str, Any] = {
    "tenant": "acme",
    "principal": "user:alice",
    "roles": ["agent"],
    "groups": ["sales"],
    "clearance": "confidential",
}
TASK = {"type": "account_followup", "scope": "sales"}

# Head of the vocabulary, most frequent first; a synthetic long tail follows (see vocabulary()).
HEAD_WORDS = """
pricing discount billing renewal contract customer invoice account plan seats annual upgrade quote
payment support ticket license trial onboarding integration meeting call follow escalation usage
report dashboard feature request migration security review approval budget forecast pipeline deal
proposal legal terms procurement vendor partner reseller region enterprise team admin login outage
incident refund credit tier monthly quarterly expansion churn risk champion stakeholder director
manager engineer product roadmap release bug workaround priority deadline schedule demo workshop
training adoption health score survey feedback complaint satisfaction dispute tax currency
exchange margin cost savings value roi benchmark competitor comparison evaluation shortlist rfp
signature redline clause liability indemnity privacy gdpr audit compliance retention backup restore
api webhook sso saml provisioning directory export import sync latency throughput limit quota
""".split()
TAIL_SIZE = 4800
SYLLABLES = "ba be bi bo bu ka ke ki ko ku la le li lo lu ma me mi mo mu na ne ni no nu ra re ri ro ru sa se si so su ta te ti to tu va ve vi vo zu".split()
ZIPF_OFFSET = 20  # weight of rank r is 1/(r + offset): the top word is in roughly 30% of texts

ACLS = (
    (["*"], 30),
    (["group:sales"], 25),
    (["group:support"], 18),
    (["group:finance"], 10),
    (["group:sales", "group:finance"], 10),
    (["user:alice"], 4),
    (["user:bob", "group:support"], 3),
)
SENSITIVITIES = (("internal", 70), ("public", 10), ("confidential", 15), ("restricted", 5))
SCOPES: tuple[tuple[list[str], int], ...] = ((["sales"], 40), (["support"], 30), ([], 30))
AUTHORITIES = (("approved", 25), ("reviewed", 35), ("unreviewed", 35), ("speculative", 5))
TAGS = ("pricing", "billing", "renewal", "support", "legal")
EXPIRED_SHARE = 0.10
ATTACHED_SHARE = 0.15
ENTITY_COUNT = 2000

POLICY_SHARE_TARGET = 0.20
P95_TARGET_MS = 50.0


# ---------------------------------------------------------------- data generation


def vocabulary() -> list[str]:
    """The head words, then a synthetic long tail of pseudo-words; the same list on every run."""
    rng = random.Random(SEED)
    words = list(dict.fromkeys(HEAD_WORDS))
    seen = set(words)
    while len(words) < len(HEAD_WORDS) + TAIL_SIZE:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def zipf_cum_weights(size: int) -> list[float]:
    total, cumulative = 0.0, []
    for rank in range(1, size + 1):
        total += 1.0 / (rank + ZIPF_OFFSET)
        cumulative.append(total)
    return cumulative


class TextMaker:
    """Seeded, Zipf-distributed word sampling over the fixed vocabulary."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary()
        self.cum_weights = zipf_cum_weights(len(self.words))

    def draw(self, low: int, high: int) -> str:
        """Between low and high words, space-separated."""
        count = self.rng.randint(low, high)
        return " ".join(self.rng.choices(self.words, cum_weights=self.cum_weights, k=count))

    def sentence(self, low: int, high: int) -> str:
        return self.draw(low, high).capitalize() + "."


def weighted(rng: random.Random, options: tuple[tuple[Any, int], ...]) -> Any:
    values, weights = zip(*options)
    return rng.choices(values, weights=weights, k=1)[0]


def instant(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def make_item(index: int, maker: TextMaker, today: datetime) -> tuple[str, dict[str, Any]]:
    """One memory or document, with its tenant."""
    rng = maker.rng
    tenant = weighted(rng, TENANTS)
    kind = "memory" if rng.random() < 0.6 else "document"
    entity = f"ent_{rng.randrange(ENTITY_COUNT):05d}"
    item: dict[str, Any] = {
        "id": f"{kind[:3]}_{index:07d}",
        "kind": kind,
        "text": maker.sentence(20, 60),
        "acl": list(weighted(rng, ACLS)),
        "sensitivity": weighted(rng, SENSITIVITIES),
        "scope": list(weighted(rng, SCOPES)),
        "authority": weighted(rng, AUTHORITIES),
        "recorded_at": instant(today - timedelta(days=rng.randint(1, 900), seconds=rng.randint(0, 86399))),
        "tags": sorted(set(rng.sample(TAGS, rng.randint(0, 2)))),
    }
    if kind == "memory":
        item["entity"] = entity
        item["source"] = {"system": "crm", "uri": f"crm://calls/{index}"}
    else:
        item["document"] = f"doc_{rng.randrange(5000):05d}"
        item["section"] = maker.sentence(2, 4)[:-1]
        item["source"] = {"system": "wiki", "uri": f"wiki://pages/{index}"}
    if rng.random() < ATTACHED_SHARE:
        item["attached_to"] = entity
    if rng.random() < EXPIRED_SHARE:
        ended = today - timedelta(days=rng.randint(1, 700))
        item["valid_from"] = instant(ended - timedelta(days=rng.randint(30, 400)))
        item["valid_to"] = instant(ended)
    elif rng.random() < 0.2:
        item["valid_from"] = instant(today - timedelta(days=rng.randint(1, 700)))
    return tenant, item


def generate(count: int) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Chunks of (tenant, item); the whole stream is fixed by SEED (dates are relative to today)."""
    maker = TextMaker(SEED)
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    for start in range(0, count, LOAD_CHUNK):
        yield [make_item(i, maker, today) for i in range(start, min(start + LOAD_CHUNK, count))]


def count_items(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM item")).scalar_one())


def load(engine: Engine, count: int) -> dict[str, float]:
    """Generate and ingest `count` items in chunks, printing progress; returns the timings."""
    gen_s = ingest_s = 0.0
    done = 0
    chunks = generate(count)
    while True:
        started = time.perf_counter()
        chunk = next(chunks, None)
        gen_s += time.perf_counter() - started
        if chunk is None:
            break
        started = time.perf_counter()
        for tenant, _ in TENANTS:
            entries = [item for owner, item in chunk if owner == tenant]
            report = ingest(engine, tenant, entries)
            if report.rejected:
                raise SystemExit(f"ingest rejected {len(report.rejected)} items, first: {report.rejected[0]}")
        ingest_s += time.perf_counter() - started
        done += len(chunk)
        rate = done / (gen_s + ingest_s)
        print(f"  loaded {done:>7}/{count} items  ({rate:,.0f} items/s)", flush=True)
    return {"generate_s": gen_s, "ingest_s": ingest_s, "rate": count / (gen_s + ingest_s)}


def prepare_store(data_dir: Path, items: int, reuse: bool) -> tuple[str, dict[str, float] | None]:
    """Load the items (or reuse them) and create the agent's API key."""
    engine = open_store(f"sqlite:///{(data_dir / 'gateway.db').resolve()}")
    try:
        existing = count_items(engine)
        load_stats = None
        if reuse and existing == items:
            print(f"Reusing {existing} items in {data_dir}")
        elif existing:
            hint = "" if reuse else "; pass --reuse to benchmark it as is"
            raise SystemExit(f"{data_dir} already holds {existing} items, not {items}{hint} (or use a fresh --data dir)")
        else:
            print(f"Loading {items} items into {data_dir} (chunks of {LOAD_CHUNK})")
            load_stats = load(engine, items)
        key = create_api_key(engine, **AGENT)
    finally:
        engine.dispose()
    return key, load_stats


def embed_store(data_dir: Path) -> None:
    """Give every item its vector before measuring (the service would, in the background)."""
    from gateway.background import Limit
    from gateway.writes.embeddings import OnnxMiniLM
    from gateway.writes.vectorize import embed_pending, lag

    engine = open_store(f"sqlite:///{(data_dir / 'gateway.db').resolve()}")
    try:
        embedder = OnnxMiniLM(threads=2)
        waiting = lag(engine, embedder.model_id)
        if not waiting:
            print("All items already embedded")
            return
        print(f"Embedding {waiting} items with {embedder.model_id} (2 threads)")
        started, done = time.perf_counter(), 0
        while batch := embed_pending(engine, embedder, Limit(64, 1 << 30)).items:
            done += batch
            if done % 5000 < 64:
                rate = done / (time.perf_counter() - started)
                print(f"  embedded {done:>7}/{waiting}  ({rate:,.0f} items/s)", flush=True)
        print(f"embedding: {done / (time.perf_counter() - started):,.0f} items/s")
    finally:
        engine.dispose()


def wait_for_graph(url: str, key: str, timeout_s: float = 600) -> None:
    """The service builds its HNSW graph in the background after start; exact search serves until then."""
    deadline = time.monotonic() + timeout_s
    body = {"task": TASK, "query": "pricing discount renewal", "sources": {"exact": False}}
    while time.monotonic() < deadline:
        response = httpx.post(f"{url}/v1/retrieve", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        if "approximate" in (response.json().get("sources", {}).get("semantic", {}).get("detail") or ""):
            return
        time.sleep(1)
    raise SystemExit("the vector index did not switch to approximate search in time")


# ---------------------------------------------------------------- the server


# ---------------------------------------------------------------- measuring


@dataclass(frozen=True, slots=True)
class Sample:
    ms: float
    status: int
    body: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    samples: list[Sample]
    wall_s: float

    @property
    def latencies(self) -> list[float]:
        return [s.ms for s in self.samples]

    @property
    def ok(self) -> list[Sample]:
        return [s for s in self.samples if s.status == 200 and s.body is not None]

    @property
    def answers(self) -> list[dict[str, Any]]:
        """The bodies of the `ok` samples."""
        return [s.body for s in self.ok if s.body is not None]

    @property
    def errors(self) -> Counter[int]:
        return Counter(s.status for s in self.samples if s.status != 200)

    @property
    def rps(self) -> float:
        return len(self.samples) / self.wall_s


def retrieve_bodies(count: int, seed: int, depth: str) -> list[dict[str, Any]]:
    """Request bodies with 2-4 query words drawn (Zipf-weighted) from the load's vocabulary."""
    maker = TextMaker(seed)
    return [{"task": TASK, "query": maker.draw(2, 4), "sources": {"exact": False}, "depth": depth} for _ in range(count)]


async def timed(client: httpx.AsyncClient, method: str, path: str, body: dict[str, Any] | None) -> Sample:
    response, ms = await request_timed(client, method, path, body)
    if response is None:
        return Sample(ms, 0, None)
    parsed = response.json() if response.headers.get("content-type", "").startswith("application/json") else None
    return Sample(ms, response.status_code, parsed)


async def run_phase(
    client: httpx.AsyncClient, name: str, method: str, path: str, bodies: Sequence[dict[str, Any] | None], concurrency: int
) -> Phase:
    """Send every body once, from `concurrency` workers each holding one keep-alive connection."""
    samples, seconds = await send_all(bodies, concurrency, lambda body: timed(client, method, path, body))
    return Phase(name, samples, seconds)


async def measure(url: str, key: str, requests: int, concurrency: int, depth: str) -> dict[str, Phase]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=30) as client:
        await run_phase(client, "warmup", "GET", "/healthz", [None] * WARMUP_REQUESTS, 1)
        await run_phase(client, "warmup", "POST", "/v1/retrieve", retrieve_bodies(WARMUP_REQUESTS, QUERY_SEED + 99, depth), 1)
        phases = [
            await run_phase(client, "healthz_seq", "GET", "/healthz", [None] * requests, 1),
            await run_phase(client, "retrieve_seq", "POST", "/v1/retrieve", retrieve_bodies(requests, QUERY_SEED, depth), 1),
            await run_phase(client, "healthz_conc", "GET", "/healthz", [None] * requests, concurrency),
            await run_phase(
                client, "retrieve_conc", "POST", "/v1/retrieve", retrieve_bodies(requests, QUERY_SEED + 1, depth), concurrency
            ),
        ]
    return {phase.name: phase for phase in phases}


# ---------------------------------------------------------------- reporting


def policy_figures(phase: Phase) -> dict[str, float]:
    """Policy time (decide + verify) against server pipeline time and client-observed time."""
    ok = phase.ok
    timings = [body["timings"] for body in phase.answers]
    policy = sum(t["decide_ms"] + t["verify_ms"] for t in timings)
    server = sum(t["total_ms"] for t in timings)
    client = sum(s.ms for s in ok)
    return {
        "policy_ms": policy / len(ok) if ok else float("nan"),
        "decide_ms": sum(t["decide_ms"] for t in timings) / len(ok) if ok else float("nan"),
        "verify_ms": sum(t["verify_ms"] for t in timings) / len(ok) if ok else float("nan"),
        "server_ms": server / len(ok) if ok else float("nan"),
        "share_server": policy / server if server else float("nan"),
        "share_client": policy / client if client else float("nan"),
        "pipeline_share_client": server / client if client else float("nan"),
        "lexical_ms": sum(body["sources"]["lexical"]["ms"] for body in phase.answers) / len(ok) if ok else float("nan"),
        **layer_shares(timings),
    }


LAYERS = (("embed", "embed_ms"), ("vector search", None), ("lexical", "lexical_ms"), ("policy", None), ("fusion+pack", "fuse_ms"))


def layer_shares(timings: list[dict[str, float]]) -> dict[str, float]:
    """Mean ms per layer. The sources run concurrently, so shares of total need not add up to 100%."""
    if not timings:
        return {}
    n = len(timings)
    mean = {
        key: sum(t.get(key, 0.0) for t in timings) / n
        for key in ("embed_ms", "semantic_ms", "lexical_ms", "fuse_ms", "decide_ms", "verify_ms", "total_ms")
    }
    return {
        "layer_embed": mean["embed_ms"],
        "layer_vector search": max(mean["semantic_ms"] - mean["embed_ms"], 0.0),
        "layer_lexical": mean["lexical_ms"],
        "layer_policy": mean["decide_ms"] + mean["verify_ms"],
        "layer_fusion+pack": mean["fuse_ms"],
        "layer_total": mean["total_ms"],
    }


def count_buckets(counts: list[int]) -> str:
    buckets = (("0", 0, 0), ("1-9", 1, 9), ("10-24", 10, 24), ("25-49", 25, 49), ("50+", 50, 10**9))
    total = len(counts) or 1
    return "  ".join(f"{label}:{sum(1 for c in counts if lo <= c <= hi) * 100 / total:.0f}%" for label, lo, hi in buckets)


def result_figures(phase: Phase) -> list[str]:
    items = [len(body["items"]) for body in phase.answers]
    lexical = [body["sources"]["lexical"] for body in phase.answers]
    counts = [int(entry.get("count", 0)) for entry in lexical]
    statuses = Counter(entry["status"] for entry in lexical)
    partial = sum(1 for body in phase.answers if body.get("partial"))
    lines = [
        f"  items returned: mean {sum(items) / max(len(items), 1):.1f}; lexical count: mean {sum(counts) / max(len(counts), 1):.1f}, "
        f"p50 {percentile(counts, 50):.0f}, p90 {percentile(counts, 90):.0f}, max {max(counts, default=0)}",
        f"  lexical count distribution: {count_buckets(counts)}",
        f"  lexical status: {dict(statuses)}" + (f"; partial responses: {partial}" if partial else ""),
    ]
    if statuses.get("timeout") or statuses.get("error"):
        lines.append(
            f"  !!! lexical source timed out or failed in {statuses.get('timeout', 0) + statuses.get('error', 0)} responses (200s with partial results)"
        )
    return lines


def mark(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def latency_line(label: str, phase: Phase, base_p50: float) -> str:
    p50, p95, p99 = (percentile(phase.latencies, q) for q in (50, 95, 99))
    return (
        f"  {label:<26} p50 {p50:7.2f} ms  p95 {p95:7.2f} ms  p99 {p99:7.2f} ms  {phase.rps:7.1f} req/s"
        f"   p50 = {p50 / base_p50:5.1f}x healthz p50"
    )


def report(phases: dict[str, Phase], args: argparse.Namespace, load_stats: dict[str, float] | None) -> bool:
    """Print the report; returns False when any request failed."""
    h_seq, r_seq, h_conc, r_conc = (phases[n] for n in ("healthz_seq", "retrieve_seq", "healthz_conc", "retrieve_conc"))
    base = percentile(h_seq.latencies, 50)
    seq, conc = policy_figures(r_seq), policy_figures(r_conc)
    print(
        f"\n=== retrieve benchmark, depth {args.depth}: {args.items} items, {args.requests} requests/phase, concurrency {args.concurrency}, "
        f"{os.cpu_count()} CPUs, code {code_revision()} ==="
    )
    if load_stats:
        print(
            f"load: {load_stats['rate']:,.0f} items/s  (generate {load_stats['generate_s']:.1f} s, ingest {load_stats['ingest_s']:.1f} s)"
        )
    print("latency (client-observed, httpx keep-alive):")
    print(latency_line("healthz, 1 client", h_seq, base))
    print(latency_line("retrieve, 1 client", r_seq, base))
    print(latency_line(f"healthz, {args.concurrency} clients", h_conc, base))
    print(latency_line(f"retrieve, {args.concurrency} clients", r_conc, base))
    print(
        f"  throughput under load: retrieve {r_conc.rps:.1f} req/s = {r_conc.rps / h_conc.rps:.3f}x healthz {h_conc.rps:.0f} req/s"
    )
    for label, figures in (("1 client", seq), (f"{args.concurrency} clients", conc)):
        print(
            f"policy, {label}: decide {figures['decide_ms']:.2f} + verify {figures['verify_ms']:.2f} = {figures['policy_ms']:.2f} ms/request; "
            f"server pipeline {figures['server_ms']:.2f} ms (lexical {figures['lexical_ms']:.2f} ms)"
        )
        print(
            f"  policy share: {figures['share_server'] * 100:.1f}% of server pipeline time, "
            f"{figures['share_client'] * 100:.1f}% of client-observed time "
            f"(pipeline = {figures['pipeline_share_client'] * 100:.0f}% of client-observed)"
        )
        total = figures.get("layer_total") or float("nan")
        print(
            "  layers (mean ms, share of server time; lexical and semantic run concurrently): "
            + ", ".join(f"{name} {figures['layer_' + name]:.2f} ({figures['layer_' + name] / total:.0%})" for name, _ in LAYERS)
        )
    for label, phase in (("1 client", r_seq), (f"{args.concurrency} clients", r_conc)):
        print(f"results, {label}:")
        print("\n".join(result_figures(phase)))
    print("targets:")
    print(
        f"  policy share < {POLICY_SHARE_TARGET:.0%} of request time: 1 client {seq['share_server']:.1%} server / {seq['share_client']:.1%} client "
        f"-> {mark(max(seq['share_server'], conc['share_server']) < POLICY_SHARE_TARGET)} "
        f"({args.concurrency} clients {conc['share_server']:.1%} / {conc['share_client']:.1%})"
    )
    for label, phase in (("sequential (1 client)", r_seq), (f"under load ({args.concurrency} clients)", r_conc)):
        p95 = percentile(phase.latencies, 95)
        print(f"  retrieve p95 < {P95_TARGET_MS:.0f} ms, {label}: {p95:.2f} ms -> {mark(p95 < P95_TARGET_MS)}")
    return report_errors(phases)


def report_errors(phases: dict[str, Phase]) -> bool:
    failed = {name: phase.errors for name, phase in phases.items() if phase.errors}
    if not failed:
        print(f"errors: none (all {sum(len(p.samples) for p in phases.values())} responses were 200)")
        return True
    print("\n" + "!" * 78)
    for name, errors in failed.items():
        first = next(s for s in phases[name].samples if s.status != 200)
        detail = (first.body or {}).get("error", {}) if first.body else {}
        print(f"!!! {name}: {sum(errors.values())} NON-200 RESPONSES {dict(errors)}; first: {detail}")
    print("!!! THE FIGURES ABOVE INCLUDE FAILED REQUESTS AND ARE NOT VALID")
    print("!" * 78)
    return False


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=100_000, help="items to load (default 100000)")
    parser.add_argument("--data", type=Path, help="data directory (default: a fresh temp dir, removed at the end)")
    parser.add_argument("--requests", type=int, default=2000, help="requests per phase (default 2000)")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent clients for the load phases (default 8)")
    parser.add_argument("--workers", type=int, default=1, help="server worker processes (default 1)")
    parser.add_argument(
        "--depth",
        choices=("fast", "standard"),
        default="fast",
        help="fast: lexical only (the spine's figure); standard: lexical + semantic, items embedded first",
    )
    parser.add_argument("--reuse", action="store_true", help="skip loading when --data already holds exactly --items items")
    args = parser.parse_args(argv)
    if args.items < 1 or args.requests < 1 or args.concurrency < 1:
        parser.error("--items, --requests and --concurrency must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally blocks stop the server
    with bench_dir(args.data, "gateway-bench-") as data_dir:
        try:
            key, load_stats = prepare_store(data_dir, args.items, args.reuse)
            if args.depth == "standard":
                embed_store(data_dir)
            with serving(Server(data_dir, free_port(), workers=args.workers)) as server:
                if args.depth == "standard":
                    wait_for_graph(server.url, key)
                print(f"Server ready at {server.url} (log: {server.log_path}); measuring...", flush=True)
                phases = asyncio.run(measure(server.url, key, args.requests, args.concurrency, args.depth))
                return 0 if report(phases, args, load_stats) else 1
        except KeyboardInterrupt:
            return interrupted()


if __name__ == "__main__":
    sys.exit(main())
