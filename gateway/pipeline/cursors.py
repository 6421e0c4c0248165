"""Continuation cursors for expand: stored in the database, so any replica can serve the next page.

A cursor belongs to one actor of one tenant and holds the ranked entries a call could not fit,
with the request shape needed to decide again (never the query text or identifiers). Only the
SHA-256 of its token is stored. It expires after an idle period. Pages are claimed with an
optimistic version check, so two concurrent expands of one cursor never return the same item.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
import weakref
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable

from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from core.actor import Actor
from core.errors import NotFound, StoreUnavailable
from core.instants import utc_now
from core.store import writer
from core.tables import RetrieveCursor

cursor_table = RetrieveCursor.__table__  # type: ignore[attr-defined]
PREFIX = "cur_"
MAX_REMAINING = 500
UNKNOWN = "cursor: unknown or expired"  # the same words for a cursor of another actor
SWEEP_EVERY_S = 30.0
_SWEPT: weakref.WeakKeyDictionary[Engine, float] = weakref.WeakKeyDictionary()
_SWEEP_LOCK = threading.Lock()


# Built once: every retrieve with a leftover writes a cursor, and building the statements cost more
# than running them.
INSERT_CURSOR = insert(cursor_table)
_MINE = (cursor_table.c.tenant == bindparam("tenant"), cursor_table.c.principal == bindparam("principal"))
DROP_BEYOND = delete(cursor_table).where(  # the actor's cursors past the newest `per_actor`
    *_MINE,
    cursor_table.c.token_hash.in_(
        select(cursor_table.c.token_hash)
        .where(*_MINE)
        .order_by(cursor_table.c.created_at.desc(), cursor_table.c.token_hash)
        .offset(bindparam("per_actor"))
        .scalar_subquery()
    ),
)


@dataclass(frozen=True, slots=True)
class Cursor:
    token_hash: str
    request: dict[str, Any]
    remaining: tuple[dict[str, Any], ...]  # {"id", "found_by", "label", "current", "pieces"}, best first
    returned: tuple[str, ...]
    version: int


def _sweep_due(engine: Engine) -> bool:
    """Whether this process should delete expired cursors now: at most once per SWEEP_EVERY_S per
    store. An expired cursor is refused when loaded whatever its row says; the sweep only bounds the
    table, and one more statement in every call's write cost more than it saved."""
    now = time.monotonic()
    with _SWEEP_LOCK:
        if now - _SWEPT.get(engine, -SWEEP_EVERY_S) < SWEEP_EVERY_S:
            return False
        _SWEPT[engine] = now
        return True


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def prepared(
    engine: Engine,
    actor: Actor,
    request: dict[str, Any],
    remaining: list[dict[str, Any]],
    returned: list[str],
    idle_seconds: int,
    per_actor: int = 100,
) -> tuple[str, Callable[[Connection], None]]:
    """A new cursor of the actor's in `engine`'s store and the write that stores it, for the caller's
    transaction (a retrieve's is its audit row's). Beyond `per_actor` live cursors of theirs, the write drops the
    oldest (a client that never follows its cursors cannot fill the table)."""
    token = PREFIX + secrets.token_urlsafe(24)
    now = utc_now()

    def write(conn: Connection) -> None:
        if _sweep_due(engine):
            conn.execute(delete(cursor_table).where(cursor_table.c.last_used_at < now - timedelta(seconds=idle_seconds)))
        conn.execute(
            INSERT_CURSOR,
            {
                "token_hash": _hash(token),
                "tenant": actor.tenant,
                "principal": actor.principal,
                "request": request,
                "remaining": remaining[:MAX_REMAINING],
                "returned": returned,
                "version": 0,
                "created_at": now,
                "last_used_at": now,
            },
        )
        conn.execute(DROP_BEYOND, {"tenant": actor.tenant, "principal": actor.principal, "per_actor": per_actor})

    return token, write


def issue(engine: Engine, cursor: tuple[str, Callable[[Connection], None]]) -> str:
    """A cursor `prepared` for `engine`'s store, stored now in a transaction of its own; its token."""
    token, write = cursor
    try:
        with writer(engine).begin() as conn:
            write(conn)
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"cursor could not be stored: {type(exc).__name__}") from exc
    return token


def load(engine: Engine, actor: Actor, token: str, idle_seconds: int) -> Cursor:
    """The actor's own live cursor; anything else is the same 404."""
    if not token.startswith(PREFIX):
        raise NotFound(UNKNOWN)
    try:
        with engine.connect() as conn:
            row = conn.execute(select(cursor_table).where(cursor_table.c.token_hash == _hash(token))).first()
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"cursor could not be read: {type(exc).__name__}") from exc
    if row is None or row.tenant != actor.tenant or row.principal != actor.principal or _expired(row.last_used_at, idle_seconds):
        raise NotFound(UNKNOWN)
    return Cursor(row.token_hash, dict(row.request), tuple(row.remaining), tuple(row.returned), row.version)


def advance(engine: Engine, cursor: Cursor, returned: list[str], remaining: list[dict[str, Any]]) -> bool:
    """Record a page; False when another expand advanced the cursor first (take the page again)."""
    try:
        with writer(engine).begin() as conn:
            if not remaining:
                result = conn.execute(
                    delete(cursor_table).where(
                        cursor_table.c.token_hash == cursor.token_hash, cursor_table.c.version == cursor.version
                    )
                )
            else:
                result = conn.execute(
                    update(cursor_table)
                    .where(cursor_table.c.token_hash == cursor.token_hash, cursor_table.c.version == cursor.version)
                    .values(
                        remaining=remaining,
                        returned=list(cursor.returned) + returned,
                        version=cursor.version + 1,
                        last_used_at=utc_now(),
                    )
                )
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"cursor could not be updated: {type(exc).__name__}") from exc
    return bool(result.rowcount == 1)


def _expired(last_used_at: datetime, idle_seconds: int) -> bool:
    if last_used_at.tzinfo is None:  # SQLite returns naive UTC
        last_used_at = last_used_at.replace(tzinfo=utc_now().tzinfo)
    return utc_now() - last_used_at > timedelta(seconds=idle_seconds)
