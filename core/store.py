"""The store: one SQLAlchemy engine for SQLite (default) or PostgreSQL, and its schema."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sqlite3
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import event, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import create_engine

import core.audit_tables  # noqa: F401  (registers the audit table)
import core.tables  # noqa: F401  (registers the item tables)
from core.errors import StoreUnavailable
from core.migrate import Upgrade, behind_message, check_known, head_revision, store_revision, upgrade

log = logging.getLogger("gateway.store")

# Full text on SQLite: one FTS5 table per tenant, so BM25 statistics (document count, IDF) and
# the candidate space of a search hold only that tenant's items: no other tenant's data changes a
# tenant's scores, timing or status. Each table is external-content over `item` and kept by three
# triggers that fire only for its tenant; both are created, in the writer's transaction, before the
# tenant's first item is written (`ensure_tenant_index`). Everything else of the schema (tables,
# indexes, PostgreSQL's generated `tsv` column and its full-text index) is made by the migrations
# in core/migrations, which also give the tenants of an older store their tables.
FTS_TOKENIZE = "porter unicode61"


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    _wal(cursor)
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    # Reads go through the OS page cache (mmap) plus a 32 MiB private cache per connection.
    cursor.execute("PRAGMA mmap_size=268435456")
    cursor.execute("PRAGMA cache_size=-32768")
    cursor.close()


def _wal(cursor: Any, wait_s: float = 10.0) -> None:
    """WAL mode, which the file keeps once set. Switching a new file to it needs the file to
    itself, and SQLite answers "database is locked" at once, without its busy handler, while another
    connection (a second worker or migrator starting at the same moment) holds it: so look first,
    and try again for a while."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


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
    """The engine over a store whose schema is at the code's head revision; raises StoreUnavailable
    if unreachable. The embedded default (SQLite) migrates itself here, after a backup copy of its
    file; a PostgreSQL store behind head is refused: it is upgraded by `gateway migrate`, once, before
    replicas start (core.migrate)."""
    engine = create_store_engine(database_url)
    try:
        if engine.dialect.name == "sqlite":
            upgrade(engine)
        else:
            require_head(engine)
    except StoreUnavailable:
        engine.dispose()
        raise
    return engine


def create_store_engine(database_url: str) -> Engine:
    """The engine alone, schema untouched (for `gateway migrate`); no connection is made yet."""
    if database_url.startswith("sqlite:///"):
        folder = Path(database_url.removeprefix("sqlite:///")).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file where the folder should be, no permission: one line, not a traceback
            blocking = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
            reason = f"{blocking} is a file" if blocking is not None else exc.strerror or type(exc).__name__
            raise StoreUnavailable(f"cannot make the SQLite store's folder {folder}: {reason}") from exc
        # The driver's own transaction handling is off (isolation_level=None) so SQLAlchemy's BEGIN,
        # deferred or IMMEDIATE (see `writer`), is the one that counts.
        engine = create_engine(
            database_url,
            connect_args={"check_same_thread": False, "timeout": 10, "isolation_level": None},
            json_deserializer=read_json,
        )
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
    elif database_url.startswith("postgresql"):
        engine = create_engine(database_url, pool_size=10, max_overflow=10, pool_pre_ping=True, json_deserializer=read_json)
        event.listen(engine, "connect", _postgres_session)
    else:
        raise StoreUnavailable("database_url: only sqlite:/// and postgresql:// URLs are supported")
    event.listen(engine, "checkin", _closing_checkin(engine))
    return engine


def read_json(text: str | bytes) -> Any:
    """A JSON column's value: orjson reads the envelope's lists and maps about four times faster
    than `json` (a retrieve decodes ~5 a row, ~500 a call). What it refuses (NaN) or reads otherwise
    (an integer past 64 bits becomes a float), planted by a hand in the database, is read by `json`
    as before."""
    if _LONG_DIGITS.search(text if isinstance(text, str) else text.decode("utf-8", "replace")):
        return json.loads(text)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


_LONG_DIGITS = re.compile(r"\d{19}")


def migrate_store(database_url: str) -> Upgrade:
    """`gateway migrate`: bring the store to head (after a backup copy, on SQLite), then let go of it."""
    engine = create_store_engine(database_url)
    try:
        return upgrade(engine)
    finally:
        close_store(engine)


def require_head(engine: Engine) -> None:
    """Refuse a store whose schema is not at head (an empty database included), saying what to run."""
    revision, head = store_revision(engine), head_revision()
    check_known(revision)
    if revision != head:
        raise StoreUnavailable(behind_message(engine, revision, head))


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


# What decides visibility without a clock, as tokens of the FTS5 table's second column `vis`: the
# item's kind, sensitivity, status, scopes (or that it has none) and ACL principals, each value hex
# encoded after a one-letter prefix and ending in a digit (so the porter stemmer never changes it,
# and no query word can be one: the caller's words are searched in `text` only). A search ANDs the
# caller's words with the caller's filter over these tokens, so FTS5 never scores a row the filter
# excludes and the window never widens for them (connectors/sql/lexical.py). The constraints are
# still applied to every row read, from `item` itself: a stale or forged token can hide a row,
# never show one.
def visibility_tokens(row: str) -> str:
    """SQL computing the `vis` column of the item row called `row` (new, old or a table alias)."""

    def each(column: str, letter: str) -> str:
        return f"coalesce((SELECT group_concat('{letter}' || hex(value) || '0', ' ') FROM json_each({row}.{column})), '')"

    scopes = f"CASE WHEN {row}.scoped THEN {each('scope', 'c')} ELSE 'u0' END"
    return (
        f"('k' || hex({row}.kind) || '0 s' || hex({row}.sensitivity) || '0 t' || hex({row}.status) || '0 ' "
        f"|| {scopes} || ' ' || {each('acl', 'p')})"
    )


def visibility_value(letter: str, value: str) -> str:
    """The token `visibility_tokens` writes for one value (for the query side)."""
    return f"{letter}{value.encode('utf-8').hex()}0"


# Columns whose change rewrites a row's index entry: its text and what `visibility_tokens` reads.
INDEXED_COLUMNS = "text, tenant, kind, sensitivity, status, scope, scoped, acl"


def tenant_index_statements(tenant: str) -> list[str]:
    """The DDL of a tenant's FTS5 table and the triggers that keep it in step with `item` as rows
    change or go. The table is contentless (its columns are read from `item` when needed), so a row
    is removed with the values it was indexed with, computed from the old row by the same
    expression. New rows are indexed by their writer, a batch in one statement (`index_new_items`):
    an insert trigger, run once per row, halved the rate of a bulk load."""
    table, tenant_sql = lexical_table(tenant), _tenant_literal(tenant)
    remove = f"INSERT INTO {table}({table}, rowid, text, vis) SELECT 'delete', old.pk, old.text, {visibility_tokens('old')}"
    add = f"INSERT INTO {table}(rowid, text, vis) SELECT new.pk, new.text, {visibility_tokens('new')}"
    return [
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING fts5(text, vis, content='', tokenize='{FTS_TOKENIZE}')",
        f"CREATE TRIGGER IF NOT EXISTS {table}_del AFTER DELETE ON item WHEN old.tenant = {tenant_sql} BEGIN {remove}; END",
        # An update moves the row out of the old tenant's index and into the new one's (the same tenant, in practice).
        f"CREATE TRIGGER IF NOT EXISTS {table}_upd AFTER UPDATE OF {INDEXED_COLUMNS} ON item "
        f"WHEN old.tenant = {tenant_sql} OR new.tenant = {tenant_sql} BEGIN "
        f"{remove} WHERE old.tenant = {tenant_sql}; {add} WHERE new.tenant = {tenant_sql}; END",
    ]


def index_new_items(conn: Connection, tenant: str, pks: Sequence[int]) -> None:
    """Index rows of `tenant` just inserted (keys `pks`) in its FTS5 table, in one statement, and
    log them in `item_change` (for the Tantivy indexes), inside the writer's transaction: they
    commit together. On PostgreSQL only the log (its own full-text index is the server's)."""
    if not pks:
        return
    if conn.dialect.name != "sqlite":
        conn.execute(
            text("INSERT INTO item_change (item_pk, tenant) SELECT pk, tenant FROM item WHERE pk = ANY(:pks)"), {"pks": list(pks)}
        )
        return
    table = lexical_table(tenant)
    marks = ",".join("?" * len(pks))
    conn.exec_driver_sql(
        f"INSERT INTO {table}(rowid, text, vis) SELECT pk, text, {visibility_tokens('item')} FROM item "
        f"WHERE pk IN ({marks}) AND tenant = ?",
        (*pks, tenant),
    )
    conn.exec_driver_sql(
        f"INSERT INTO item_change(item_pk, tenant) SELECT pk, tenant FROM item WHERE pk IN ({marks})", tuple(pks)
    )


# An update of an indexed column or a deletion is logged in `item_change` (core.tables.ItemChange)
# by these triggers; an insert by its writer (`index_new_items`), a batch in one statement.
CHANGE_TRIGGERS = (
    f"CREATE TRIGGER IF NOT EXISTS item_change_upd AFTER UPDATE OF {INDEXED_COLUMNS} ON item BEGIN "
    "INSERT INTO item_change(item_pk, tenant) VALUES (old.pk, old.tenant); "
    "INSERT INTO item_change(item_pk, tenant) SELECT new.pk, new.tenant WHERE new.tenant IS NOT old.tenant; END",
    "CREATE TRIGGER IF NOT EXISTS item_change_del AFTER DELETE ON item BEGIN "
    "INSERT INTO item_change(item_pk, tenant) VALUES (old.pk, old.tenant); END",
)


# The same on PostgreSQL, by one function; each log row takes its transaction's id by default (migration 0008).
POSTGRES_CHANGE_TRIGGERS = (
    "CREATE OR REPLACE FUNCTION item_change_log() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "INSERT INTO item_change (item_pk, tenant) VALUES (OLD.pk, OLD.tenant); "
    "IF TG_OP = 'UPDATE' AND NEW.tenant IS DISTINCT FROM OLD.tenant THEN "
    "INSERT INTO item_change (item_pk, tenant) VALUES (NEW.pk, NEW.tenant); END IF; "
    "RETURN NULL; END $$",
    "DROP TRIGGER IF EXISTS item_change_upd ON item",
    f"CREATE TRIGGER item_change_upd AFTER UPDATE OF {INDEXED_COLUMNS} ON item FOR EACH ROW EXECUTE FUNCTION item_change_log()",
    "DROP TRIGGER IF EXISTS item_change_del ON item",
    "CREATE TRIGGER item_change_del AFTER DELETE ON item FOR EACH ROW EXECUTE FUNCTION item_change_log()",
)


def drop_insert_triggers(conn: Connection) -> None:
    """Drop the per-row insert triggers stores made before their writers indexed new rows themselves."""
    found = conn.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'trigger' AND substr(name, 1, 9) = 'item_fts_' AND substr(name, -4) = '_ins'"
    ).all()
    for (name,) in found:
        conn.exec_driver_sql(f'DROP TRIGGER IF EXISTS "{name}"')


def drop_tenant_indexes(conn: Connection) -> None:
    """Drop every tenant's FTS5 table (with its shadow tables) and triggers, for a migration that
    builds them again in a new shape."""
    found = conn.exec_driver_sql(
        "SELECT type, name FROM sqlite_master WHERE substr(name, 1, 9) = 'item_fts_' "
        "AND (type = 'trigger' OR sql LIKE 'CREATE VIRTUAL TABLE%') ORDER BY type = 'table'"
    ).all()
    for kind, name in found:
        conn.exec_driver_sql(f'DROP {"TRIGGER" if kind == "trigger" else "TABLE"} IF EXISTS "{name}"')


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
    conn.exec_driver_sql(
        f"INSERT INTO {table}(rowid, text, vis) SELECT pk, text, {visibility_tokens('item')} FROM item WHERE tenant = ?",
        (tenant,),
    )


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
