"""Runs one /v1 handler: reads the body within its limit, maps errors, writes the trace, then answers."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from audit.trace import TraceBuilder, new_trace_id
from connectors.instants import utc_now
from gateway.auth import Actor
from gateway.context import GatewayContext
from gateway.errors import AuditWriteError, BadRequest, Forbidden, GatewayError, PayloadTooLarge, error_body, where

log = logging.getLogger("gateway.http")

Handler = Callable[["Call"], Awaitable[tuple[int, "dict[str, Any] | Stream"]]]


class Call:
    """One authenticated call: its context, actor, trace and raw request."""

    def __init__(self, request: Request, context: GatewayContext, trace: TraceBuilder) -> None:
        self.request = request
        self.context = context
        self.trace = trace
        self._actor: Actor | None = None

    @property
    def actor(self) -> Actor:
        assert self._actor is not None
        return self._actor

    def authenticate(self, required_role: str | None = None) -> Actor:
        actor = self.context.authenticator.authenticate(self.request.headers.get("authorization"))
        self._actor = actor
        self.trace.tenant, self.trace.actor = actor.tenant, actor.principal
        if required_role and required_role not in actor.roles:
            raise Forbidden(f"this endpoint needs the {required_role!r} role")
        return actor

    async def body(self) -> bytes:
        limit = self.context.settings.max_body_bytes
        declared = self.request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise PayloadTooLarge(f"body: larger than the {limit}-byte limit")
        chunks, size = [], 0
        async for chunk in self.request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"body: larger than the {limit}-byte limit")
            chunks.append(chunk)
        return b"".join(chunks)

    async def json(self) -> Any:
        raw = await self.body()
        if not raw.strip():
            raise BadRequest("body: empty; expected a JSON object")
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as exc:  # also bad UTF-8, over-long integers, too-deep nesting
            where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
            raise BadRequest(f"body: malformed JSON{where}") from exc


@dataclass(frozen=True, slots=True)
class Stream:
    """A response body streamed after the audit row is written (exports)."""

    chunks: Iterator[bytes]
    media_type: str


async def traced(request: Request, endpoint: str, handler: Handler) -> Response:
    context: GatewayContext = request.app.state.context
    trace = TraceBuilder(new_trace_id(), endpoint, utc_now(), key=context.audit.key)
    trace.policy_engine, trace.policy_revision = context.policy.name, context.policy.revision
    call = Call(request, context, trace)
    try:
        status, body = await handler(call)
    except GatewayError as exc:
        status, body = exc.status, error_body(exc, trace.trace_id)
        trace.error_code = exc.code
        if exc.status >= 500:
            trace.decision = "error" if trace.decision in ("none", "allow") else trace.decision
            log.warning("%s %s: %s", endpoint, exc.code, exc.message)
    except Exception as exc:  # never a stack trace on the wire; the log has the type only
        log.error("%s failed unexpectedly: %s", endpoint, where(exc))
        status = 500
        body = error_body(GatewayError(f"internal error ({type(exc).__name__})"), trace.trace_id)
        trace.error_code, trace.decision = "internal_error", "error"
    try:
        await context.audit.write(trace.freeze(status))
    except AuditWriteError as exc:
        log.error("audit write failed for %s", trace.trace_id)
        status, body = exc.status, error_body(exc, trace.trace_id)
    headers = {"x-trace-id": trace.trace_id}
    if isinstance(body, Stream):
        return StreamingResponse(body.chunks, status_code=status, media_type=body.media_type, headers=headers)
    return JSONResponse(body, status_code=status, headers=headers)
