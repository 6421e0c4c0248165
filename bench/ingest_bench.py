"""Bulk ingest: `gateway embed` and `gateway pii analyze` on a real corpus, beside the old paths.

Loads N documents of a BEIR-style data set (SciFact: `corpus.jsonl` of title + abstract, ~1.5 KB)
through the real ingest path (`gateway.writes.items.ingest`, what `PUT /v1/items` runs) into a temp
SQLite store, copies that store once per run, and times, each as its own subprocess on its own copy:

- `old embed`: the path `gateway embed` took before (one 2-thread onnxruntime session, 64 passages
  a call in key order, padded to the longest, `embed_pending` until nothing waits);
- `gateway embed (float)`: `gateway embed` on the packaged graph as shipped (`GATEWAY_EMBEDDINGS=minilm-float`);
- `gateway embed` (length-sorted batches, one single-threaded session per core, streamed chunks) on
  MiniLM's integer model (`GATEWAY_EMBEDDINGS=minilm`; gateway/writes/integer_model.py, made once
  before the runs and timed on its own);
- `gateway embed bge-small`: the same command on the default model, bge-small-en-v1.5 (fetched into
  the run's model directory before the runs, from the user's cache when it is there);
- `old pii analyze`: the path `gateway pii analyze` took before (one text per Presidio call, one process, `analyze_pending` until nothing waits);
- `gateway pii analyze --processes 1` (spaCy `pipe` in batches, one process) and
  `gateway pii analyze` (the same, one worker process per core).

Then each model embeds 200 SciFact claims one at a time on one thread, as the service embeds a
query: p50 and p95 per query. Each run reports items/s, KB/s (UTF-8 bytes of the analysed or embedded text) and the peak RSS of
the run's whole process tree (psutil, sampled every 0.1 s: the CLI and its worker processes summed),
and the new paths are given as ratios to the old ones measured in the same run. Afterwards the
vectors of both embed runs are compared (cosine per item) and the spans of both analyses (equal per
item), so a faster path that changed its answers shows here.

    .venv/bin/python bench/ingest_bench.py --data-set /work/shared/data/scifact              # all 5,183
    .venv/bin/python bench/ingest_bench.py --data-set /work/shared/data/scifact --items 1000

The data set is read where it is, never copied into the project. See bench/README.md ("Bulk ingest").
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import clean_env, gateway_executable  # noqa: E402

TENANT = "bench"

# The old paths, as the CLI ran them before this change (kept here, never in the service).
OLD_EMBED = """
import sys
from core.store import open_store
from gateway.writes.embeddings import OnnxMiniLM
from gateway.background import Limit
from gateway.writes.vectorize import embed_pending
engine = open_store(sys.argv[1])
embedder = OnnxMiniLM(threads=2)
done = 0
while n := embed_pending(engine, embedder, Limit(64, 1 << 30)).items:
    done += n
print(done, "items embedded")
"""
OLD_PII = """
import sys
from core.store import open_store
from gateway.privacy.detect import Detector
from gateway.background import Limit
from gateway.privacy.store import analyze_pending
engine = open_store(sys.argv[1])
detector = Detector()
done = 0
while n := analyze_pending(engine, detector, Limit(64, 1 << 30)).items:
    done += n
print(done, "items analysed")
"""


def corpus(data_set: Path, limit: int | None) -> list[dict[str, Any]]:
    items = []
    with (data_set / "corpus.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            doc = json.loads(line)
            items.append(
                {
                    "id": f"scifact_{doc['_id']}",
                    "kind": "document",
                    "document": doc["_id"],
                    "section": doc["title"],
                    "text": f"{doc['title']}\n{doc['text']}",
                    "acl": ["*"],
                }
            )
            if limit is not None and len(items) >= limit:
                break
    return items


def load(store: Path, items: list[dict[str, Any]]) -> float:
    from core.store import open_store
    from gateway.writes.items import ingest

    engine = open_store(f"sqlite:///{store}")
    started = time.perf_counter()
    report = ingest(engine, TENANT, items)
    seconds = time.perf_counter() - started
    engine.dispose()
    if report.rejected:
        raise SystemExit(f"ingest rejected {len(report.rejected)} items, e.g. {report.rejected[0]}")
    return seconds


def timed(command: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """(seconds, peak RSS in bytes of the process tree, stdout) of one subprocess run."""
    import psutil

    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**clean_env(), **env})
    parent = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            tree = [parent, *parent.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.1)
    seconds = time.perf_counter() - started
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed with code {proc.returncode}: {out.strip()}")
    return seconds, peak, out.strip()


def vectors(store: Path) -> dict[int, np.ndarray[Any, Any]]:
    with sqlite3.connect(store) as conn:
        return {pk: np.frombuffer(blob, dtype=np.float32) for pk, blob in conn.execute("SELECT item_pk, vector FROM item_vector")}


def spans(store: Path) -> dict[int, str]:
    with sqlite3.connect(store) as conn:
        return {pk: found for pk, found in conn.execute("SELECT item_pk, spans FROM item_pii")}


def bge_files(model_dir: Path) -> None:
    """bge-small's verified files in `model_dir`: copied from the user's cache (fetched there when missing)."""
    from gateway.settings import load_settings
    from gateway.writes.maven_model import BGE_SMALL, fetch

    settings = load_settings()
    started = time.perf_counter()
    fetch(BGE_SMALL, settings.effective_model_dir, settings.model_registry)
    shutil.copytree(BGE_SMALL.directory(settings.effective_model_dir), BGE_SMALL.directory(model_dir), dirs_exist_ok=True)
    print(f"bge-small's files in place in {time.perf_counter() - started:.1f} s")


def query_latency(data_set: Path, model_dir: Path, count: int = 200) -> None:
    """Per model, `count` claims embedded one at a time on one thread (as a retrieve embeds its query)."""
    from gateway.settings import load_settings
    from gateway.writes.embeddings import load_embedder

    with (data_set / "queries.jsonl").open(encoding="utf-8") as lines:
        claims = [json.loads(line)["text"] for line in lines if line.strip()][:count]
    print(f"\n| model | query embed p50 ms | p95 ms | ({len(claims)} claims, one thread, one at a time) |")
    print("|---|---|---|---|")
    for kind in ("minilm", "bge-small"):
        embedder, note = load_embedder(load_settings({"embeddings": kind, "model_dir": model_dir}))
        assert embedder is not None and not note, note
        embedder.embed(claims[:5])  # warm
        times = []
        for claim in claims:
            started = time.perf_counter()
            embedder.embed([claim])
            times.append((time.perf_counter() - started) * 1000)
        times.sort()
        print(f"| {embedder.model_id} | {times[len(times) // 2]:.1f} | {times[int(len(times) * 0.95)]:.1f} | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--data-set", type=Path, required=True, help="a BEIR-style directory with corpus.jsonl")
    parser.add_argument("--items", type=int, default=None, help="documents to load (default: all)")
    parser.add_argument("--skip-old", action="store_true", help="measure the new paths only (no ratios)")
    parser.add_argument("--only", choices=("embed", "pii"), default=None, help="measure one command only")
    args = parser.parse_args()
    if not (args.data_set / "corpus.jsonl").is_file():
        parser.error(f"--data-set: no corpus.jsonl in {args.data_set}")
    if args.items is not None and args.items < 1:
        parser.error("--items must be positive")

    items = corpus(args.data_set, args.items)
    kb = sum(len(i["text"].encode("utf-8")) for i in items) / 1024
    work = Path(tempfile.mkdtemp(prefix="gw-ingest-bench-"))
    try:
        base = work / "loaded.db"
        seconds = load(base, items)
        print(
            f"loaded {len(items):,} documents ({kb:,.0f} KB) through ingest in {seconds:.1f} s ({len(items) / seconds:,.0f} items/s)"
        )
        python, gateway = sys.executable, gateway_executable()
        models = {"GATEWAY_MODEL_DIR": str(work / "models"), "GATEWAY_EMBEDDINGS": "minilm"}
        runs: list[tuple[str, str, list[str]]] = []
        if args.only in (None, "embed"):
            from gateway.writes.integer_model import integer_model

            started = time.perf_counter()
            integer_model()  # what each `gateway embed` run below does again at its start (in memory)
            print(f"made the integer model from the packaged one in {time.perf_counter() - started:.1f} s")
            bge_files(work / "models")
            if not args.skip_old:
                runs.append(("embed", "old embed", [python, "-c", OLD_EMBED, "sqlite:///{db}"]))
                runs.append(("embed", "gateway embed (float)", [gateway, "embed", "--database-url", "sqlite:///{db}"]))
            runs.append(("embed", "gateway embed", [gateway, "embed", "--database-url", "sqlite:///{db}"]))
            runs.append(("embed", "gateway embed bge-small", [gateway, "embed", "--database-url", "sqlite:///{db}"]))
        if args.only in (None, "pii"):
            if not args.skip_old:
                runs.append(("pii", "old pii analyze", [python, "-c", OLD_PII, "sqlite:///{db}"]))
            runs.append(
                (
                    "pii",
                    "gateway pii analyze --processes 1",
                    [gateway, "pii", "analyze", "--processes", "1", "--database-url", "sqlite:///{db}"],
                )
            )
            runs.append(("pii", "gateway pii analyze", [gateway, "pii", "analyze", "--database-url", "sqlite:///{db}"]))
        results: dict[str, dict[str, Any]] = {}
        for kind, name, command in runs:
            db = work / f"{name.replace(' ', '-')}.db"
            shutil.copy(base, db)
            env = {**models, "GATEWAY_EMBEDDINGS": "minilm-float"} if name.endswith("(float)") else models
            env = {**models, "GATEWAY_EMBEDDINGS": "bge-small"} if name.endswith("bge-small") else env
            seconds, peak, out = timed([part.replace("{db}", str(db)) for part in command], env)
            results[name] = {"kind": kind, "db": db, "s": seconds, "rss": peak, "out": out}
            print(
                f"{name:<36} {len(items) / seconds:7.1f} items/s {kb / seconds:7.1f} KB/s  peak RSS {peak / 2**20:6.0f} MB  ({seconds:.1f} s; {out.splitlines()[-1] if out else ''})",
                flush=True,
            )

        print()
        print("| command | items/s | KB/s | peak RSS (MB) | vs old |")
        print("|---|---|---|---|---|")
        for name, r in results.items():
            old = (
                results.get(f"old {name.removeprefix('gateway ').removesuffix(' --processes 1').removesuffix(' (float)')}")
                if name.startswith("gateway")
                else None
            )
            ratio = f"{old['s'] / r['s']:.2f}x" if old else ""
            print(f"| `{name}` | {len(items) / r['s']:.1f} | {kb / r['s']:.1f} | {r['rss'] / 2**20:.0f} | {ratio} |")
        if "gateway embed bge-small" in results and "gateway embed" in results:
            print(
                f"\n`gateway embed` bge-small vs MiniLM (integer): "
                f"{results['gateway embed']['s'] / results['gateway embed bge-small']['s']:.2f}x the items/s"
            )
        if args.only in (None, "embed"):
            query_latency(args.data_set, work / "models")
        if "old embed" in results and "gateway embed (float)" in results:
            embedded = results["gateway embed"]["s"]
            print(f"\n`gateway embed` integer vs float: {results['gateway embed (float)']['s'] / embedded:.2f}x the items/s")
            old_v = vectors(results["old embed"]["db"])
            for name in ("gateway embed (float)", "gateway embed"):
                new_v = vectors(results[name]["db"])
                cos = np.array([float(old_v[pk] @ new_v[pk]) for pk in old_v])
                print(
                    f"vectors of {name}: {len(new_v)} of {len(old_v)} items; cosine to old embed min {cos.min():.6f}, mean {cos.mean():.6f}"
                )
        if "old pii analyze" in results and "gateway pii analyze" in results:
            old_s, new_s = spans(results["old pii analyze"]["db"]), spans(results["gateway pii analyze"]["db"])
            differ = sum(1 for pk in old_s if new_s.get(pk) != old_s[pk])
            found = sum(len(json.loads(v)) for v in new_s.values())
            print(
                f"spans: {len(new_s)} of {len(old_s)} items; {differ} items with other spans than before ({found} spans in all)"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
