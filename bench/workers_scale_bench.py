"""Background work that scales with workers: embedding and personal-data analysis against their
floors, by the CLI and by the service, with 1 and 2 processes, in one run.

Loads N SciFact abstracts (title + abstract, ~1.5 KB) through the real ingest path into a SQLite
store (copied once per phase) or, with --postgres, a fresh PostgreSQL schema per phase, and times
each phase as subprocesses on its own store:

- `raw onnxruntime`: a plain loop over the same texts with the same model files (the tokenizer,
  length-sorted batches of 8, one single-threaded session per core side by side): the model's floor;
- `gateway embed` (one process, a session per core) and `gateway embed` x2 (two processes side by
  side on one store, half the cores each: their chunks are claimed, gateway/writes/claims.py);
- `raw presidio`: Presidio's own AnalyzerEngine (configured as the gateway's, the same recognizers
  and spaCy pipeline) called once per text, in one process, and in one process per core;
- `gateway pii analyze --processes 1` and `gateway pii analyze` (a process per core);
- `gateway serve` background: the service started on the loaded store with both background jobs on
  and no calls, timed from ready until `/readyz` reports nothing waiting for either kind of work
  (the commands and floors are timed whole, start-up included; the floors' own loops are printed too);
- the same with a `gateway work` process beside it (both claim batches of one backlog).

Each reports items/s, KB/s (UTF-8 bytes of the texts) and the peak RSS of its process tree (psutil,
sampled every 0.2 s), with ratios to the floors and to `gateway embed` followed by `gateway pii
analyze` on the same items (the sum of their times). Figures on a shared machine move from run to
run: compare the ratios, which are measured side by side.

    .venv/bin/python bench/workers_scale_bench.py                       # 1,000 abstracts
    .venv/bin/python bench/workers_scale_bench.py --items 300 --only embed
    .venv/bin/python bench/workers_scale_bench.py --postgres            # the tests' embedded PostgreSQL

The commands run as `python -c 'from gateway.cli import main; main()'` from this checkout (the code
beside this file), the data set is read where it is. See bench/README.md ("Background work and workers").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import clean_env, free_port  # noqa: E402

TENANT = "bench"
DATA_SET = Path("/work/shared/data/scifact")
GATEWAY = [sys.executable, "-c", "import sys; from gateway.cli import main; sys.exit(main())"]

RAW_ONNX = r"""
import sys, json, os, time
from concurrent.futures import ThreadPoolExecutor
import numpy as np, onnxruntime
from tokenizers import Tokenizer
from gateway.settings import load_settings
from gateway.writes.maven_model import BGE_SMALL, fetch
settings = load_settings()
files = fetch(BGE_SMALL, settings.effective_model_dir, settings.model_registry)
texts = json.load(open(sys.argv[1], encoding="utf-8"))
cores = len(os.sched_getaffinity(0))
tok = Tokenizer.from_file(str(files.tokenizer)); tok.enable_truncation(512); tok.no_padding()
options = onnxruntime.SessionOptions(); options.intra_op_num_threads = 1; options.inter_op_num_threads = 1
options.enable_mem_pattern = False
sessions = [onnxruntime.InferenceSession(files.model, options, providers=["CPUExecutionProvider"]) for _ in range(cores)]
started = time.perf_counter()
encoded = [e.ids for e in tok.encode_batch(texts)]
order = sorted(range(len(texts)), key=lambda i: len(encoded[i]))
batches = [order[s : s + 8] for s in range(0, len(order), 8)]
def run(job):
    n, rows = job
    width = max(len(encoded[i]) for i in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64); mask = np.zeros_like(ids)
    for r, i in enumerate(rows):
        ids[r, : len(encoded[i])] = encoded[i]; mask[r, : len(encoded[i])] = 1
    out = sessions[n % cores].run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0][:, 0, :]
    return out / np.linalg.norm(out, axis=1, keepdims=True)
with ThreadPoolExecutor(cores) as pool:
    done = sum(len(v) for v in pool.map(run, enumerate(batches)))
print(done, "texts embedded", time.perf_counter() - started)
"""

RAW_PRESIDIO = r"""
import sys, os, time, json
from concurrent.futures import ProcessPoolExecutor
texts = json.load(open(sys.argv[1], encoding="utf-8"))
processes = int(sys.argv[2])
_engine = []
def start():
    from gateway.privacy.detect import _analyzer
    _engine.append(_analyzer())  # Presidio's AnalyzerEngine, as the gateway configures it
def analyse(share):
    return sum(len(_engine[0].analyze(text=t, language="en")) for t in share)
if __name__ == "__main__":
    import multiprocessing
    shares = [texts[i::processes] for i in range(processes)]
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"), initializer=start) as pool:
        list(pool.map(analyse, [["warm up"]] * processes))
        started = time.perf_counter()
        found = sum(pool.map(analyse, shares))
    print(len(texts), "texts analysed", found, "spans", time.perf_counter() - started)
"""


def corpus(limit: int) -> list[dict[str, Any]]:
    items = []
    with (DATA_SET / "corpus.jsonl").open(encoding="utf-8") as lines:
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
            if len(items) >= limit:
                break
    return items


def load(url: str, items: list[dict[str, Any]]) -> None:
    from core.store import open_store
    from gateway.writes.items import ingest

    engine = open_store(url)
    report = ingest(engine, TENANT, items)
    engine.dispose()
    if report.rejected:
        raise SystemExit(f"ingest rejected {len(report.rejected)} items")


class Tree:
    """Processes started together, their tree's peak RSS sampled."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []
        self.peak = 0

    def start(self, command: list[str], env: dict[str, str], log: Path | None = None) -> subprocess.Popen[str]:
        out = open(log, "w") if log else subprocess.PIPE  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT if log else subprocess.DEVNULL, text=True, env=env, cwd=ROOT
        )
        self.procs.append(proc)
        return proc

    def sample(self) -> None:
        import psutil

        total = 0
        for proc in self.procs:
            try:
                parent = psutil.Process(proc.pid)
                total += sum(p.memory_info().rss for p in [parent, *parent.children(recursive=True)])
            except psutil.Error:
                pass
        self.peak = max(self.peak, total)

    def wait(self) -> list[str]:
        while any(p.poll() is None for p in self.procs):
            self.sample()
            time.sleep(0.2)
        outs = []
        for proc in self.procs:
            out = proc.stdout.read() if proc.stdout else ""
            if proc.returncode != 0:
                raise SystemExit(f"{proc.args!r} failed ({proc.returncode}): {out.strip()[-2000:]}")
            outs.append(out.strip())
        return outs

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()


def run_commands(commands: list[list[str]], env: dict[str, str]) -> tuple[float, int, list[str]]:
    tree = Tree()
    started = time.perf_counter()
    for command in commands:
        tree.start(command, env)
    outs = tree.wait()
    return time.perf_counter() - started, tree.peak, outs


def serve_background(data: Path, url_: str, env: dict[str, str], extra_worker: bool) -> tuple[float, int]:
    """Seconds from `gateway serve` ready until /readyz reports nothing waiting, and the peak RSS."""
    port = free_port()
    tree = Tree()
    serve_env = {**env, "GATEWAY_PII_BACKGROUND": "true", "GATEWAY_DATA_DIR": str(data), "GATEWAY_PORT": str(port)}
    if url_.startswith("postgresql"):
        serve_env["GATEWAY_DATABASE_URL"] = url_
    tree.start([*GATEWAY, "serve"], serve_env, data / "serve.log")
    url = f"http://127.0.0.1:{port}/readyz"
    try:
        deadline = time.monotonic() + 180
        while True:
            tree.sample()
            if time.monotonic() > deadline:
                raise SystemExit(f"not ready: {(data / 'serve.log').read_text()[-2000:]}")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        started = time.perf_counter()
        if extra_worker:
            tree.start([*GATEWAY, "work", "--follow", "--database-url", url_], env, data / "work.log")
        while True:
            tree.sample()
            backlog = httpx.get(url, timeout=5).json().get("background", {})
            if backlog and all(v == 0 for v in backlog.values()):
                return time.perf_counter() - started, tree.peak
            if time.perf_counter() - started > 3600:
                raise SystemExit(f"still waiting after an hour: {backlog}")
            time.sleep(0.5)
    finally:
        tree.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--items", type=int, default=1000, help="abstracts to load (default 1,000)")
    parser.add_argument("--only", choices=("embed", "pii", "serve"), action="append", help="phases to run (default: all)")
    parser.add_argument(
        "--postgres",
        nargs="?",
        const="embedded",
        default=None,
        help="on PostgreSQL: a server URL, or (alone) the embedded server the tests use (tests/embedded_pg.py)",
    )
    args = parser.parse_args()
    only = set(args.only or ("embed", "pii", "serve"))
    items = corpus(args.items)
    n = len(items)
    kb = sum(len(i["text"].encode()) for i in items) / 1024
    cores = len(os.sched_getaffinity(0))
    work = Path(tempfile.mkdtemp(prefix="gw-workers-scale-"))
    postgres = args.postgres
    if postgres == "embedded":
        from tests.embedded_pg import shared_server

        server, reason = shared_server()
        if server is None:
            raise SystemExit(reason)
        postgres = server.url
    schemas: list[str] = []

    def store() -> str:
        """A store with the items loaded and nothing embedded nor analysed: a copy of the SQLite
        file, or a fresh PostgreSQL schema, migrated and loaded."""
        if postgres is None:
            copy = work / f"{len(schemas)}.db"
            schemas.append(str(copy))
            shutil.copy(base, copy)
            return f"sqlite:///{copy}"
        import secrets

        from sqlalchemy import create_engine, text

        from core.store import migrate_store

        schema = "gw_wsb_" + secrets.token_hex(5)
        admin = create_engine(postgres)
        with admin.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
        admin.dispose()
        schemas.append(schema)
        url_ = f"{postgres}?options=-csearch_path%3D{schema}"
        migrate_store(url_)
        load(url_, items)
        return url_

    try:
        base = work / "loaded.db"
        if postgres is None:
            load(f"sqlite:///{base}", items)
        texts = work / "texts.json"
        texts.write_text(json.dumps([i["text"] for i in items]), encoding="utf-8")
        where = "PostgreSQL" if postgres else "SQLite"
        print(f"{n:,} SciFact abstracts ({kb:,.0f} KB) on {where}, {cores} cores; model bge-small (the default)", flush=True)
        env = clean_env({"GATEWAY_PII_BACKGROUND": "false"})
        results: dict[str, tuple[float, int]] = {}

        def phase(name: str, commands: list[list[str]], seconds_from_output: bool = False) -> None:
            url_ = store()
            commands = [[part.replace("{url}", url_).replace("{texts}", str(texts)) for part in c] for c in commands]
            seconds, peak, outs = run_commands(commands, env)
            results[name] = (seconds, peak)  # the whole process, start-up included, as for the commands
            loop = ""
            if seconds_from_output:  # the floors also time their own loop, after loading the model
                loop = f"  (its loop alone: {n / max(float(out.split()[-1]) for out in outs):.1f} items/s)"
            print(
                f"{name:<40} {n / seconds:7.1f} items/s {kb / seconds:7.1f} KB/s  peak RSS {peak / 2**20:6.0f} MB{loop}",
                flush=True,
            )

        url = ["--database-url", "{url}"]
        if "embed" in only:
            phase("raw onnxruntime", [[sys.executable, "-c", RAW_ONNX, "{texts}"]], seconds_from_output=True)
            phase("gateway embed", [[*GATEWAY, "embed", *url]])
            half = str(max(1, cores // 2))
            phase("gateway embed x2", [[*GATEWAY, "embed", "--threads", half, *url]] * 2)
        if "pii" in only:
            script = work / "raw_presidio.py"  # a file: the spawned processes import its functions
            script.write_text(RAW_PRESIDIO, encoding="utf-8")
            phase("raw presidio (1 process)", [[sys.executable, str(script), "{texts}", "1"]], seconds_from_output=True)
            phase(
                f"raw presidio ({cores} processes)",
                [[sys.executable, str(script), "{texts}", str(cores)]],
                seconds_from_output=True,
            )
            phase("gateway pii analyze --processes 1", [[*GATEWAY, "pii", "analyze", "--processes", "1", *url]])
            phase("gateway pii analyze", [[*GATEWAY, "pii", "analyze", *url]])
            phase("gateway pii analyze x2", [[*GATEWAY, "pii", "analyze", "--processes", str(max(1, cores // 2)), *url]] * 2)
        if "serve" in only:
            for name, extra in (("gateway serve background", False), ("gateway serve + gateway work", True)):
                data = work / name.replace(" ", "-").replace("+", "and")
                data.mkdir()
                url_ = store()
                if postgres is None:
                    shutil.copy(url_.removeprefix("sqlite:///"), data / "gateway.db")
                    url_ = f"sqlite:///{data / 'gateway.db'}"
                seconds, peak = serve_background(data, url_, env, extra)
                results[name] = (seconds, peak)
                print(
                    f"{name:<40} {n / seconds:7.1f} items/s {kb / seconds:7.1f} KB/s  peak RSS {peak / 2**20:6.0f} MB", flush=True
                )

        print()
        print("| run | items/s | KB/s | peak RSS (MB) | ratio |")
        print("|---|---|---|---|---|")
        floors = {"embed": "raw onnxruntime", "pii analyze": f"raw presidio ({cores} processes)"}
        both = None
        if "gateway embed" in results and "gateway pii analyze" in results:
            both = results["gateway embed"][0] + results["gateway pii analyze"][0]
        for name, (seconds, peak) in results.items():
            ratio = ""
            if name.startswith("gateway embed") and floors["embed"] in results:
                ratio = f"{results[floors['embed']][0] / seconds:.2f}x raw onnxruntime"
            elif name.startswith("gateway pii") and floors["pii analyze"] in results:
                ratio = f"{results[floors['pii analyze']][0] / seconds:.2f}x raw presidio ({cores} processes)"
            elif name.startswith("gateway serve") and both is not None:
                ratio = f"{both / seconds:.2f}x `gateway embed` then `gateway pii analyze`"
            elif name.startswith("raw presidio (") and name != floors["pii analyze"] and floors["pii analyze"] in results:
                ratio = f"{results[floors['pii analyze']][0] / seconds:.2f}x raw presidio ({cores} processes)"
            print(f"| `{name}` | {n / seconds:.1f} | {kb / seconds:.1f} | {peak / 2**20:.0f} | {ratio} |")
        if both is not None:
            print(f"\n`gateway embed` then `gateway pii analyze`: {n / both:.1f} items/s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if postgres is not None and schemas:
            from sqlalchemy import create_engine, text

            admin = create_engine(postgres)
            with admin.begin() as conn:
                for schema in schemas:
                    conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
            admin.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
