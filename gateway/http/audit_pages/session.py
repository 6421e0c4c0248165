"""The audit page's session cookie: `key_id.expiry.hmac`, sealed and unsealed with pure HMAC code
(no Starlette here, so it can be tested on its own). See docs/audit-page.md."""

from __future__ import annotations

import hashlib
import hmac
import re

from core.errors import Unauthenticated

SESSION_COOKIE = "gw_audit_session"
SESSION_VALUE = re.compile(r"^([0-9a-f]{16})\.([0-9]{1,12})\.([0-9a-f]{64})$")
SESSION_PURPOSE = b"audit-page-session"


class SignedOut(Unauthenticated):
    """A session cookie that no longer opens the page: forged, expired, or its key revoked."""


def session_key(audit_key: bytes) -> bytes:
    """Derived from the audit key, so every replica on the store accepts the same sessions."""
    return hmac.new(audit_key, SESSION_PURPOSE, hashlib.sha256).digest()


def _mac(key: bytes, key_id: str, expires: int) -> str:
    return hmac.new(key, f"{key_id}.{expires}".encode(), hashlib.sha256).hexdigest()


def seal(key: bytes, key_id: str, expires: int) -> str:
    """The cookie value `key_id.expiry.hmac`."""
    return f"{key_id}.{expires}.{_mac(key, key_id, expires)}"


def unseal(key: bytes, value: str, now: float) -> str:
    """The key id of a cookie this gateway issued and that has not expired."""
    match = SESSION_VALUE.match(value)
    if not match or not hmac.compare_digest(match.group(3), _mac(key, match.group(1), int(match.group(2)))):
        raise SignedOut("Your session is not valid. Sign in again.")
    if int(match.group(2)) <= now:
        raise SignedOut("Your session has expired. Sign in again.")
    return match.group(1)
