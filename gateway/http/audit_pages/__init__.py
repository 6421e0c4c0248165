"""The server-rendered /audit pages for compliance reviewers (see docs/audit-page.md)."""

from gateway.http.audit_pages.session import SESSION_COOKIE, SignedOut, session_id, session_key

__all__ = [
    "SESSION_COOKIE",
    "SignedOut",
    "session_id",
    "session_key",
]
