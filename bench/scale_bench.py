"""A retrieve's cost as the corpus grows (issue 57): one store grown 1k -> 10k -> 100k -> 1M items.

The corpus is public text we did not shape: SciFact's 5,183 abstracts and their tagged copies (a copy
is a new id with a `copyN` tag), each with its vector supplied at load (`vector` + `vector_model`):
the abstract's own bge-small vector, computed once per run folder and cached, with a little noise
per copy so no two vectors are equal. Every item is readable by one of 1,000 groups (`group:sN`,
N = position mod 1,000) and one of two (`group:hN`, N = position mod 2), so three callers of one
tenant see a fixed share of it whatever its size:

- `0.1%`: groups `s0`;  `1%`: groups `s0`..`s9`;  `50%`: group `h0`.

At each size the store is grown with `gateway ingest FILE.ndjson` (the rows past the last size),
then served (`gateway serve`, one worker, background work off; the semantic index built before the
clock starts) and each caller asks the same SciFact claims as the dullest call there is: a
standard-depth `scout` retrieve with every source on (exact, graph, lexical, semantic), one client,
each retrieve followed by a `/healthz` of the same server. Reported per size and caller: p50 and p95
of the retrieve, its p50 against `/healthz`'s p50 in the same run, the p50 of each stage from the
answers' own `timings`, the semantic plan the answers name, and the server's peak RSS and start-up
time (process start to `/readyz` 200). The last table is each caller's p50 at each size against its
p50 at the first size: the issue's target is at most 2x at 1M.

    .venv/bin/python bench/scale_bench.py --sizes 1000,10000,100000           # ~15 min on 2 cores
    .venv/bin/python bench/scale_bench.py --sizes 1000,10000,100000,1000000   # ~1.5 h, ~10 GB in --work
    .venv/bin/python bench/scale_bench.py --sizes 1000,10000 --queries 30     # quick

    .venv/bin/python bench/scale_bench.py --postgres --sizes 1000,10000,100000  # PostgreSQL + pgvector

`--work` keeps the vectors' cache, the store and a copy of it at each size up to 100,000
(`sizes/N`); `--reuse` starts from a store a previous run grew (its sizes already loaded are not
loaded again) and measures a smaller size on its copy, so every size's figure comes from the same
run. `--postgres` grows one schema of an embedded PostgreSQL 17 with pgvector (tests/embedded_pg.py;
no copies, no reuse). `--plot FILE.svg` draws each caller's p50 against items (log scale).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Server, clean_env, code_revision, create_key, free_port, gateway_executable, percentile, scifact  # noqa: E402

TENANT = "bench"
TASK = {"type": "account_followup", "scope": "sales"}
CALLERS = {"0.1%": "sales,s0", "1%": "sales," + ",".join(f"s{n}" for n in range(10)), "50%": "sales,h0"}
NOISE = 0.02  # the copies' vectors: the abstract's, nudged (cosine ~0.98 with it)
WARMUP = 10
KEEP_COPIES_UP_TO = 100_000  # sizes whose store is copied (sizes/N) so a later --reuse run measures them again
STAGES = (
    "decide_ms",
    "embed_ms",
    "graph_ms",
    "sections_ms",
    "lexical_ms",
    "semantic_ms",
    "recall_ms",
    "verify_ms",
    "fuse_ms",
    "mask_ms",
    "total_ms",
)


def abstract_vectors(work: Path, docs: list[dict[str, Any]]) -> tuple[npt.NDArray[np.float32], str]:
    """Each abstract's bge-small vector as the service would embed it (cached in `work`), and the model id."""
    from gateway.settings import load_settings
    from gateway.writes.embeddings import embed_many, load_embedder
    from gateway.writes.vectorize import _passage

    settings = load_settings({"data_dir": work / "model-probe"}, environ={})
    embedder, why = load_embedder(settings, threads=os.cpu_count() or 1, bulk=True)
    if embedder is None:
        raise SystemExit(f"no embedding model: {why}")
    cache = work / f"vectors-{embedder.model_id.replace('/', '_')}-{len(docs)}.npy"
    if cache.exists():
        return np.load(cache), embedder.model_id
    print(f"embedding {len(docs):,} abstracts once with {embedder.model_id} (cached in {cache})...", flush=True)
    started = time.perf_counter()
    vectors = embed_many(embedder, [_passage(str(d["text"]), str(d["section"])) for d in docs], 32)
    print(f"  {len(docs) / (time.perf_counter() - started):.1f} items/s", flush=True)
    np.save(cache, vectors)
    return vectors, embedder.model_id


def write_slice(
    path: Path, docs: list[dict[str, Any]], vectors: npt.NDArray[np.float32], model: str, start: int, stop: int
) -> None:
    """Items `start`..`stop` of the grown corpus as NDJSON, each with its vector."""
    rng = np.random.default_rng(start)
    with path.open("w", encoding="utf-8") as out:
        for i in range(start, stop):
            doc, copy = docs[i % len(docs)], i // len(docs)
            vector = vectors[i % len(docs)]
            if copy:
                vector = vector + rng.standard_normal(len(vector)).astype(np.float32) * NOISE / np.sqrt(len(vector)) * 7
                vector = vector / np.linalg.norm(vector)
            item = {
                **doc,
                "id": f"{doc['id']}_{copy}",
                "tags": [f"copy{copy}"],
                "acl": [f"group:s{i % 1000}", f"group:h{i % 2}"],
                "vector": [round(float(x), 5) for x in vector],
                "vector_model": model,
            }
            out.write(json.dumps(item, ensure_ascii=False) + "\n")


@dataclass(frozen=True)
class Store:
    """Where the corpus lives: a data folder (keys, logs; the SQLite file unless `url` is set)."""

    folder: Path
    url: str | None = None  # a PostgreSQL database URL

    @property
    def env(self) -> dict[str, str]:
        # On PostgreSQL Tantivy ranks lexical search when asked (`auto` leaves it to PostgreSQL).
        return {"GATEWAY_DATABASE_URL": self.url, "GATEWAY_LEXICAL_ENGINE": "tantivy"} if self.url else {}


def grow(store: Store, path: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [gateway_executable(), "ingest", "--data", str(store.folder), "--tenant", TENANT, str(path)],
        capture_output=True,
        text=True,
        env=clean_env({"GATEWAY_PII_BACKGROUND": "false", **store.env}),
    )
    if done.returncode != 0:
        raise SystemExit(f"gateway ingest failed ({done.returncode}): {done.stderr[-800:]}")
    return time.perf_counter() - started


def timed(
    client: httpx.Client, method: str, path: str, key: str | None, body: dict[str, Any] | None
) -> tuple[float, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    started = time.perf_counter()
    response = client.request(method, path, json=body, headers=headers)
    ms = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"{method} {path}: HTTP {response.status_code} {response.text[:300]}")
    return ms, response.json()


def request(claim: str) -> dict[str, Any]:
    return {
        "task": TASK,
        "query": claim,
        "mode": "scout",
        "sources": {"exact": True, "graph": True, "lexical": True, "semantic": True},
    }


def measure(server: Server, keys: dict[str, str], claims: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    with httpx.Client(base_url=server.url, timeout=120) as client:
        for caller, key in keys.items():
            for claim in claims[:WARMUP]:
                timed(client, "POST", "/v1/retrieve", key, request(claim))
            retrieve, healthz, plans, returned = [], [], Counter[str](), []
            stages: dict[str, list[float]] = {stage: [] for stage in STAGES}
            for claim in claims:
                ms, answer = timed(client, "POST", "/v1/retrieve", key, request(claim))
                retrieve.append(ms)
                healthz.append(timed(client, "GET", "/healthz", None, None)[0])
                for stage in STAGES:
                    if isinstance(answer.get("timings", {}).get(stage), (int, float)):
                        stages[stage].append(float(answer["timings"][stage]))
                semantic = answer.get("sources", {}).get("semantic", {})
                plans[str(semantic.get("detail") or semantic.get("status")).split(";")[0]] += 1
                returned.append(len(answer.get("items", [])))
            out[caller] = {
                "p50": percentile(retrieve, 50),
                "p95": percentile(retrieve, 95),
                "healthz": percentile(healthz, 50),
                "stages": {stage: percentile(values, 50) for stage, values in stages.items() if values},
                "plans": dict(plans),
                "returned": percentile(returned, 50),
            }
    return out


def served(store: Store) -> tuple[Server, float, float]:
    """The server, seconds to `/readyz` 200, and seconds until its indexes are built (`/readyz`:
    the tenant's Tantivy index ready, no HNSW graph building). `/healthz` answers throughout."""
    env = {"GATEWAY_PII_BACKGROUND": "false", "GATEWAY_BACKGROUND_EMBEDDING": "false", **store.env}
    server = Server(store.folder, free_port(), env=env, label="scale")
    started = time.perf_counter()
    server.start()
    server.wait_ready()
    ready = time.perf_counter() - started
    while True:
        body = httpx.get(f"{server.url}/readyz", timeout=10).json()
        lexical, semantic = body.get("lexical", {}), body.get("semantic", {})
        built = lexical.get("engine") != "tantivy" or (
            lexical.get("tenants_ready", 0) >= 1 and not lexical.get("tenants_building")
        )
        if built and not semantic.get("graphs_building") and httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200:
            return server, ready, time.perf_counter() - started
        time.sleep(0.5)


@contextlib.contextmanager
def backend(postgres: bool, work: Path) -> Iterator[str | None]:
    """None (SQLite in the store folder), or the URL of a fresh embedded PostgreSQL (stopped after)."""
    if not postgres:
        yield None
        return
    from tests.embedded_pg import Server as Postgres

    server = Postgres()
    try:
        yield server.url  # the superuser's database: pgvector may be created there
    finally:
        server.stop()


def report(size: int, figures: dict[str, dict[str, Any]], start_s: float, indexed_s: float, peak: float) -> None:
    print(f"  server start to /readyz {start_s:.1f} s, to its indexes built {indexed_s:.1f} s; peak RSS {peak:,.0f} MiB")
    print(f"  {'caller':>6} {'p50 ms':>8} {'p95 ms':>8} {'x healthz':>9}  {'items':>5}  stages p50 ms / semantic plan")
    for caller, f in figures.items():
        stage_text = " ".join(f"{s[:-3]} {v:.1f}" for s, v in f["stages"].items() if s != "total_ms")
        print(
            f"  {caller:>6} {f['p50']:8.1f} {f['p95']:8.1f} {f['p50'] / f['healthz']:8.0f}x  {f['returned']:5.0f}  {stage_text}  {f['plans']}",
            flush=True,
        )


def callers(store: Store) -> dict[str, str]:
    """A fresh key per caller in `store`."""
    return {
        caller: create_key(store.folder, TENANT, f"user:caller-{n}", "agent", groups=groups, env=store.env)
        for n, (caller, groups) in enumerate(CALLERS.items())
    }


def plot(results: dict[int, dict[str, Any]], path: Path, title: str) -> None:
    """Each caller's p50 (and /healthz's) against items, both axes log scale, as SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(results)
    figure, axes = plt.subplots(figsize=(6.4, 4.0))
    for caller in CALLERS:
        axes.plot(sizes, [results[n]["callers"][caller]["p50"] for n in sizes], marker="o", label=f"caller reading {caller}")
    healthz = [percentile([f["healthz"] for f in results[n]["callers"].values()], 50) for n in sizes]
    axes.plot(sizes, healthz, marker=".", linestyle=":", color="grey", label="/healthz (same run)")
    first = results[sizes[0]]["callers"]
    target = max(first[c]["p50"] for c in CALLERS) * 2
    axes.axhline(target, color="red", linewidth=0.8, linestyle="--", label="2x the slowest p50 at the first size")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("items in the tenant")
    axes.set_ylabel("p50 ms (one client)")
    axes.set_title(title, fontsize=10)
    axes.grid(True, which="both", linewidth=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, format="svg", metadata={"Date": None})
    plt.close(figure)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data-set", type=Path, default=Path("/work/shared/data/scifact"))
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--work", type=Path, default=Path("/tmp/scale-bench"))
    parser.add_argument("--reuse", action="store_true", help="grow the store a previous run left in --work")
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL 17 + pgvector instead of SQLite")
    parser.add_argument("--plot", type=Path, help="draw p50 against items into this SVG file")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    docs, claims = scifact(args.data_set, 10**9)
    claims = claims[WARMUP : WARMUP + args.queries] if len(claims) > WARMUP + args.queries else claims
    args.work.mkdir(parents=True, exist_ok=True)
    vectors, model = abstract_vectors(args.work, docs)
    with backend(args.postgres, args.work) as url:
        folder = args.work / ("store-postgres" if url else "store")
        marker = folder / "scale-bench.json"
        loaded = json.loads(marker.read_text())["items"] if args.reuse and not url and marker.exists() else 0
        if not loaded:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
        store = Store(folder, url)
        if url:
            subprocess.run(
                [gateway_executable(), "migrate", "--database-url", url], check=True, env=clean_env(), capture_output=True
            )
        print(
            f"scale bench ({'PostgreSQL' if url else 'SQLite'}): code {code_revision()}, {os.cpu_count()} cores, "
            f"{len(claims)} claims a caller a size, model {model}",
            flush=True,
        )
        results: dict[int, dict[str, Any]] = {}
        for size in sizes:
            measured = store
            if size > loaded:
                part = args.work / "slice.ndjson"
                write_slice(part, docs, vectors, model, loaded, size)
                seconds = grow(store, part)
                part.unlink()
                print(
                    f"\n{size:,} items: grew by {size - loaded:,} in {seconds:.0f} s ({(size - loaded) / seconds:,.0f} items/s)",
                    flush=True,
                )
                loaded = size
                marker.write_text(json.dumps({"items": loaded}))
                if not url and size <= KEEP_COPIES_UP_TO:
                    kept = args.work / "sizes" / str(size)
                    shutil.rmtree(kept, ignore_errors=True)
                    shutil.copytree(folder, kept, ignore=shutil.ignore_patterns("*.log"))
            elif size < loaded:
                kept = args.work / "sizes" / str(size)
                if url or not kept.exists():
                    print(
                        f"\n{size:,} items: the store already holds {loaded:,} and keeps no copy at {size:,}; skipped", flush=True
                    )
                    continue
                measured = Store(kept)
                print(f"\n{size:,} items: measured on the copy kept at that size", flush=True)
            keys = callers(measured)  # in the store measured: a copy holds only the keys of the run that made it
            server, start_s, indexed_s = served(measured)
            try:
                figures = measure(server, keys, claims)
                peak = server.memory_kib().get("VmHWM", 0) / 1024
            finally:
                server.stop()
            results[size] = {"callers": figures, "start_s": start_s, "indexed_s": indexed_s, "peak_mib": peak}
            report(size, figures, start_s, indexed_s, peak)
    if len(results) > 1:
        first = min(results)
        print(f"\np50 against the p50 at {first:,} items (target at 1,000,000: <= 2x)")
        print(f"  {'items':>9} " + " ".join(f"{c:>7}" for c in CALLERS))
        for size, r in results.items():
            print(
                f"  {size:>9,} "
                + " ".join(f"{r['callers'][c]['p50'] / results[first]['callers'][c]['p50']:6.2f}x" for c in CALLERS)
            )
        if args.plot:
            plot(results, args.plot, f"scale_bench, {'PostgreSQL + pgvector' if args.postgres else 'SQLite (embedded)'}, 2 cores")
            print(f"plot: {args.plot}")
    name = "scale-bench-results-postgres.json" if args.postgres else "scale-bench-results.json"
    (args.work / name).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
