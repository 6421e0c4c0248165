"""What the embedding model costs a call: the standard retrieve over HTTP with bge-small and with MiniLM, in one run.

Loads the first N SciFact abstracts (default 1,000) through `PUT /v1/items` into one store per model,
embeds each with its model (`gateway embed`), then serves both at once and asks the same claims of
each, one client, alternating a block of calls to one server with a block to the other (so the
machine's drift falls on both alike): a standard-depth retrieve (exact, lexical, semantic, the rerank
on, the default limit and budget) and `/healthz`, the HTTP floor of the same server. Prints p50 and
p95 of each, the retrieve as a ratio to its server's `/healthz`, and bge-small's retrieve p50 as a
ratio to MiniLM's. Run from the project root:

    .venv/bin/python bench/model_latency_bench.py --data-set /work/shared/data/scifact            # ~6 minutes
    .venv/bin/python bench/model_latency_bench.py --data-set /work/shared/data/scifact --items 200 --queries 100
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
from harness import (
    Server,
    create_key,
    free_port,
    load_and_embed,
    percentile,
    scifact,
)

MODELS = ("minilm", "bge-small")
TENANT = "scifact"
TASK = {"type": "compliance_review"}  # granted to the compliance group; masks nothing (scores ids, as quality_bench)
BLOCK = 20  # calls to one server before switching to the other
EXPECTED = {"minilm": "all-MiniLM-L6-v2", "bge-small": "bge-small-en-v1.5"}  # the model id each server must report


def prepared(root: Path, model: str, items: list[dict[str, object]]) -> tuple[Server, str]:
    """A store of the items embedded with `model`, its server started, and an agent key."""
    data_dir = root / model
    data_dir.mkdir()
    env = {"GATEWAY_EMBEDDINGS": model}
    embedded, seconds = load_and_embed(
        data_dir, TENANT, items, env, label=f"load-{model}", embed_args=("--threads", "2"), what=f"gateway embed ({model})"
    )
    print(f"{model}: {embedded} in {seconds:.1f} s", flush=True)
    key = create_key(data_dir, TENANT, "user:agent", "agent", groups="compliance")
    server = Server(data_dir, free_port(), env={**env, "GATEWAY_BACKGROUND_EMBEDDING": "false"}, label=f"serve-{model}")
    server.start()
    server.wait_ready()
    return server, key


def timed(client: httpx.Client, method: str, path: str, body: dict[str, object] | None) -> float:
    started = time.perf_counter()
    response = client.request(method, path, json=body)
    ms = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"{method} {path}: HTTP {response.status_code} {response.text[:300]}")
    return ms


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--data-set", type=Path, required=True, help="the SciFact directory (BEIR layout)")
    parser.add_argument("--items", type=int, default=1000, help="abstracts to load (default 1000)")
    parser.add_argument("--queries", type=int, default=400, help="claims asked of each server (default 400)")
    args = parser.parse_args()
    items, claims = scifact(args.data_set, args.items)
    if args.queries > len(claims) - BLOCK:
        parser.error(f"--queries: at most {len(claims) - BLOCK} (each claim once, the last {BLOCK} warm up)")
    root = Path(tempfile.mkdtemp(prefix="gw-model-latency-"))
    servers: dict[str, tuple[Server, str]] = {}
    try:
        for model in MODELS:
            servers[model] = prepared(root, model, items)
        clients = {
            model: httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
            for model, (server, key) in servers.items()
        }
        times: dict[str, dict[str, list[float]]] = {model: {"retrieve": [], "healthz": []} for model in MODELS}
        asked = claims[: args.queries]  # each once: every measured call embeds its query
        for model, client in clients.items():  # warm: the model, the vector index, the policy
            # Claims never measured: a measured claim's vector must not be in the query cache already.
            for claim in claims[-BLOCK:]:
                timed(client, "POST", "/v1/retrieve", {"task": TASK, "query": claim})
            semantic = client.post("/v1/retrieve", json={"task": TASK, "query": claims[-1]}).json()["sources"]["semantic"]
            if semantic["status"] != "ok" or not semantic.get("model", "").startswith(EXPECTED[model]):
                raise SystemExit(f"{model}: the semantic source is not what is measured: {semantic}")
            print(f"{model}: semantic source {semantic['model']}, {semantic['detail']}", flush=True)
        for start in range(0, len(asked), BLOCK):
            for model, client in clients.items():
                for claim in asked[start : start + BLOCK]:
                    times[model]["retrieve"].append(timed(client, "POST", "/v1/retrieve", {"task": TASK, "query": claim}))
                    times[model]["healthz"].append(timed(client, "GET", "/healthz", None))
        print(f"\n=== standard retrieve over HTTP, {len(items):,} SciFact abstracts, {len(asked)} claims per model, 1 client ===")
        print("| model | retrieve p50 ms | p95 ms | /healthz p50 ms | retrieve p50 / healthz p50 |")
        print("|---|---|---|---|---|")
        p50 = {}
        for model in MODELS:
            retrieve, healthz = times[model]["retrieve"], times[model]["healthz"]
            p50[model] = percentile(retrieve, 50)
            print(
                f"| {model} | {p50[model]:.1f} | {percentile(retrieve, 95):.1f} | {percentile(healthz, 50):.2f} | "
                f"{p50[model] / percentile(healthz, 50):.1f}x |"
            )
        print(f"\nbge-small retrieve p50 / MiniLM retrieve p50 = {p50['bge-small'] / p50['minilm']:.3f}")
        for client in clients.values():
            client.close()
        return 0
    finally:
        for server, _ in servers.values():
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
