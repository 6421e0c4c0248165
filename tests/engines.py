"""The real servers of the live-engine tests: OPA (`opa run --server`) and Weaviate (`weaviate-server`);
litewitness, a C2SP witness, is started by tests/audit/test_litewitness.py with `Server` and `binary`.

`./scripts/engines` builds both with `go install` at pinned versions into a cache outside the
checkout, and `./scripts/test` runs it when Go is present, passing the paths on as
GATEWAY_TEST_OPA_BIN and GATEWAY_TEST_WEAVIATE_BIN. Without them the live tests skip and say how
to run them; under CI (GATEWAY_TEST_REQUIRE_ENGINES=1) they fail instead.

Each server listens on loopback ports of its own, keeps its data in a temporary folder, and is
stopped (and the folder deleted) when its fixture ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

REQUIRED = os.environ.get("GATEWAY_TEST_REQUIRE_ENGINES") == "1"
HOW = (
    "build them with ./scripts/engines (needs Go 1.26 and the Go module proxy), or run ./scripts/test, which does; "
    "or point GATEWAY_TEST_OPA_BIN / GATEWAY_TEST_WEAVIATE_BIN at binaries"
)
CACHE = Path(
    os.environ.get("GATEWAY_ENGINES_DIR")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "governed-gateway" / "bin"
)


def unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(reason)
    pytest.skip(reason)


def binary(name: str, variable: str) -> str:
    """The binary named by `variable`, else the newest `name-v*` that ./scripts/engines built."""
    configured = os.environ.get(variable)
    if configured:
        if not os.access(configured, os.X_OK):
            unavailable(f"{variable}={configured} is not an executable file")
        return configured
    built = sorted(CACHE.glob(f"{name}-v*"), key=lambda p: p.stat().st_mtime)
    if not built:
        unavailable(f"no {name} to test against: {HOW}")
    return str(built[-1])


def free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports (held open together while chosen, so never one twice)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Server:
    """A child process answering HTTP on loopback; `ready_path` says when it is up."""

    def __init__(
        self,
        command: list[str],
        url: str,
        ready_path: str,
        *,
        env: dict[str, str] | None = None,
        directory: Path,
        start_s: float = 60.0,
    ) -> None:
        self.url = url
        self.directory = directory
        self.log_path = directory / "server.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=directory, start_new_session=True
        )
        deadline = time.monotonic() + start_s
        while True:
            if self.process.poll() is not None:
                self.stop()
                raise RuntimeError(f"{command[0]} exited with {self.process.returncode}: {self.log_tail()}")
            try:
                if httpx.get(url + ready_path, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{command[0]} not ready within {start_s:.0f} s: {self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""

    def pause(self) -> None:
        """Stop the process where it stands (SIGSTOP): connections are accepted, nothing answers."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()


class OpaServer(Server):
    """`opa run --server` on a free loopback port, loading `paths` (as bundles when `bundle`)."""

    def __init__(self, paths: tuple[str | Path, ...] = (), *, bundle: bool = False, extra: tuple[str, ...] = ()) -> None:
        executable = binary("opa", "GATEWAY_TEST_OPA_BIN")
        (port,) = free_ports(1)
        directory = Path(tempfile.mkdtemp(prefix="gw-opa-"))
        command = [
            executable,
            "run",
            "--server",
            "--addr",
            f"127.0.0.1:{port}",
            "--skip-version-check",
            "--log-level",
            "error",
            *(("--bundle",) if bundle else ()),
            *extra,
            *(str(p) for p in paths),
        ]
        super().__init__(command, f"http://127.0.0.1:{port}", "/health", directory=directory, start_s=30)

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "OpaServer":
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def opa_command(*args: str | Path, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """One `opa` command (test, check, build, ...), its output captured."""
    executable = binary("opa", "GATEWAY_TEST_OPA_BIN")
    return subprocess.run([executable, *(str(a) for a in args)], capture_output=True, text=True, cwd=cwd, timeout=timeout)


class WeaviateServer(Server):
    """`weaviate-server` alone on loopback: anonymous access, no vectorizer module, telemetry off,
    every port (HTTP, gRPC, gossip, data, Raft, profiling) a free one, data in a temporary folder."""

    def __init__(self) -> None:
        executable = binary("weaviate-server", "GATEWAY_TEST_WEAVIATE_BIN")
        http_port, grpc_port, gossip, data_port, raft, raft_rpc, profiling = free_ports(7)
        directory = Path(tempfile.mkdtemp(prefix="gw-weaviate-"))
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(directory),
            "PERSISTENCE_DATA_PATH": str(directory / "data"),
            "AUTHENTICATION_ANONYMOUS_ACCESS_ENABLED": "true",
            "DEFAULT_VECTORIZER_MODULE": "none",
            "ENABLE_MODULES": "",
            "DISABLE_TELEMETRY": "true",
            "QUERY_DEFAULTS_LIMIT": "25",
            "LOG_LEVEL": "warning",
            "CLUSTER_HOSTNAME": "node1",
            "CLUSTER_ADVERTISE_ADDR": "127.0.0.1",
            "CLUSTER_BIND_ADDR": "127.0.0.1",
            "CLUSTER_GOSSIP_BIND_PORT": str(gossip),
            "CLUSTER_DATA_BIND_PORT": str(data_port),
            "RAFT_PORT": str(raft),
            "RAFT_INTERNAL_RPC_PORT": str(raft_rpc),
            "RAFT_BOOTSTRAP_EXPECT": "1",
            "RAFT_JOIN": f"node1:{raft}",
            "GRPC_PORT": str(grpc_port),
            "GO_PROFILING_PORT": str(profiling),
            "GO_PROFILING_DISABLE": "true",
            "PROMETHEUS_MONITORING_ENABLED": "false",
            "GOMAXPROCS": "2",
        }
        self.grpc_port = grpc_port
        command = [executable, "--host", "127.0.0.1", "--port", str(http_port), "--scheme", "http"]
        super().__init__(
            command, f"http://127.0.0.1:{http_port}", "/v1/.well-known/ready", env=env, directory=directory, start_s=90
        )

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture(scope="module")
def weaviate_server() -> Iterator[WeaviateServer]:
    """One Weaviate per test module that needs one (each test uses a collection of its own), stopped
    when the module ends, so no idle server shares the cores with the timed tests that follow."""
    try:
        server = WeaviateServer()
    except RuntimeError as exc:
        unavailable(str(exc))
        return
    yield server
    server.stop()


@dataclass(frozen=True)
class Endpoint:
    url: str
    grpc_port: int
    api_key: str | None = None

    def client(self) -> Any:
        import weaviate

        host_port = self.url.rstrip("/").split("://", 1)[1]
        host, _, port = host_port.partition(":")
        secure = self.url.startswith("https")
        return weaviate.connect_to_custom(
            http_host=host,
            http_port=int(port or 8080),
            http_secure=secure,
            grpc_host=host,
            grpc_port=self.grpc_port,
            grpc_secure=secure,
            auth_credentials=self.api_key or None,
        )


@pytest.fixture(scope="module")
def weaviate_endpoint(request: pytest.FixtureRequest) -> Endpoint:
    """GATEWAY_WEAVIATE_URL's Weaviate when it is set (GATEWAY_WEAVIATE_GRPC_PORT, GATEWAY_WEAVIATE_API_KEY),
    else a weaviate-server the session starts itself (tests/engines.py)."""
    configured = os.environ.get("GATEWAY_WEAVIATE_URL")
    if configured:
        return Endpoint(
            configured, int(os.environ.get("GATEWAY_WEAVIATE_GRPC_PORT", "50051")), os.environ.get("GATEWAY_WEAVIATE_API_KEY")
        )
    server: WeaviateServer = request.getfixturevalue("weaviate_server")
    return Endpoint(server.url, server.grpc_port)


class Opa:
    """What the tests do to a running OPA over its REST API (the gateway's own client is under test)."""

    def __init__(self, server: OpaServer) -> None:
        self.server = server
        self.url = server.url

    def put_policy(self, policy_id: str, source: str) -> None:
        response = httpx.put(f"{self.url}/v1/policies/{policy_id}", content=source.encode(), timeout=10)
        assert response.status_code == 200, response.text

    def delete_policy(self, policy_id: str) -> None:
        response = httpx.delete(f"{self.url}/v1/policies/{policy_id}", timeout=10)
        assert response.status_code == 200, response.text

    def policy_ids(self) -> list[str]:
        return sorted(p["id"] for p in httpx.get(f"{self.url}/v1/policies", timeout=10).json()["result"])

    def decisions(self) -> list[dict[str, Any]]:
        """The decisions OPA logged to its console (`decision_logs.console=true`), each as OPA wrote it."""
        import json

        found = []
        for line in self.server.log_path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("msg") == "Decision Log":
                found.append(entry)
        return found


@pytest.fixture
def opa_live() -> Iterator[Opa]:
    """A fresh `opa run --server` with nothing loaded (the gateway pushes its policies), logging
    every decision to its console."""
    try:
        server = OpaServer(extra=("--set", "decision_logs.console=true", "--log-level", "info"))
    except RuntimeError as exc:
        unavailable(str(exc))
        return
    yield Opa(server)
    server.stop()
