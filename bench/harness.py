"""What the benchmarks share: `gateway serve` as a subprocess on a free port, on the embedded default."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx

READY_TIMEOUT_S = 90
STOP_TIMEOUT_S = 15


def gateway_executable() -> str:
    return str(Path(sys.executable).parent / "gateway")


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without any GATEWAY_* variable, plus the ones the benchmark sets.

    Background personal-data analysis is off unless a benchmark turns it on: on 2 cores it would
    analyse a freshly loaded corpus (~6.5 KB/s) while the benchmark measures something else."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env["GATEWAY_PII_BACKGROUND"] = "false"
    env.update(extra or {})
    return env


@contextmanager
def bench_dir(given: Path | None, prefix: str) -> Iterator[Path]:
    """A benchmark's data directory: `given` (`--data`, created if need be, kept), else a temporary
    one removed when the run ends, however it ends (with SIGTERM made an exit, as the benchmarks do)."""
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def interrupted() -> int:
    """What a benchmark stopped with Ctrl-C says, and its exit status."""
    print("\ninterrupted", file=sys.stderr)
    return 130


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """`gateway serve` in its own session (Ctrl-C reaches only the benchmark); stop() is idempotent."""

    def __init__(
        self, data_dir: Path, port: int, *, workers: int = 1, env: dict[str, str] | None = None, label: str = "bench"
    ) -> None:
        self.data_dir = data_dir
        self.port = port
        self.workers = workers
        self.env = env or {}
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = data_dir / f"{label}-server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [
            gateway_executable(),
            "serve",
            "--data",
            str(self.data_dir),
            "--port",
            str(self.port),
            "--workers",
            str(self.workers),
        ]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=clean_env(self.env), start_new_session=True
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited with code {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise SystemExit(f"server not ready after {READY_TIMEOUT_S}s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)  # uvicorn shuts down gracefully on SIGTERM
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    @property
    def pid(self) -> int:
        """The serving process itself (`gateway serve` runs uvicorn in-process with one worker)."""
        if self.proc is None:
            raise RuntimeError("the server was not started")
        return self.proc.pid

    def memory_kib(self) -> dict[str, int]:
        """The server's memory from /proc/<pid>/status in KiB: VmRSS, VmHWM (peak RSS), RssAnon, RssFile, ..."""
        figures: dict[str, int] = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if value.endswith(" kB"):
                figures[name] = int(value.split()[0])
        return figures

    def reset_peak_memory(self) -> bool:
        """Set VmHWM back to the current RSS (5 written to /proc/<pid>/clear_refs, Linux 4.0+); False if refused."""
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
        except OSError:
            return False
        return True

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"


@contextmanager
def serving(server: Server) -> Iterator[Server]:
    """`server` started and ready, and stopped when the block ends, however it ends (a server that
    never got ready too)."""
    server.start()
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def code_revision() -> str:
    """The commit of the gateway code this process imports (`+` when it has local changes)."""
    import gateway

    root = Path(gateway.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "gateway", "connectors", "audit", "policies"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit.stdout.strip() + ("+" if dirty.stdout.strip() else "")


# ---------------------------------------------------------------- keys and loading, as a user would

BATCH_ITEMS = 500
BATCH_BYTES = 900_000  # stay under GATEWAY_MAX_BODY_BYTES (1 MiB by default)


def create_key(
    data_dir: Path,
    tenant: str,
    principal: str,
    role: str,
    clearance: str = "internal",
    groups: str = "",
    env: dict[str, str] | None = None,
) -> str:
    """A fresh API key from `gateway keys create` against the benchmark's store (`env` may name
    another, `GATEWAY_DATABASE_URL`); `groups` (comma separated) must include one the policy grants
    the benchmark's task type to."""
    done = subprocess.run(
        [
            gateway_executable(),
            "keys",
            "create",
            "--data",
            str(data_dir),
            "--tenant",
            tenant,
            "--principal",
            principal,
            "--roles",
            role,
            "--clearance",
            clearance,
            *(["--groups", groups] if groups else []),
        ],
        capture_output=True,
        text=True,
        env=clean_env(env),
    )
    keys = [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("gw_")]
    if done.returncode != 0 or not keys:
        raise SystemExit(f"gateway keys create failed ({done.returncode}): {done.stderr.strip()}")
    return keys[-1]


def batches(items: list[dict[str, Any]]) -> list[bytes]:
    """JSON array bodies of at most BATCH_ITEMS items and BATCH_BYTES bytes."""
    bodies: list[bytes] = []
    current: list[bytes] = []
    size = 2
    for entry in items:
        encoded = json.dumps(entry, ensure_ascii=False).encode("utf-8")
        if current and (len(current) == BATCH_ITEMS or size + len(encoded) + 1 > BATCH_BYTES):
            bodies.append(b"[" + b",".join(current) + b"]")
            current, size = [], 2
        current.append(encoded)
        size += len(encoded) + 1
    if current:
        bodies.append(b"[" + b",".join(current) + b"]")
    return bodies


def load_through_api(url: str, key: str, items: list[dict[str, Any]]) -> dict[str, float]:
    """PUT /v1/items in batches; every batch must land whole (no rejections)."""
    bodies = batches(items)
    print(f"Loading {len(items):,} items through PUT /v1/items in {len(bodies)} batches...", flush=True)
    totals: Counter[str] = Counter()
    started = time.perf_counter()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
        for number, body in enumerate(bodies, start=1):
            response = client.put("/v1/items", content=body)
            if response.status_code != 200:
                raise SystemExit(f"batch {number}: HTTP {response.status_code}: {response.text[:500]}")
            report = response.json()
            if report["rejected"]:
                raise SystemExit(f"batch {number}: {len(report['rejected'])} items rejected, first: {report['rejected'][0]}")
            totals.update({k: report[k] for k in ("created", "updated", "unchanged")})
            done = sum(totals.values())
            print(
                f"  batch {number:>2}/{len(bodies)}: {done:>6,} items  ({done / (time.perf_counter() - started):,.0f} items/s)",
                flush=True,
            )
    seconds = time.perf_counter() - started
    if sum(totals.values()) != len(items):
        raise SystemExit(f"the service accounted for {sum(totals.values())} items, not {len(items)}: {dict(totals)}")
    return {"seconds": seconds, "rate": len(items) / seconds, "batches": len(bodies), **totals}


def load_and_embed(
    data_dir: Path,
    tenant: str,
    items: list[dict[str, Any]],
    env: dict[str, str],
    *,
    label: str = "load",
    embed_args: Sequence[str] = (),
    what: str = "gateway embed",
) -> tuple[str, float]:
    """`items` loaded through the API of a server that embeds nothing, then embedded all at once by
    `gateway embed` under `env` (which names the model): what embed printed, and its seconds."""
    loader = Server(data_dir, free_port(), env={**env, "GATEWAY_EMBEDDINGS": "none"}, label=label)
    loader.start()
    loader.wait_ready()
    try:
        load_through_api(loader.url, create_key(data_dir, tenant, "user:loader", "ingest"), items)
    finally:
        loader.stop()
    started = time.perf_counter()
    done = subprocess.run(
        [gateway_executable(), "embed", "--data", str(data_dir), *embed_args], capture_output=True, text=True, env=clean_env(env)
    )
    if done.returncode != 0:
        raise SystemExit(f"{what} failed: {done.stderr[-500:]}")
    return done.stdout.strip(), time.perf_counter() - started


Body = TypeVar("Body")
Sample = TypeVar("Sample")


async def send_all(
    bodies: Sequence[Body], concurrency: int, send: Callable[[Body], Awaitable[Sample]]
) -> tuple[list[Sample], float]:
    """Send every body once, from `concurrency` workers taking the next body as they finish (each
    holds one keep-alive connection of the caller's client); the samples and the wall time in s."""
    samples: list[Sample] = []
    jobs = iter(bodies)

    async def worker() -> None:
        for body in jobs:
            samples.append(await send(body))

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return samples, time.perf_counter() - started


async def request_timed(
    client: httpx.AsyncClient, method: str, path: str, body: dict[str, Any] | None
) -> tuple[httpx.Response | None, float]:
    """One request and the ms the client waited for it; None for a transport error, said on stderr
    (the caller counts it as a failure, status 0, never silently skipped)."""
    started = time.perf_counter()
    try:
        response = await client.request(method, path, json=body)
    except httpx.HTTPError as exc:
        print(f"  transport error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None, (time.perf_counter() - started) * 1000
    return response, (time.perf_counter() - started) * 1000


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def scifact(data_set: Path, limit: int) -> tuple[list[dict[str, object]], list[str]]:
    """The first `limit` SciFact abstracts of a BEIR folder as document items, and its claims."""
    with (data_set / "corpus.jsonl").open(encoding="utf-8") as lines:
        docs = [json.loads(line) for line in lines if line.strip()][:limit]
    with (data_set / "queries.jsonl").open(encoding="utf-8") as lines:
        claims = [json.loads(line)["text"] for line in lines if line.strip()]
    items = [
        {
            "id": f"scifact_{d['_id']}",
            "kind": "document",
            "section": d["title"],
            "text": f"{d['title']}\n{d['text']}",
            "acl": ["*"],
        }
        for d in docs
    ]
    return items, claims
