"""The store: one SQLAlchemy engine for SQLite (default) or PostgreSQL, and its schema."""

from __future__ import annotations

import hashlib
import logging
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import event, inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import SQLModel, create_engine

import core.audit_tables  # noqa: F401  (registers the audit table)
import core.tables  # noqa: F401  (registers the item tables)
from core.errors import StoreUnavailable

log = logging.getLogger("gateway.store")

# Full text on SQLite: one FTS5 table per tenant, so BM25 statistics (document count, IDF) and
# the candidate space of a search hold only that tenant's items: no other tenant's data changes a
# tenant's scores, timing or status. Each table is external-content over `item` and kept by three
# triggers that fire only for its tenant; both are created, in the writer's transaction, before the
# tenant's first item is written (`ensure_tenant_index`). A store made before this holds one shared
# `item_fts` for every tenant; `open_store` moves it to per-tenant tables (`_split_shared_fts`).
FTS_TOKENIZE = "porter unicode61"
SHARED_FTS = ("item_fts", ("item_fts_insert", "item_fts_delete", "item_fts_update"))

POSTGRES_FTS = [
    "ALTER TABLE item ADD COLUMN IF NOT EXISTS tsv tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english', coalesce(text, ''))) STORED",
]
# With btree_gin the full-text index leads with the tenant, so a search reads only the caller
# tenant's part of each word's posting list (and its rows): another tenant's volume costs nothing.
# fastupdate off: no pending list of fresh (other tenants') rows that every search would scan.
# The index without the tenant, from earlier stores, goes.
POSTGRES_TENANT_FTS = [
    "CREATE INDEX IF NOT EXISTS ix_item_tenant_tsv ON item USING gin (tenant, tsv) WITH (fastupdate = off)",
    "DROP INDEX IF EXISTS ix_item_tsv",
]
# Only where btree_gin cannot be had: full text as before, on an index without the tenant.
POSTGRES_SHARED_FTS = ["CREATE INDEX IF NOT EXISTS ix_item_tsv ON item USING gin (tsv)"]


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
    ("audit_trace", "seal", "VARCHAR"),
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


def _postgres_session(dbapi_connection: Any, _record: Any) -> None:
    """No JIT compilation: the planner turns it on from row estimates, and those come from
    statistics over every tenant (40,000 of another tenant's rows holding a word make a search of
    this tenant for it look costly), so one tenant's data would add ~300 ms of compiling to
    another's searches. The gateway's queries are short; JIT never pays off for them."""
    autocommit = dbapi_connection.autocommit
    dbapi_connection.autocommit = True
    try:
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET jit = off")
    finally:
        dbapi_connection.autocommit = autocommit


_CLOSED: weakref.WeakSet[Engine] = weakref.WeakSet()


def _closing_checkin(engine: Engine) -> Callable[[Any, Any], None]:
    """A connection handed back after `close_store` (by a search thread abandoned at its deadline)
    is closed on the spot, not left in a pool nobody holds, to be collected still open."""

    def checkin(dbapi_connection: Any, _record: Any) -> None:
        if dbapi_connection is not None and engine in _CLOSED:
            dbapi_connection.close()

    return checkin


def close_store(engine: Engine) -> None:
    """Close the store's pooled connections; those still checked out are closed when they come back."""
    _CLOSED.add(engine)
    engine.dispose()


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
        event.listen(engine, "connect", _postgres_session)
    else:
        raise StoreUnavailable("database_url: only sqlite:/// and postgresql:// URLs are supported")
    event.listen(engine, "checkin", _closing_checkin(engine))
    try:
        SQLModel.metadata.create_all(engine)
        _add_later_columns(engine)
        with engine.begin() as conn:
            for statement in ([] if engine.dialect.name == "sqlite" else POSTGRES_FTS) + LATER_INDEXES:
                conn.execute(text(statement))
        if engine.dialect.name == "sqlite":
            _split_shared_fts(engine)
        else:
            _tenant_leading_fts(engine)
    except SQLAlchemyError as exc:
        engine.dispose()
        raise StoreUnavailable(f"store unreachable ({engine.dialect.name}): {type(exc).__name__}") from exc
    return engine


DISK_FULL = "the store's disk is full; writes resume once space is freed"


def disk_full(error: BaseException) -> bool:
    """Whether a store error (or what caused it) is a full disk: SQLite's SQLITE_FULL, PostgreSQL's
    disk_full (53100) or an out-of-space OS error."""
    seen: BaseException | None = error
    while seen is not None:
        text = str(getattr(seen, "orig", None) or seen).lower()
        if "database or disk is full" in text or "no space left on device" in text or getattr(seen, "sqlstate", None) == "53100":
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def lexical_table(tenant: str) -> str:
    """The name of a tenant's FTS5 table: derived from the tenant's SHA-256, never the tenant itself,
    so a tenant string of any content can neither break nor inject into the DDL."""
    return "item_fts_" + hashlib.sha256(tenant.encode("utf-8")).hexdigest()[:16]


def _tenant_literal(tenant: str) -> str:
    """The tenant as an SQL text constant made of hex digits only (a blob literal cast to text)."""
    if "\x00" in tenant:
        raise ValueError("tenant: must not contain the NUL character")
    return f"CAST(X'{tenant.encode('utf-8').hex()}' AS TEXT)"


def tenant_index_statements(tenant: str) -> list[str]:
    """The DDL of a tenant's FTS5 table and the triggers that keep it in step with `item`."""
    table, tenant_sql = lexical_table(tenant), _tenant_literal(tenant)
    remove = f"INSERT INTO {table}({table}, rowid, text) SELECT 'delete', old.pk, old.text"
    add = f"INSERT INTO {table}(rowid, text) SELECT new.pk, new.text"
    return [
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING fts5(text, content='item', content_rowid='pk', "
        f"tokenize='{FTS_TOKENIZE}')",
        f"CREATE TRIGGER IF NOT EXISTS {table}_ins AFTER INSERT ON item WHEN new.tenant = {tenant_sql} BEGIN {add}; END",
        f"CREATE TRIGGER IF NOT EXISTS {table}_del AFTER DELETE ON item WHEN old.tenant = {tenant_sql} BEGIN {remove}; END",
        # An update moves the row out of the old tenant's index and into the new one's (the same tenant, in practice).
        f"CREATE TRIGGER IF NOT EXISTS {table}_upd AFTER UPDATE OF text, tenant ON item "
        f"WHEN old.tenant = {tenant_sql} OR new.tenant = {tenant_sql} BEGIN "
        f"{remove} WHERE old.tenant = {tenant_sql}; {add} WHERE new.tenant = {tenant_sql}; END",
    ]


def tenant_index_exists(conn: Connection, tenant: str) -> bool:
    """Whether the tenant has its FTS5 table (SQLite); a tenant that never wrote has none."""
    found = conn.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (lexical_table(tenant),)
    ).first()
    return found is not None


def ensure_tenant_index(conn: Connection, tenant: str) -> None:
    """Give the tenant its FTS5 table and triggers if it has none yet, inside the caller's (writer)
    transaction, before its items are written: an item and its index entry commit together.
    Items of the tenant already in `item` (written by other means) are indexed on creation.
    Nothing to do on PostgreSQL, whose index covers every tenant with the tenant leading."""
    if conn.dialect.name != "sqlite" or tenant_index_exists(conn, tenant):
        return
    table = lexical_table(tenant)
    for statement in tenant_index_statements(tenant):
        conn.exec_driver_sql(statement)
    conn.exec_driver_sql(f"INSERT INTO {table}(rowid, text) SELECT pk, text FROM item WHERE tenant = ?", (tenant,))


def _split_shared_fts(engine: Engine) -> None:
    """Move a store from the one shared FTS5 table to per-tenant tables, in one transaction:
    build each present tenant's table, then drop the shared table and its triggers. Idempotent;
    on a store without the shared table it costs one catalogue read."""
    shared, triggers = SHARED_FTS
    names = (shared, *triggers)
    marks = ", ".join("?" for _ in names)
    probe = f"SELECT count(*) FROM sqlite_master WHERE name IN ({marks})"
    with engine.connect() as conn:
        if not conn.exec_driver_sql(probe, names).scalar_one():
            return
    with writer(engine).begin() as conn:
        if not conn.exec_driver_sql(probe, names).scalar_one():
            return  # another process moved it meanwhile
        for trigger in triggers:
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {trigger}")
        conn.exec_driver_sql(f"DROP TABLE IF EXISTS {shared}")
        for (tenant,) in conn.exec_driver_sql("SELECT DISTINCT tenant FROM item").all():
            ensure_tenant_index(conn, tenant)


def _tenant_leading_fts(engine: Engine) -> None:
    """On PostgreSQL, the full-text index leads with the tenant (btree_gin), replacing the earlier
    index on `tsv` alone. If the extension cannot be created here, that earlier index is what full
    text gets, and a warning says so."""
    with engine.connect() as conn:
        present = conn.execute(text("SELECT 1 FROM pg_extension WHERE extname = 'btree_gin'")).first()
    if present is None:
        for statement in (
            "CREATE EXTENSION IF NOT EXISTS btree_gin SCHEMA public",  # outlives any one schema of a shared database
            "CREATE EXTENSION IF NOT EXISTS btree_gin",
        ):
            try:
                with engine.begin() as conn:
                    conn.execute(text(statement))
                break
            except SQLAlchemyError:
                continue
        else:
            log.warning("store: extension btree_gin unavailable; full text uses a GIN index without the tenant leading")
            with engine.begin() as conn:
                for statement in POSTGRES_SHARED_FTS:
                    conn.execute(text(statement))
            return
    with engine.begin() as conn:
        for statement in POSTGRES_TENANT_FTS:
            conn.execute(text(statement))


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
