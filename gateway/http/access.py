"""The access line: one per governed call (every outcome: allowed, denied, refused with 4xx or 429,
failed with 5xx; HTTP, MCP messages and the audit pages alike), on the `gateway.access` logger.

It says what an operator looks a call up by and nothing a caller sent as content: time, method,
route (the route's template, never the raw path, which may hold anything), status, tenant, actor
id, task type, duration, outcome (the error code, else the decision) and the trace id that opens
the call's audit row. Never query text, item text, personal data or credentials."""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request

from audit.record import TraceBuilder
from gateway.logs import FIELDS, SHOWN

log = logging.getLogger("gateway.access")


def access_line(request: Request, trace: TraceBuilder, status: int, ms: float, channel: str | None) -> None:
    """Log one answered call (INFO; nothing is built when the level is above it)."""
    if not log.isEnabledFor(logging.INFO):
        return
    route = getattr(request.scope.get("route"), "path", None) or "-"
    task = trace.lineage.task_type
    fields: dict[str, Any] = {
        "method": request.method,
        "route": route,
        "status": status,
        "tenant": trace.tenant,
        "actor": trace.actor,
        "task": task,
        "ms": round(ms, 1),
        "outcome": trace.error_code or trace.decision,
        "trace_id": trace.trace_id,
    }
    if channel:
        fields["channel"] = channel
    log.info("%s %s %s", request.method, route, status, extra={FIELDS: fields, SHOWN: ("method", "route", "status")})
