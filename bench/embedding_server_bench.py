"""The embedding-server path at bulk scale: `gateway embed` through GATEWAY_EMBEDDINGS_URL against the
server's own throughput, in one run.

Starts tests/embedding_server.py in a process of its own (its own GIL: an OpenAI-compatible
`POST /v1/embeddings` on loopback that computes with the packaged MiniLM, one onnxruntime thread per
request, so requests in flight run side by side on the cores; MiniLM's integer model, as
`GATEWAY_EMBEDDINGS=minilm` runs it), loads N SciFact abstracts (title +
abstract, ~1.5 KB) into a temporary SQLite store through the real ingest path, and then, for
concurrency 1 and for `--concurrency`:

- `server`: the server's own throughput, a bare client posting the same texts in length-sorted
  batches of `--batch` with that many requests in flight (httpx, threads): the floor;
- `gateway embed`: the CLI as a subprocess, on a fresh copy of the store, with
  GATEWAY_EMBEDDINGS_URL/MODEL/DIMS/BATCH/CONCURRENCY set: start-up, reading the store, requests,
  checks and storing every vector included (its start-up alone, timed by a second run with nothing
  waiting, is given too).

Each is texts (items) a second; `gateway embed` is given as a ratio to the server's floor at the
same concurrency, and concurrency N as a ratio to concurrency 1 (with `--rounds`, the medians; the
order of the concurrencies alternates between rounds, as a shared machine's load drifts). A sample of
the stored vectors is compared with the packaged model's own (cosine per item: the integer model
quantizes activations per call, so a vector moves slightly with its batch-mates, ~0.993 at worst,
locally as much as through the server). `--server-delay-ms` makes the server wait before each answer
without using a core, as a remote server's round trip and queue would.

    .venv/bin/python bench/embedding_server_bench.py                       # 2,000 abstracts
    .venv/bin/python bench/embedding_server_bench.py --items 1000 --rounds 2
    .venv/bin/python bench/embedding_server_bench.py --items 500 --concurrency 8 --server-delay-ms 200

The data set is read where it is (`--data-set`, default /work/shared/data/scifact). See
bench/README.md ("The embedding-server path").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from harness import clean_env  # noqa: E402

TENANT = "bench"


def corpus(data_set: Path, limit: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    with (data_set / "corpus.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            if not line.strip():
                continue
            doc = json.loads(line)
            text = f"{doc['title']}\n{doc['text']}"
            items.append({"id": f"scifact_{doc['_id']}", "kind": "document", "section": doc["title"], "text": text, "acl": ["*"]})
            if len(items) >= limit:
                break
    return items


def load(store: Path, items: list[dict[str, Any]]) -> None:
    from core.store import open_store
    from gateway.writes.items import ingest

    engine = open_store(f"sqlite:///{store}")
    report = ingest(engine, TENANT, items)
    engine.dispose()
    if report.rejected:
        raise SystemExit(f"ingest rejected {len(report.rejected)} items, e.g. {report.rejected[0]}")


def start_server(delay_ms: float) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """tests/embedding_server.py in its own process; its URL, model and dims from its first line."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.embedding_server", "--port", "0", "--integer", "--delay-ms", str(delay_ms)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**clean_env(), "PYTHONPATH": str(ROOT)},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        process.kill()
        raise SystemExit("the embedding server did not start")
    return process, json.loads(line)


def server_floor(server: dict[str, Any], texts: list[str], batch: int, concurrency: int) -> float:
    """Seconds for a bare client to have `texts` embedded: length-sorted batches, `concurrency` in flight."""
    ordered = sorted(texts, key=len)
    batches = [ordered[start : start + batch] for start in range(0, len(ordered), batch)]
    with httpx.Client(base_url=server["url"], timeout=120, limits=httpx.Limits(max_connections=concurrency)) as client:

        def post(chunk: list[str]) -> int:
            response = client.post("/embeddings", json={"model": server["model"], "input": chunk})
            response.raise_for_status()
            return len(response.json()["data"])

        started = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            done = sum(pool.map(post, batches))
        seconds = time.perf_counter() - started
    assert done == len(texts)
    return seconds


def gateway_embed(server: dict[str, Any], store: Path, batch: int, concurrency: int) -> tuple[float, str]:
    """Seconds of `gateway embed` (a subprocess, from this checkout) over `store`, and its last line."""
    env = {
        **clean_env(),
        "PYTHONPATH": str(ROOT),
        "GATEWAY_DATABASE_URL": f"sqlite:///{store}",
        "GATEWAY_EMBEDDINGS_URL": server["url"],
        "GATEWAY_EMBEDDINGS_MODEL": server["model"],
        "GATEWAY_EMBEDDINGS_DIMS": str(server["dims"]),
        "GATEWAY_EMBEDDINGS_BATCH": str(batch),
        "GATEWAY_EMBEDDINGS_CONCURRENCY": str(concurrency),
        "GATEWAY_EMBEDDINGS_TIMEOUT_MS": "60000",  # a loaded 2-core machine: a 64-abstract batch can take seconds
    }
    command = [sys.executable, "-c", "from gateway.cli import main; main()", "embed"]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"gateway embed failed ({result.returncode}): {result.stderr.strip()[-500:]}")
    return seconds, result.stdout.strip().splitlines()[-1]


def check_vectors(store: Path, items: list[dict[str, Any]], sample: int = 40) -> float:
    """The lowest cosine between a stored vector and the packaged model's own, over a sample."""
    from gateway.writes.embeddings import OnnxMiniLM

    model = OnnxMiniLM(threads=1, integer=True)
    texts = {item["id"]: item["text"] for item in items}
    with sqlite3.connect(store) as conn:
        rows = conn.execute(
            "SELECT item.id, item_vector.vector FROM item JOIN item_vector ON item_vector.item_pk = item.pk LIMIT ?", (sample,)
        ).fetchall()
    assert rows, "no vectors stored"
    local = model.embed([texts[row[0]] for row in rows])
    stored = np.stack([np.frombuffer(row[1], dtype=np.float32) for row in rows])
    return float((stored * local).sum(axis=1).min())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-set", type=Path, default=Path("/work/shared/data/scifact"), help="a BEIR folder with corpus.jsonl"
    )
    parser.add_argument("--items", type=int, default=2000, help="abstracts to embed (default 2,000)")
    parser.add_argument("--batch", type=int, default=64, help="texts per request (GATEWAY_EMBEDDINGS_BATCH)")
    parser.add_argument(
        "--concurrency", type=int, default=4, help="requests in flight, beside 1 (GATEWAY_EMBEDDINGS_CONCURRENCY)"
    )
    parser.add_argument("--rounds", type=int, default=1, help="rounds, each concurrency in turn, the order alternating")
    parser.add_argument(
        "--server-delay-ms",
        type=float,
        default=0.0,
        help="the server waits this long (no CPU) before each answer: a remote round trip",
    )
    args = parser.parse_args()
    if not (args.data_set / "corpus.jsonl").is_file():
        parser.error(f"--data-set: no corpus.jsonl in {args.data_set}")
    items = corpus(args.data_set, args.items)
    texts = [item["text"] for item in items]
    print(
        f"{len(items)} SciFact abstracts ({sum(len(t.encode()) for t in texts) / len(texts) / 1024:.2f} KB each on average), "
        f"batch {args.batch}, {os.cpu_count()} CPUs"
    )
    root = Path(tempfile.mkdtemp(prefix="embedding-server-bench-"))
    process, server = start_server(args.server_delay_ms)
    try:
        base = root / "base.db"
        load(base, items)
        delay = f", {args.server_delay_ms:g} ms of wait per answer" if args.server_delay_ms else ""
        print(f"server: {server['url']} computing with {server['model']} ({server['dims']} dims), a process of its own{delay}")
        server_floor(server, texts[:64], args.batch, 2)  # warm: the server's session and the page cache
        results: dict[int, list[tuple[float, float]]] = {1: [], args.concurrency: []}
        for round_ in range(args.rounds):
            for concurrency in sorted(results, reverse=round_ % 2 == 0):
                floor = len(texts) / server_floor(server, texts, args.batch, concurrency)
                store = root / f"c{concurrency}.db"
                shutil.copy(base, store)
                seconds, said = gateway_embed(server, store, args.batch, concurrency)
                rate = len(texts) / seconds
                results[concurrency].append((floor, rate))
                lowest = check_vectors(store, items)
                fixed, _ = gateway_embed(server, store, args.batch, concurrency)  # nothing waits: start-up and one scan
                store.unlink()
                print(
                    f"round {round_ + 1}, concurrency {concurrency}: server {floor:7.1f} texts/s | gateway embed {rate:7.1f} "
                    f"items/s ({rate / floor:.2f}x the server's own; {fixed:.1f} s of it start-up, "
                    f"{len(texts) / max(seconds - fixed, 1e-9) / floor:.2f}x without) | '{said}' | lowest cosine to local {lowest:.5f}",
                    flush=True,
                )
        if args.concurrency != 1:
            median = {c: (float(np.median([f for f, _ in r])), float(np.median([g for _, g in r]))) for c, r in results.items()}
            (floor1, rate1), (floorn, raten) = median[1], median[args.concurrency]
            print(
                f"medians: gateway embed / server {raten / floorn:.2f}x at concurrency {args.concurrency}, {rate1 / floor1:.2f}x at 1; "
                f"concurrency {args.concurrency} against 1: server {floorn / floor1:.2f}x, gateway embed {raten / rate1:.2f}x"
            )
    finally:
        process.terminate()
        process.wait(10)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
