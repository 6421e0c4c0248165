"""The one place errors become HTTP: a status and the wire body `{"error": {code, message, trace_id}}`."""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException

from core.errors import GatewayError, StoreUnavailable
from core.store import DISK_FULL, disk_full

STARLETTE_CODES = {404: "not_found", 405: "method_not_allowed"}
CLIENT_CLOSED = 499  # nginx's "client closed request": no answer was read, none was sent


def error_answer(error: BaseException, trace_id: str | None) -> tuple[int, dict[str, Any]]:
    """The status and body for any error. A GatewayError says what went wrong (its messages never carry
    stored values); anything else is a bare 500 that names nothing (the log has the type and place)."""
    if isinstance(error, GatewayError):
        body: dict[str, Any] = {"code": error.code, "message": error.message, "trace_id": trace_id}
        if error.reasons:
            body["reasons"] = error.reasons
        return error.status, {"error": body}
    if isinstance(error, HTTPException):
        code = STARLETTE_CODES.get(error.status_code, "http_error")
        return error.status_code, {"error": {"code": code, "message": str(error.detail), "trace_id": trace_id}}
    if disk_full(error):  # not the gateway's fault, and it passes: say so
        return error_answer(StoreUnavailable(DISK_FULL), trace_id)
    return 500, {"error": {"code": "internal_error", "message": "internal error", "trace_id": trace_id}}


def closed_answer(trace_id: str) -> tuple[int, dict[str, Any]]:
    """The answer to a client that went away. Nobody reads it: it exists so the row's status and
    code say what happened (the client left), not that the gateway failed."""
    return CLIENT_CLOSED, {"error": {"code": "client_closed", "message": "the client closed the request", "trace_id": trace_id}}
