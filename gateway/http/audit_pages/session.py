"""The audit page's sessions, kept in the store (`AuditSession`): the cookie holds only a random
token, the row the HMAC of that token under the session key. No Starlette here, so it can be tested
on its own. See docs/audit-page.md."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, insert, or_, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from core.audit_tables import AuditSession
from core.errors import StoreUnavailable, Unauthenticated
from core.instants import rfc3339, to_utc, utc_now
from core.store import writer

SESSION_COOKIE = "gw_audit_session"
TOKEN = re.compile(r"^[A-Za-z0-9_-]{43}$")  # secrets.token_urlsafe(32)
SESSION_PURPOSE = b"audit-page-session"
PURGE_LIMIT = 100  # dead rows deleted at one sign-in, at most

session_table = AuditSession.__table__  # type: ignore[attr-defined]

NOT_VALID = "Your session is not valid. Sign in again."
EXPIRED = "Your session has expired. Sign in again."


class SignedOut(Unauthenticated):
    """A session cookie that no longer opens the page: unknown, ended, expired, or its key revoked."""


@dataclass(frozen=True, slots=True)
class OpenSession:
    """A live session's row. `id` is the HMAC of the cookie's token, never the token."""

    id: str
    key_id: str
    created_at: datetime
    expires_at: datetime

    @property
    def ref(self) -> str:
        """What the audit trail notes of a session: a prefix of its id (itself a hash of the token)."""
        return self.id[:16]


def session_key(audit_key: bytes, configured: str | None = None) -> bytes:
    """The key of the session ids: from GATEWAY_AUDIT_SESSION_KEY when set, which nobody who can
    only reach the database knows; otherwise derived from the audit key (which, unless
    GATEWAY_AUDIT_KEY is set, the database holds). Every replica on the store derives the same."""
    source = configured.encode() if configured is not None else audit_key
    return hmac.new(source, SESSION_PURPOSE, hashlib.sha256).digest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


def session_id(key: bytes, token: str) -> str:
    """The row id of a cookie token: its HMAC under the session key."""
    return hmac.new(key, b"id\x00" + token.encode(), hashlib.sha256).hexdigest()


def _mac(key: bytes, sid: str, key_id: str, created_at: datetime) -> str:
    """Binds the key id and the creation time to the row, under the session key."""
    message = "\x00".join(("row", sid, key_id, rfc3339(created_at) or "")).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def open_session(
    engine: Engine, key: bytes, key_id: str, minutes: int, now: datetime | None = None, replacing: str | None = None
) -> tuple[str, OpenSession]:
    """A new session for the key `key_id`: its cookie token (to the browser only) and its row. Dead
    rows go first (a bounded number), and the session of the cookie `replacing`, if any."""
    now = to_utc(now or utc_now())
    token = new_token()
    sid = session_id(key, token)
    opened = OpenSession(sid, key_id, now, now + timedelta(minutes=minutes))
    try:
        with writer(engine).begin() as conn:
            _purge(conn, now, minutes)
            if replacing is not None and TOKEN.fullmatch(replacing):
                conn.execute(delete(session_table).where(session_table.c.id == session_id(key, replacing)))
            conn.execute(
                insert(session_table).values(
                    id=sid,
                    key_id=key_id,
                    created_at=now,
                    expires_at=opened.expires_at,
                    mac=_mac(key, sid, key_id, now),
                )
            )
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"the session could not be stored: {type(exc).__name__}") from exc
    return token, opened


def _purge(conn: Connection, now: datetime, minutes: int) -> None:
    """Delete up to PURGE_LIMIT sessions that can no longer open a page: expired, or older than the
    lifetime cap."""
    dead = (
        select(session_table.c.id)
        .where(or_(session_table.c.expires_at <= now, session_table.c.created_at <= now - timedelta(minutes=minutes)))
        .limit(PURGE_LIMIT)
    )
    ids = list(conn.execute(dead).scalars())
    if ids:
        conn.execute(delete(session_table).where(session_table.c.id.in_(ids)))


def find_session(engine: Engine, key: bytes, token: str, minutes: int, now: datetime | None = None) -> OpenSession:
    """The live session of a cookie token; raises SignedOut for any other. Live: its row exists (not
    signed out), its MAC holds, it has not expired, and it is younger than `minutes` (the current
    setting, whatever its row says)."""
    now = to_utc(now or utc_now())
    if not TOKEN.fullmatch(token):
        raise SignedOut(NOT_VALID)
    sid = session_id(key, token)
    try:
        with engine.connect() as conn:
            row = conn.execute(select(session_table).where(session_table.c.id == sid)).first()
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"the session could not be read: {type(exc).__name__}") from exc
    if row is None:
        raise SignedOut(NOT_VALID)
    created_at, expires_at = to_utc(row.created_at), to_utc(row.expires_at)
    if not hmac.compare_digest(row.mac, _mac(key, sid, row.key_id, created_at)):
        raise SignedOut(NOT_VALID)
    if expires_at <= now or created_at + timedelta(minutes=minutes) <= now:
        raise SignedOut(EXPIRED)
    return OpenSession(sid, row.key_id, created_at, expires_at)


def end_session(engine: Engine, key: bytes, token: str) -> OpenSession | None:
    """Delete the session of a cookie token (sign-out): the same cookie opens nothing afterwards.
    Returns the row it deleted, None when there was none."""
    if not TOKEN.fullmatch(token):
        return None
    sid = session_id(key, token)
    try:
        with writer(engine).begin() as conn:
            row = conn.execute(select(session_table).where(session_table.c.id == sid)).first()
            if row is None:
                return None
            conn.execute(delete(session_table).where(session_table.c.id == sid))
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"the session could not be ended: {type(exc).__name__}") from exc
    return OpenSession(sid, row.key_id, to_utc(row.created_at), to_utc(row.expires_at))
