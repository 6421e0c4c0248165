"""The server-rendered /audit pages for compliance reviewers (see docs/audit-page.md)."""

from gateway.http.audit_pages.session import SESSION_COOKIE, SignedOut, session_id, session_key
from gateway.http.audit_pages.views import list_route, sign_in_route, sign_out_route, trace_route, verify_route

__all__ = [
    "SESSION_COOKIE",
    "SignedOut",
    "list_route",
    "session_id",
    "session_key",
    "sign_in_route",
    "sign_out_route",
    "trace_route",
    "verify_route",
]
