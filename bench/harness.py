"""What the benchmarks share: `gateway serve` as a subprocess on a free port, on the embedded default."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

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
        command = [gateway_executable(), "serve", "--data", str(self.data_dir), "--port", str(self.port),
                   "--workers", str(self.workers)]
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

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"


def code_revision() -> str:
    """The commit of the gateway code this process imports (`+` when it has local changes)."""
    import gateway

    root = Path(gateway.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "gateway", "connectors", "audit", "policies"],
                               cwd=root, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit.stdout.strip() + ("+" if dirty.stdout.strip() else "")
