"""The store: one SQLAlchemy engine for SQLite (default) or PostgreSQL, and its schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event, inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import SQLModel, create_engine

import core.audit_tables  # noqa: F401  (registers the audit table)
import core.tables  # noqa: F401  (registers the item tables)
from core.errors import StoreUnavailable

SQLITE_FTS = [
    "CREATE VIRTUAL TABLE IF NOT EXISTS item_fts USING fts5(text, content='item', content_rowid='pk', tokenize='porter unicode61')",
    """CREATE TRIGGER IF NOT EXISTS item_fts_insert AFTER INSERT ON item BEGIN
         INSERT INTO item_fts(rowid, text) VALUES (new.pk, new.text);
       END""",
    """CREATE TRIGGER IF NOT EXISTS item_fts_delete AFTER DELETE ON item BEGIN
         INSERT INTO item_fts(item_fts, rowid, text) VALUES ('delete', old.pk, old.text);
       END""",
    """CREATE TRIGGER IF NOT EXISTS item_fts_update AFTER UPDATE OF text ON item BEGIN
         INSERT INTO item_fts(item_fts, rowid, text) VALUES ('delete', old.pk, old.text);
         INSERT INTO item_fts(rowid, text) VALUES (new.pk, new.text);
       END""",
]

POSTGRES_FTS = [
    "ALTER TABLE item ADD COLUMN IF NOT EXISTS tsv tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english', coalesce(text, ''))) STORED",
    "CREATE INDEX IF NOT EXISTS ix_item_tsv ON item USING gin (tsv)",
]


# Indexes added after the first release: created on open, so existing stores get them too.
LATER_INDEXES = [
    "CREATE INDEX IF NOT EXISTS ix_item_tenant_document_section ON item (tenant, document, section)",
    "CREATE INDEX IF NOT EXISTS ix_item_tenant_edge_from ON item (tenant, edge_from)",
    "CREATE INDEX IF NOT EXISTS ix_item_tenant_merged_into ON item (tenant, merged_into)",
    "CREATE UNIQUE INDEX IF NOT EXISTS ux_audit_chain_seq ON audit_trace (chain, seq)",
    "CREATE INDEX IF NOT EXISTS ix_audit_trace_about ON audit_trace (about)",
]

# Columns added after the first release, as (table, column, SQL type): added on open when missing.
LATER_COLUMNS = [
    ("item", "profile", "VARCHAR"),
    ("item", "merged_into", "VARCHAR"),
    ("audit_trace", "chain", "VARCHAR"),
    ("audit_trace", "seq", "INTEGER"),
    ("audit_trace", "prev_hash", "VARCHAR"),
    ("audit_trace", "row_hash", "VARCHAR"),
    ("audit_trace", "task_type", "VARCHAR"),
    ("audit_trace", "about", "VARCHAR"),
]


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    # Reads go through the OS page cache (mmap) plus a 32 MiB private cache per connection.
    cursor.execute("PRAGMA mmap_size=268435456")
    cursor.execute("PRAGMA cache_size=-32768")
    cursor.close()


def open_store(database_url: str) -> Engine:
    """Create the engine and make sure the schema exists; raises StoreUnavailable if unreachable."""
    if database_url.startswith("sqlite:///"):
        Path(database_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        # The driver's own transaction handling is off (isolation_level=None) so SQLAlchemy's BEGIN,
        # deferred or IMMEDIATE (see `writer`), is the one that counts.
        engine = create_engine(
            database_url, connect_args={"check_same_thread": False, "timeout": 10, "isolation_level": None}
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
    elif database_url.startswith("postgresql"):
        engine = create_engine(database_url, pool_size=10, max_overflow=10, pool_pre_ping=True)
    else:
        raise StoreUnavailable("database_url: only sqlite:/// and postgresql:// URLs are supported")
    try:
        SQLModel.metadata.create_all(engine)
        _add_later_columns(engine)
        with engine.begin() as conn:
            for statement in (SQLITE_FTS if engine.dialect.name == "sqlite" else POSTGRES_FTS) + LATER_INDEXES:
                conn.execute(text(statement))
    except SQLAlchemyError as exc:
        engine.dispose()
        raise StoreUnavailable(f"store unreachable ({engine.dialect.name}): {type(exc).__name__}") from exc
    return engine


def _add_later_columns(engine: Engine) -> None:
    present = {(t, c["name"]) for t in {t for t, _, _ in LATER_COLUMNS} for c in inspect(engine).get_columns(t)}
    with engine.begin() as conn:
        for table, column, sql_type in LATER_COLUMNS:
            if (table, column) not in present:
                conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {sql_type}"))


def writer(engine: Engine) -> Engine:
    """The engine to write with (same pool). On SQLite its transactions begin IMMEDIATE: a deferred
    transaction that read first cannot take the write lock once another writer committed
    (SQLITE_BUSY_SNAPSHOT, which no busy timeout waits out); taking the lock up front makes
    concurrent writers queue instead of failing."""
    if engine.dialect.name != "sqlite":
        return engine
    return engine.execution_options(sqlite_immediate=True)


def _sqlite_begin(conn: Any) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("sqlite_immediate") else "BEGIN")


def store_reachable(engine: Engine) -> bool:
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return True
    except SQLAlchemyError:
        return False
