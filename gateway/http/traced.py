"""Runs one governed call: reads the body within its limit, maps errors, builds the answer, writes the
trace, then answers. `governed` is the part every channel shares (an HTTP route, an MCP tool call);
`traced` shapes its answer for HTTP."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import wraps
from typing import Any, Awaitable, Callable, Generic, TypeAlias, TypeVar, cast

import anyio
import anyio.to_thread
from opentelemetry.trace import Status, StatusCode
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from api.wire import Wire
from audit.record import (
    AdmissionRecord,
    Channel,
    NotDelivered,
    OtelRecord,
    RetrieveCall,
    TraceBuilder,
    Unrouted,
    WorkRecord,
    new_trace_id,
)
from core.actor import Actor
from core.errors import AuditWriteError, BadRequest, Forbidden, GatewayError, PayloadTooLarge, RateLimited, RequestTimeout, where
from core.instants import utc_now
from core.validation import has_nul, loads_json
from gateway.admission import Left, Ticket, give_way, holding
from gateway.context import GatewayContext
from gateway.http.access import access_line
from gateway.http.errors import CLIENT_CLOSED, closed_answer, error_answer
from gateway.http.operation import REQUIRED_ROLE
from gateway.telemetry import active, span_ids, traceparent

log = logging.getLogger("gateway.http")
AUTHENTICATED = "gateway.actor"  # the ASGI scope key of a request's actor, once read from its credential
REFUSAL_WAIT_S = 0.5  # how long a 429 takes to come back (at most its Retry-After)

Answer: TypeAlias = "Wire | dict[str, Any] | Stream | Response"  # what a handler returns with its status
Handler = Callable[["Call"], Awaitable[tuple[int, Answer]]]
H = TypeVar("H", bound=Callable[..., Awaitable[Any]])
R = TypeVar("R")
# Shapes a call's status, body and error headers into what its channel sends (an HTTP response, an
# MCP tool result); it runs before the audit write, so the row says what the client is sent.
Render = Callable[[TraceBuilder, int, Answer, Mapping[str, str]], tuple[int, R]]


class Call:
    """One authenticated call: its context, actor, trace and raw request. A call that did not come as
    an HTTP body (an MCP tool call) is given its `body` (read only when the handler asks, after the
    credential was checked, as an HTTP body is) and its path `params`."""

    def __init__(
        self,
        request: Request,
        context: GatewayContext,
        trace: TraceBuilder,
        body: Callable[[], Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        self.request = request
        self.context = context
        self.trace = trace
        self.params: Mapping[str, Any] = request.path_params if params is None else params
        self._body = body
        self._raw: bytes | None = None  # the HTTP body, once read
        self._actor: Actor | None = None
        self._read = False  # the HTTP body was read, so the next ASGI message is the disconnect
        self.ticket: Ticket | None = None  # the admitted call's seats, given back after its audit row

    @property
    def actor(self) -> Actor:
        assert self._actor is not None
        return self._actor

    async def authenticate(self, required_role: str | None = None) -> Actor:
        """The caller, read from the store on a worker thread (a PostgreSQL round trip no longer holds
        the event loop); read afresh on every call, so a revoked key is refused at once. A request
        whose credential was already read from the store on its way in (/mcp reads it before the
        body, `AUTHENTICATED`) is not read twice."""
        known = self.request.scope.get(AUTHENTICATED)
        if isinstance(known, Actor):
            actor = known
        else:
            authorization = self.request.headers.get("authorization")
            actor = await anyio.to_thread.run_sync(self.context.authenticator.authenticate, authorization)
        self._actor = actor
        self.trace.tenant, self.trace.actor = actor.tenant, actor.principal
        if required_role and required_role not in actor.roles:
            raise Forbidden(f"this endpoint needs the {required_role!r} role")
        return actor

    @asynccontextmanager
    async def admitted(self, cost: int, *, part: bool = False) -> AsyncIterator[None]:
        """Wait for the call's turn in the fair queue at its price (`cost`, the estimate, or more when
        the actor's calls of this endpoint and estimate measured more lately), run the block under it,
        and settle it; its seats are given back after the audit write (`governed`). Past the queue's
        bounds or a rate quota, RateLimited (429 with Retry-After), audited like any refusal; a client
        that leaves while its call waits is a 499, and its place in the queue is given up. A `part`
        of a streamed call (PUT /v1/items with NDJSON) is admitted on its own and gives its seats
        back at the block's end, so none is held while the next part arrives; the admission record
        adds the parts up. Each step leaves the admission as it then stands, as a new record."""
        actor = self.actor
        earlier = self.trace.lineage.admission if part else None
        if earlier is None:
            admission = self._admission(AdmissionRecord(cost=cost))
        else:
            admission = self._admission(earlier.model_copy(update={"cost": (earlier.cost or 0) + cost}))
        left = self._left if self._body is None and self._read else None
        try:
            ticket = await self.context.admission.enter(
                actor.tenant, actor.principal, cost, shape=f"{self.trace.endpoint}:{cost}", left=left
            )
        except Left as exc:
            raise ClientDisconnect() from exc
        if not part:
            self.ticket = ticket
        admitted: dict[str, Any] = {"price": (admission.price or 0) + ticket.cost if part else ticket.cost}
        if ticket.queued_ms:
            admitted["queued_ms"] = round((admission.queued_ms or 0) + ticket.queued_ms, 3)
        admission = self._admission(admission.model_copy(update=admitted))
        try:
            with holding(ticket, release=part):
                yield
        finally:  # after `holding` settled the call: what it measured is in the trace
            settled: dict[str, Any] = {
                "used": round((admission.used or 0) + ticket.used if part else ticket.used, 3),
                "work": WorkRecord.model_validate(ticket.meter.report()),
            }
            if ticket.gave_way_ms:
                settled["gave_way_ms"] = round((admission.gave_way_ms or 0) + ticket.gave_way_ms, 3)
            self._admission(admission.model_copy(update=settled))

    def _admission(self, admission: AdmissionRecord) -> AdmissionRecord:
        self.trace.record(admission)
        return admission

    async def _left(self) -> None:
        """Returns when the client goes away (its body already read: the next ASGI message is the
        disconnect)."""
        while (await self.request.receive())["type"] != "http.disconnect":
            pass

    async def body(self) -> bytes:
        """The HTTP body, read once (within GATEWAY_MAX_BODY_BYTES and GATEWAY_BODY_TIMEOUT_MS)."""
        if self._raw is None:
            settings = self.context.settings
            self._raw = await read_body(self.request, settings.max_body_bytes, settings.body_timeout_ms / 1000)
            self._read = True
        return self._raw

    async def json(self) -> Any:
        if self._body is not None:
            return self._body()
        raw = await self.body()
        if not raw.strip():
            raise BadRequest("body: empty; expected a JSON object")
        try:
            return loads_json(raw)  # NaN, Infinity and 1e999 are a 400 naming the field
        except (ValueError, RecursionError) as exc:  # also bad UTF-8, over-long integers, too-deep nesting
            where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
            raise BadRequest(f"body: malformed JSON{where}") from exc

    async def json_object(self) -> dict[str, Any]:
        """The body as a JSON object whose strings hold no NUL character (PostgreSQL text cannot):
        any other JSON value, or a NUL anywhere in it, is a 400."""
        body = await self.json()
        if not isinstance(body, dict):
            raise BadRequest("body: expected a JSON object")
        if has_nul(body):
            raise BadRequest("body: strings must not contain the NUL character")
        return body


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """A request's body, refused (413) past `limit` bytes: by its declared length before reading,
    else as soon as what arrived passes it; and refused (408) when it has not all arrived within
    `timeout_s`, however slowly it trickles."""
    declared = request.headers.get("content-length")
    if declared and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"body: larger than the {limit}-byte limit")
    chunks, size = [], 0
    with anyio.move_on_after(timeout_s) as deadline:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"body: larger than the {limit}-byte limit")
            chunks.append(chunk)
    if deadline.cancelled_caught:
        raise RequestTimeout(f"body: not received within {timeout_s:g} s (GATEWAY_BODY_TIMEOUT_MS)")
    return b"".join(chunks)


def requires(role: str | None = None, *, admit: bool = True) -> Callable[[H], H]:
    """Declared on a handler, as Starlette's @requires: the bearer credential (and `role`, when one is
    named) is checked before the handler runs; the handler reads `call.actor`. The call is then
    admitted at one unit (gateway/admission.py), its HTTP body read first (within its size and time
    bounds), so no seat is ever held while a caller's socket trickles a body in; `admit=False`
    leaves admission to a handler whose cost depends on its body (`call.admitted(cost)`), which
    reads the body before it is admitted too."""

    def declare(handler: H) -> H:
        @wraps(handler)
        async def checked(call: Call) -> Any:
            await call.authenticate(role)
            if not admit:
                call.trace.begin()
                return await handler(call)
            if call._body is None:  # an HTTP call: the body before the seat
                await call.body()
            async with call.admitted(1):
                call.trace.begin()
                return await handler(call)

        setattr(checked, REQUIRED_ROLE, role)  # the operation's documented role is this one
        return cast(H, checked)

    return declare


@dataclass(frozen=True, slots=True)
class Stream:
    """A response body streamed after the audit row is written (exports)."""

    chunks: Iterator[bytes]
    media_type: str


@dataclass(frozen=True, slots=True)
class Outcome(Generic[R]):
    """A governed call once its row is written: what its channel sends, and for the HTTP headers, its
    trace id, span and timings."""

    status: int
    answer: R
    trace_id: str
    traceparent: str | None
    handled_ms: float
    audited_ms: float
    queued_ms: float = 0.0


async def traced(request: Request, endpoint: str, handler: Handler) -> Response:
    """Run `handler` as an HTTP call. A handler returns a status and a JSON body, a Stream (its chunks
    go out after the row, by design), or a ready Response (the audit pages). Every answer carries
    the trace id, the OpenTelemetry `traceparent` of its request span, and a Server-Timing header
    (`app` is the handler and its answer, `audit` the trace write)."""
    outcome = await governed(request, endpoint, handler, _answer)
    response = outcome.answer
    response.headers.update(
        {
            "x-trace-id": outcome.trace_id,
            "server-timing": f"queue;dur={outcome.queued_ms:.3f}, app;dur={outcome.handled_ms:.3f}, audit;dur={outcome.audited_ms:.3f}",
        }
    )
    if outcome.traceparent:
        response.headers["traceparent"] = outcome.traceparent
    return response


def serving(endpoint: str, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """The Starlette endpoint of an HTTP operation: `handler` run by `traced` as `endpoint` (the name
    its audit rows carry). Declared once, in the operation (gateway/http/operation.py)."""

    async def serve(request: Request) -> Response:
        return await traced(request, endpoint, handler)

    serve.__name__ = f"{endpoint}_route"
    setattr(serve, REQUIRED_ROLE, getattr(handler, REQUIRED_ROLE, None))
    return serve


async def governed(
    request: Request,
    endpoint: str,
    handler: Handler,
    render: Render[R],
    *,
    channel: str | None = None,
    body: Callable[[], Any] | None = None,
    params: Mapping[str, Any] | None = None,
) -> Outcome[R]:
    """Run `handler`, build its answer with `render`, write its trace: the one path every channel's
    call takes (one policy revision, the same errors, admission, audit row and telemetry). The answer
    is built before the row is written (building a JSON answer renders it), so the row says what the
    client is sent: a body that cannot be rendered is a 500 in the row as on the wire. `channel`
    marks the row of a call that did not come over the HTTP API (`mcp`); `body` and `params` stand in
    for the HTTP body and path of such a call."""
    context: GatewayContext = request.app.state.context
    telemetry = context.telemetry
    route = request.scope.get("route")
    name = f"{request.method} {getattr(route, 'path', endpoint)}"
    attributes = {"http.request.method": request.method, "http.route": getattr(route, "path", ""), "gateway.endpoint": endpoint}
    if channel:
        attributes["gateway.channel"] = channel
    with active(telemetry), telemetry.request(name, request.headers, attributes) as span:
        started = time.perf_counter()
        trace = TraceBuilder(new_trace_id(), endpoint, utc_now(), key=context.audit.key)
        if channel:
            trace.record(Channel(channel=channel))
        ids = span_ids(span)
        if ids:
            trace.record(OtelRecord.model_validate(ids))
        span.set_attribute("gateway.trace_id", trace.trace_id)
        with context.policy.pin() as policy:  # one revision decides, verifies and is stamped, whatever reloads meanwhile
            trace.policy_engine, trace.policy_revision = policy.name, policy.revision
            call = Call(request, context, trace, body, params)
            status, answer, headers = await _run(call, endpoint, handler)
        try:
            return await _answered(call, status, answer, headers, render, span, started, channel)
        finally:  # the seats are held through the audit write: a flood's rows wait in its own turn
            if call.ticket is not None:
                call.ticket.release()


async def _answered(
    call: Call,
    status: int,
    answer: Answer,
    headers: Mapping[str, str],
    render: Render[R],
    span: Any,
    started: float,
    channel: str | None,
) -> Outcome[R]:
    """Render the call's answer, write its audit row (an answer whose row cannot be written is a
    500), and report it to telemetry."""
    request, context, trace, telemetry = call.request, call.context, call.trace, call.context.telemetry
    # Over MCP the SDK's transport owns the request's receive channel: it is not read here.
    if status != CLIENT_CLOSED and channel is None and await _client_left(request):
        status, answer = _closed(trace)
    status, rendered = render(trace, status, answer, headers)
    if call.ticket is not None:  # a busier tenant's row waits for a lighter tenant's calls too
        await give_way(ticket=call.ticket)
    handled = time.perf_counter()
    try:
        with telemetry.layer("audit.write"):
            await context.audit.write(trace.freeze(status), trace.writes if status < 400 else ())
    except AuditWriteError as exc:
        log.error("audit write failed for %s", trace.trace_id)
        status, error = error_answer(exc, trace.trace_id)
        status, rendered = render(trace, status, error, {})
    audited = time.perf_counter()
    span.set_attributes({"http.response.status_code": status, "gateway.decision": trace.decision})
    if status >= 500:
        span.set_status(Status(StatusCode.ERROR, trace.error_code or str(status)))
    telemetry.answered(
        trace.endpoint, status, trace.decision, audited - started, trace.tenant, call.ticket.queued_ms if call.ticket else None
    )
    access_line(request, trace, status, (audited - started) * 1000, channel)
    if trace.decision == "deny":
        telemetry.denied(trace.endpoint)
    queued = call.ticket.queued_ms if call.ticket is not None else 0.0
    return Outcome(
        status, rendered, trace.trace_id, traceparent(span), (handled - started) * 1000, (audited - handled) * 1000, queued
    )


async def _run(call: Call, endpoint: str, handler: Handler) -> tuple[int, Answer, Mapping[str, str]]:
    """The handler's answer, or the error it raised as an error body with the headers it needs
    (Retry-After); the trace notes which."""
    trace = call.trace
    try:
        status, answer = await handler(call)
        return status, answer, {}
    except ClientDisconnect:  # the client left while its body was being read: not our failure
        return (*_closed(trace), {})
    except RateLimited as exc:
        # Answered after a short wait (never beyond Retry-After): a client that ignores Retry-After
        # and retries at once cannot turn refusals into a flood of its own. The wait costs nothing.
        trace.error_code = exc.code
        await anyio.sleep(min(exc.retry_after, REFUSAL_WAIT_S))
        return (*error_answer(exc, trace.trace_id), exc.headers)
    except GatewayError as exc:
        trace.error_code = exc.code
        if exc.status >= 500:
            trace.failed(unless=("deny", "read", "write"))
            log.warning("%s %s: %s", endpoint, exc.code, exc.message)
        return (*error_answer(exc, trace.trace_id), exc.headers)
    except Exception as exc:  # never a stack trace on the wire; the log has the type only
        log.error("%s failed unexpectedly: %s", endpoint, where(exc))
        status, body = error_answer(exc, trace.trace_id)  # a 500, or a 503 for a full disk
        trace.error_code = body["error"]["code"]
        trace.failed()
        return status, body, {}


async def _client_left(request: Request) -> bool:
    """Whether the client went away while the handler ran. Starlette reads one ASGI message under an
    already-cancelled scope, so this never waits; a server that cannot tell counts as connected, so
    the check can never break an answer."""
    try:
        return await request.is_disconnected()
    except Exception as exc:
        log.debug("disconnect check failed: %s", where(exc))
        return False


def _closed(trace: TraceBuilder) -> tuple[int, dict[str, Any]]:
    """A client that left is recorded as such (499 client_closed), not as a gateway failure; what the
    call packed was never delivered. The log names the call, never the request's content."""
    log.info("%s: client closed the request (%s)", trace.endpoint, trace.trace_id)
    trace.error_code = "client_closed"
    _withhold(trace)
    return closed_answer(trace.trace_id)


def _answer(trace: TraceBuilder, status: int, body: Answer, headers: Mapping[str, str]) -> tuple[int, Response]:
    """The answer as it goes on the wire. Rendering can fail (JSON has no NaN or infinity, nor an
    arbitrary object): then the call failed, as a bare 500 that names nothing, and what it packed
    was never delivered."""
    try:
        response = _response(status, body)
        response.headers.update(headers)
        return status, response
    except Exception as exc:  # never a stack trace on the wire; the log has the type only
        return unrendered(trace, exc, lambda status, error: JSONResponse(error, status_code=status))


def unrendered(trace: TraceBuilder, error: Exception, shape: Callable[[int, dict[str, Any]], R]) -> tuple[int, R]:
    """An answer that could not be rendered: the call failed, as a bare 500 (shaped for its channel)
    that names nothing, and what it packed was never delivered."""
    log.error("%s answer could not be rendered: %s", trace.endpoint, where(error))
    trace.error_code = "internal_error"
    trace.failed()
    _withhold(trace)
    status, body = error_answer(error, trace.trace_id)
    return status, shape(status, body)


def _response(status: int, body: Answer) -> Response:
    if isinstance(body, Response):
        return body
    if isinstance(body, Stream):
        return StreamingResponse(body.chunks, status_code=status, media_type=body.media_type)
    if isinstance(body, Wire):  # a model of the contract (api/): the fields its builder set
        body = body.wire()
    return JSONResponse(body, status_code=status)  # renders here, and raises on what JSON cannot hold


def _withhold(trace: TraceBuilder) -> None:
    """Packed ids of a call whose answer never reached its client move to `not_delivered`: kept for
    review, out of the per-item index of the calls that returned an item."""
    lineage = trace.lineage
    if isinstance(lineage, RetrieveCall) and lineage.packed is not None:
        trace.record(NotDelivered(not_delivered=lineage.packed))


def refusal(error: type[GatewayError], message: str) -> Handler:
    """The handler of a call no route took (a 404 or 405 from the router): not authenticated, it
    notes the method and a keyed fingerprint of the path — the path and query may hold anything,
    even a secret, so neither is kept — and raises `error`."""

    async def refuse(call: Call) -> tuple[int, Answer]:
        request = call.request
        call.trace.record(Unrouted(method=request.method, path=call.trace.fingerprint(request.url.path)))
        raise error(message)

    return refuse
