"""The standard call at its floor (issue 46): HTTP p50 against `/healthz`, requests a second at 8
clients, the service's own pipeline figure, and a py-spy profile of the service as it answers.

Loads the first N SciFact abstracts (1,000 and 5,000 by default) through `PUT /v1/items` into a store
per size, embeds them with the service's default model (`gateway embed`), then serves each store
(`gateway serve`, one worker, background embedding off) and asks SciFact claims as a newcomer's agent
would: a standard-depth retrieve for the `account_followup` task (exact, lexical, semantic, the
rerank, masking of personal data, the audit row), the dullest call there is.

Per size, in one run:
- 1 client, retrieve and `/healthz` alternating: p50/p95 of each and retrieve p50 ÷ `/healthz` p50;
  the answers' own `timings.total_ms` (the pipeline inside the service) beside them;
- 8 clients, closed loop: requests a second and p50;
- a py-spy profile (`py-spy record --format raw`, 250 Hz, every thread, idle excluded) of the
  service during 1-client calls: each sample's stack classified into a layer (HTTP and JSON, policy,
  embedding, lexical, vector, masking, audit, telemetry, thread hops, …) and read as ms per call
  (share of samples × wall ms per call), then the top 15 functions by own samples.

Run from the project root (py-spy needs ptrace: root or CAP_SYS_PTRACE):

    .venv/bin/python bench/call_bench.py --data-set /work/shared/data/scifact --store /tmp/call-bench
    .venv/bin/python bench/call_bench.py --data-set /work/shared/data/scifact --sizes 1000 --queries 200   # quick
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
from harness import (
    Server,
    code_revision,
    create_key,
    free_port,
    load_and_embed,
    percentile,
    scifact,
    send_all,
)

TENANT = "scifact"
TASK = {"type": "account_followup", "scope": "sales"}
WARMUP = 20
RATE_HZ = 250  # py-spy samples a second

# A sample's layer: the first of these found in its stack, innermost frame first (so a JSON dump
# inside the audit write counts as audit). Patterns are matched against "function (file)".
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("embedding (onnxruntime, tokenizer)", ("onnxruntime", "tokenizers", "(gateway/writes/embeddings.py", "maven_model")),
    ("policy (regorus)", ("regorus", "(gateway/policy/")),
    ("masking (presidio, spaCy)", ("presidio", "spacy", "(gateway/privacy/", "thinc")),
    ("lexical (FTS5)", ("(connectors/sql/lexical.py",)),
    (
        "vector (hnswlib, numpy)",
        ("hnswlib", "(connectors/sql/vectors.py", "(gateway/pipeline/semantic.py", "(gateway/pipeline/vector_index"),
    ),
    ("audit write", ("(audit/",)),
    ("store (SQLAlchemy, sqlite3)", ("sqlalchemy", "sqlite3", "(core/store.py", "(connectors/")),
    (
        "telemetry (OTel, logging, metrics)",
        (
            "opentelemetry",
            "(logging/",
            "(gateway/telemetry.py",
            "(gateway/http/metrics.py",
            "(gateway/http/access.py",
            "prometheus",
        ),
    ),
    ("pipeline (fuse, pack, sections)", ("(gateway/pipeline/",)),
    ("JSON and validation (pydantic, json)", ("pydantic", "(json/", "(api/", "(core/request.py", "orjson")),
    ("HTTP (uvicorn, starlette, h11)", ("uvicorn", "starlette", "h11", "httptools", "(gateway/http/")),
    ("thread hops and the event loop", ("anyio", "asyncio", "concurrent/futures", "threading.py", "selectors.py")),
]


def corpus(data_set: Path, limit: int) -> tuple[list[dict[str, object]], list[str]]:
    items, claims = scifact(data_set, limit)
    if len(items) < limit:
        raise SystemExit(f"--sizes: the data set holds {len(items)} abstracts, not {limit}")
    return items, claims


def prepared(data_dir: Path, items: list[dict[str, object]], env: dict[str, str]) -> None:
    """The store of `items`, embedded with the default model; kept and reused when `data_dir` holds it."""
    marker = data_dir / "call-bench.json"
    if marker.exists() and json.loads(marker.read_text())["items"] == len(items):
        print(f"reusing {data_dir} ({len(items):,} items)", flush=True)
        return
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    embedded, seconds = load_and_embed(data_dir, TENANT, items, env)
    print(f"gateway embed: {embedded[-200:]} in {seconds:.1f} s", flush=True)
    marker.write_text(json.dumps({"items": len(items)}))


def timed(client: httpx.Client, method: str, path: str, body: dict[str, object] | None) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    response = client.request(method, path, json=body)
    ms = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"{method} {path}: HTTP {response.status_code} {response.text[:300]}")
    return ms, response.json()


def one_client(client: httpx.Client, claims: list[str]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"retrieve": [], "healthz": [], "pipeline": []}
    for claim in claims:
        ms, answer = timed(client, "POST", "/v1/retrieve", {"task": TASK, "query": claim})
        times["retrieve"].append(ms)
        times["pipeline"].append(float(answer.get("timings", {}).get("total_ms", float("nan"))))
        times["healthz"].append(timed(client, "GET", "/healthz", None)[0])
    return times


async def eight_clients(url: str, key: str, claims: list[str], concurrency: int) -> tuple[float, float, int]:
    """Requests a second, p50 ms, and the count of answers that were not 200."""
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60, limits=limits) as client:

        async def send(claim: str) -> tuple[float, int]:
            started = time.perf_counter()
            response = await client.post("/v1/retrieve", json={"task": TASK, "query": claim})
            return (time.perf_counter() - started) * 1000, response.status_code

        samples, wall = await send_all(claims, concurrency, send)
    return len(samples) / wall, percentile([ms for ms, _ in samples], 50), sum(1 for _, status in samples if status != 200)


GENERIC = (
    "store (SQLAlchemy, sqlite3)",
    "JSON and validation (pydantic, json)",
    "HTTP (uvicorn, starlette, h11)",
    "thread hops and the event loop",
)


def layer_of(stack: list[str]) -> str:
    """The innermost frame of a named layer wins; the generic layers (the store's driver, JSON,
    HTTP, the event loop) only when no named layer is on the stack (so the FTS5 query that
    SQLAlchemy runs for the lexical source is lexical)."""
    for generic in (False, True):
        for frame in reversed(stack):  # innermost first
            for layer, patterns in LAYERS:
                if (layer in GENERIC) == generic and any(pattern in frame for pattern in patterns):
                    return layer
    return "other"


def py_spy() -> str | None:
    """py-spy on PATH or beside this interpreter, or None (a benchmark tool, not a dependency)."""
    beside = Path(sys.executable).parent / "py-spy"
    return shutil.which("py-spy") or (str(beside) if beside.exists() else None)


def profile(
    server: Server, client: httpx.Client, claims: list[str], out: Path, gil: bool = False
) -> tuple[list[tuple[str, int]], Counter[str], int, float]:
    """py-spy over 1-client calls: (top functions by own samples, samples by layer, total samples,
    wall ms per call). With `gil`, only the thread holding the GIL is sampled: the Python work no
    second core can share."""
    spy = py_spy()
    assert spy is not None, "main() leaves the profiles out without py-spy"
    recorder = subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(server.pid),
            "--rate",
            str(RATE_HZ),
            "--format",
            "raw",
            "--output",
            str(out),
            "--threads",
            "--nonblocking",
            *(["--gil"] if gil else []),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.5)  # py-spy attaches
    started = time.perf_counter()
    for claim in claims:
        timed(client, "POST", "/v1/retrieve", {"task": TASK, "query": claim})
    per_call = (time.perf_counter() - started) * 1000 / len(claims)
    time.sleep(0.3)
    recorder.send_signal(2)  # SIGINT: py-spy writes its file and exits
    _, err = recorder.communicate(timeout=60)
    if not out.exists():
        raise SystemExit(f"py-spy wrote nothing: {err[-500:]}")
    own: Counter[str] = Counter()
    layers: Counter[str] = Counter()
    total = 0
    for line in out.read_text().splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not count_text.isdigit():
            continue
        stack = [frame for frame in stack_text.split(";") if not frame.startswith("thread (")]
        count = int(count_text)
        if not stack:
            continue
        total += count
        own[stack[-1]] += count
        layers[layer_of(stack)] += count
    return own.most_common(15), layers, total, per_call


def short(frame: str) -> str:
    """`function (path/to/file.py:12)` with the path cut to the package."""
    for marker in ("site-packages/", "/work/main/", "lib/python3.11/"):
        if marker in frame:
            head, _, tail = frame.partition(marker)
            return f"{head.split(' (')[0]} ({tail.rstrip(')')})"
    return frame


def measure(size: int, data_dir: Path, claims: list[str], args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    key = create_key(data_dir, TENANT, "user:agent", "agent", groups="sales")
    server = Server(
        data_dir,
        free_port(),
        workers=args.workers,
        env={**env, "GATEWAY_BACKGROUND_EMBEDDING": "false"},
        label=f"serve-{size}",
    )
    server.start()
    server.wait_ready()
    try:
        client = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
        warm = claims[-WARMUP:]
        _, answer = timed(client, "POST", "/v1/retrieve", {"task": TASK, "query": warm[0]})
        semantic = answer["sources"]["semantic"]
        if semantic["status"] != "ok" or not answer["items"]:
            raise SystemExit(f"the standard call is not what is measured: {len(answer['items'])} items, semantic {semantic}")
        one_client(client, warm)
        asked = claims[: args.queries]
        times = one_client(client, asked)
        rate, p50_loaded, refused = asyncio.run(eight_clients(server.url, key, claims[: args.load_requests], args.concurrency))
        top: list[tuple[str, int]] = []
        layers: Counter[str] = Counter()
        gil_top, gil_layers, samples, gil_samples, per_call = top, layers, 0, 0, 0.0
        if args.profile_queries:
            profiled = claims[args.queries : args.queries + args.profile_queries]
            top, layers, samples, per_call = profile(server, client, profiled, args.profile_out / f"call-{size}.txt")
            gil_top, gil_layers, gil_samples, _ = profile(
                server, client, profiled, args.profile_out / f"gil-{size}.txt", gil=True
            )
        client.close()
        return {
            "gil_top": gil_top,
            "gil_layers": gil_layers,
            "gil_samples": gil_samples,
            "size": size,
            "model": semantic.get("model", "?"),
            "healthz_p50": percentile(times["healthz"], 50),
            "retrieve_p50": percentile(times["retrieve"], 50),
            "retrieve_p95": percentile(times["retrieve"], 95),
            "pipeline_p50": percentile(times["pipeline"], 50),
            "rate": rate,
            "loaded_p50": p50_loaded,
            "refused": refused,
            "top": top,
            "layers": layers,
            "samples": samples,
            "per_call": per_call,
            "calls": args.profile_queries,
        }
    finally:
        server.stop()


def report(figures: dict[str, Any], concurrency: int) -> None:
    size = figures["size"]
    ratio = figures["retrieve_p50"] / figures["healthz_p50"]
    print(f"\n=== {size:,} SciFact abstracts, standard retrieve ({figures['model']}) ===")
    print(
        "| /healthz p50 ms | retrieve p50 ms | p95 ms | retrieve ÷ /healthz | pipeline p50 ms (answer's timings) | HTTP − pipeline ms |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| {figures['healthz_p50']:.2f} | {figures['retrieve_p50']:.1f} | {figures['retrieve_p95']:.1f} | {ratio:.1f}x | "
        f"{figures['pipeline_p50']:.1f} | {figures['retrieve_p50'] - figures['pipeline_p50']:.1f} |"
    )
    print(
        f"\n{concurrency} clients: {figures['rate']:.1f} requests/s, p50 {figures['loaded_p50']:.1f} ms, {figures['refused']} not 200"
    )
    samples = figures["samples"]
    if not figures["calls"]:
        print("\nno profile (--profile-queries 0, or py-spy not found)")
        return
    thread_ms = 1000 / RATE_HZ / figures["calls"]  # one sample's thread-ms, per call
    print(
        f"\nprofile: {samples} samples ({samples * thread_ms:.1f} thread-ms a call, several threads at once) over calls of "
        f"{figures['per_call']:.1f} ms (1 client, wall); by layer:"
    )
    print("| layer | share of samples | thread-ms per call |")
    print("|---|---|---|")
    for layer, count in figures["layers"].most_common():
        print(f"| {layer} | {count / samples:.1%} | {count * thread_ms:.2f} |")
    gil_samples = figures["gil_samples"]
    print(f"\nholding the GIL: {gil_samples * thread_ms:.1f} ms a call (py-spy --gil); by layer:")
    print("| layer | ms per call |")
    print("|---|---|")
    for layer, count in figures["gil_layers"].most_common():
        print(f"| {layer} | {count * thread_ms:.2f} |")
    print("\ntop 15 functions by own samples:")
    print("| function | share | thread-ms per call |")
    print("|---|---|---|")
    for frame, count in figures["top"]:
        print(f"| `{short(frame)}` | {count / samples:.1%} | {count * thread_ms:.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--data-set", type=Path, required=True, help="the SciFact directory (BEIR layout)")
    parser.add_argument("--sizes", default="1000,5000", help="abstracts per store, comma separated (default 1000,5000)")
    parser.add_argument("--store", type=Path, help="keep the stores under this directory and reuse them (default: a temp dir)")
    parser.add_argument("--queries", type=int, default=300, help="1-client claims per size (default 300)")
    parser.add_argument("--load-requests", type=int, default=400, help="requests of the 8-client phase (default 400)")
    parser.add_argument("--concurrency", type=int, default=8, help="clients of the load phase (default 8)")
    parser.add_argument("--profile-queries", type=int, default=200, help="1-client claims under py-spy (default 200)")
    parser.add_argument("--workers", type=int, default=1, help="`gateway serve --workers` (default 1; profiles need 1)")
    parser.add_argument("--embeddings", default="", help="GATEWAY_EMBEDDINGS for the run (default: the service's default)")
    args = parser.parse_args()
    env = {"GATEWAY_EMBEDDINGS": args.embeddings} if args.embeddings else {}
    if args.profile_queries and py_spy() is None:
        print("py-spy not found (`pip install py-spy`; it needs ptrace): the figures without the profiles", flush=True)
        args.profile_queries = 0
    root = args.store or Path(tempfile.mkdtemp(prefix="gw-call-bench-"))
    args.profile_out = root
    root.mkdir(parents=True, exist_ok=True)
    sizes = [int(size) for size in args.sizes.split(",")]
    print(
        f"code {code_revision()}, sizes {sizes}, {args.queries} claims at 1 client, {args.load_requests} at {args.concurrency}",
        flush=True,
    )
    try:
        results = []
        for size in sizes:
            items, claims = corpus(args.data_set, size)
            if args.queries + args.profile_queries + WARMUP > len(claims):
                parser.error("--queries + --profile-queries: more than the data set's claims")
            suffix = f"-{args.embeddings}" if args.embeddings else ""
            data_dir = root / f"scifact-{size}{suffix}"
            prepared(data_dir, items, env)
            results.append(measure(size, data_dir, claims, args, env))
            report(results[-1], args.concurrency)
        return 0
    finally:
        if args.store is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
