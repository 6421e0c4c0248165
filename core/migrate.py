"""Schema migrations: where a store stands against the code's head revision, and the upgrade.

Alembic runs the revisions in `core/migrations/` on one connection held in one transaction that
first takes the migration lock (SQLite's write lock through BEGIN IMMEDIATE; on PostgreSQL an
advisory transaction lock), then reads the revision: two processes migrating one store at once take
turns, and the second finds nothing to do. DDL is transactional on both, so a revision that fails
leaves the store at the revision it had. On SQLite a copy of the file is made (the online backup
API, so WAL content is in it) before a store holding tables is upgraded.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from core.errors import StoreUnavailable

log = logging.getLogger("gateway.store")
# Alembic says "Context impl SQLiteImpl" at INFO each time a revision is read (every open); the
# store's own lines above say what an upgrade did.
logging.getLogger("alembic.runtime.migration").setLevel(logging.WARNING)

MIGRATIONS = Path(__file__).with_name("migrations")
# One key for every migration on a PostgreSQL server: schemas of one database (tests, tenants of a
# shared server) also take turns, so two of them never race to create the same extension.
ADVISORY_LOCK = int.from_bytes(hashlib.sha256(b"gateway schema migrations").digest()[:8], "big", signed=True)


@dataclass(frozen=True, slots=True)
class Upgrade:
    """What an upgrade did: the revision before (None: no version table) and after, and the backup."""

    before: str | None
    after: str | None
    backup: Path | None = None

    @property
    def changed(self) -> bool:
        return self.before != self.after


def alembic_config(migrations: Path = MIGRATIONS) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations))
    return config


@functools.cache
def _scripts(migrations: Path) -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config(migrations))


def head_revision(migrations: Path = MIGRATIONS) -> str:
    head = _scripts(migrations).get_current_head()
    assert head is not None, "no migration revisions found"
    return head


def current_revision(conn: Connection) -> str | None:
    """The store's revision; None for an empty store or one written before migrations existed."""
    return MigrationContext.configure(conn).get_current_revision()


def store_revision(engine: Engine) -> str | None:
    try:
        with engine.connect() as conn:
            return current_revision(conn)
    except SQLAlchemyError as exc:
        raise unreachable(engine, exc) from exc


def check_known(revision: str | None, migrations: Path = MIGRATIONS) -> None:
    """A revision this code does not know was written by a newer release: never run on it."""
    if revision is None:
        return
    try:
        known = _scripts(migrations).get_revision(revision) is not None
    except CommandError:
        known = False
    if not known:
        raise StoreUnavailable(
            f"store schema is at revision {revision}, which this release does not know (a newer release wrote it); "
            f"run the release that did, or restore a backup"
        )


def upgrade(engine: Engine, *, backup: bool = True, migrations: Path = MIGRATIONS) -> Upgrade:
    """Bring the store to head; a no-op at head. Raises StoreUnavailable when unreachable or failed."""
    head = head_revision(migrations)
    before = store_revision(engine)
    check_known(before, migrations)
    if before == head:
        return Upgrade(before, head)
    # Same BEGIN IMMEDIATE as core.store.writer: the write lock before the revision is read.
    locked = engine.execution_options(sqlite_immediate=True)
    try:
        with locked.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%s)", (ADVISORY_LOCK,))
            before = current_revision(conn)  # another process may have upgraded meanwhile
            check_known(before, migrations)
            if before == head:
                return Upgrade(before, head)
            copy = backup_sqlite(conn, before) if backup and conn.dialect.name == "sqlite" else None
            config = alembic_config(migrations)
            config.attributes["connection"] = conn
            try:
                command.upgrade(config, "head")
            except Exception as exc:  # any failure of a revision: the transaction rolls it all back
                raise StoreUnavailable(
                    f"store migration {before or 'none'} -> {head} failed, the store stays at {before or 'none'}: "
                    f"{type(exc).__name__}: {exc}".splitlines()[0]
                ) from exc
            after = current_revision(conn)
    except SQLAlchemyError as exc:
        raise unreachable(engine, exc) from exc
    if copy is not None:
        log.warning("store: upgraded schema %s -> %s; the store as it was is backed up at %s", before or "none", after, copy)
    else:
        log.info("store: upgraded schema %s -> %s", before or "none", after)
    return Upgrade(before, after, copy)


def backup_sqlite(conn: Connection, revision: str | None) -> Path | None:
    """Copy a SQLite store that holds tables next to itself, named with its revision and the time,
    through the online backup API (a consistent copy that includes what is still in the WAL). The
    caller holds the write lock, so the copy is the store exactly as the upgrade finds it."""
    database = conn.engine.url.database
    if not database or database == ":memory:":
        return None
    if not conn.exec_driver_sql("SELECT count(*) FROM sqlite_master WHERE type = 'table'").scalar_one():
        return None  # a new, empty store: nothing to keep
    path = Path(database)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    target = path.with_name(f"{path.name}.{revision or 'unversioned'}-{stamp}.bak")
    try:
        # The copy holds everything the store holds: it is made with the store's own permissions
        # (never the process's umask, which could leave it readable by others).
        os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        os.chmod(target, path.stat().st_mode & 0o777)
        source = sqlite3.connect(path)
        try:
            copy = sqlite3.connect(target)
            try:
                source.backup(copy)
            finally:
                copy.close()
        finally:
            source.close()
    except (sqlite3.Error, OSError) as exc:  # no copy, no upgrade
        raise StoreUnavailable(
            f"store not upgraded: the backup copy {target} could not be written ({type(exc).__name__})"
        ) from exc
    return target


def unreachable(engine: Engine, exc: BaseException) -> StoreUnavailable:
    where = engine.url.render_as_string(hide_password=True)
    return StoreUnavailable(f"store unreachable ({engine.dialect.name}) at {where}: {type(exc).__name__}")


def behind_message(engine: Engine, revision: str | None, head: str) -> str:
    where = engine.url.render_as_string(hide_password=True)
    password = " (with the real password)" if engine.url.password else ""
    return (
        f"store schema is at revision {revision or 'none (no version table)'}, this release needs {head}: "
        f"run `gateway migrate --database-url {where}`{password} before starting the service"
    )
