"""The audit trail as web pages for compliance reviewers: the route handlers (sign in, list,
one trace, chain check, sign out). See docs/audit-page.md."""

from __future__ import annotations

import contextlib
import functools
import json
from urllib.parse import parse_qs, urlencode, urlsplit

import anyio.to_thread
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from audit.record import (
    AuditListed,
    RetrieveCall,
    SessionEnded,
    SessionOpened,
    TraceRead,
    stages_of,
)
from audit.review import Filters, get_trace, list_traces
from core.actor import Actor
from core.audit_facts import OUTCOMES
from core.errors import BadRequest, Forbidden, GatewayError, NotFound, Unauthenticated
from gateway.auth import KEY_PATTERN
from gateway.context import GatewayContext
from gateway.http.audit_pages.render import NOT_SIGNED_IN, forget_session, page, page_operation, redirect_home, sign_in_form
from gateway.http.audit_pages.session import SESSION_COOKIE, SignedOut, end_session, find_session, open_session, session_key
from gateway.http.operation import CURSOR, REDIRECT, REVIEW_FILTERS, STRING, TRACE_ID, obj
from gateway.http.operation import page as page_answer
from gateway.http.routes.audit import FILTER_NAMES, review_query
from gateway.http.traced import Call

ROLE = "auditor"
PAGE_SIZE = 50
KNOWN_DECISIONS = ("allow", "deny", "read", "write", "error", "none")
UNKNOWN_TRACE = "There is no such trace in your tenant's audit trail."


# --- the session -----------------------------------------------------------------------------------


def _session_key(context: GatewayContext) -> bytes:
    return session_key(context.audit.key, context.settings.audit_session_key)


def _live_actor(context: GatewayContext, token: str) -> Actor:
    """The auditor of a live session: its row is read, then its key's row, on every request."""
    session = find_session(context.store, _session_key(context), token, context.settings.audit_session_minutes)
    try:
        actor = context.authenticator.actor_for_key_id(session.key_id)
    except Unauthenticated as exc:
        raise SignedOut("The key of this session is no longer valid. Sign in again.") from exc
    if ROLE not in actor.roles:
        raise SignedOut("The key of this session no longer has the auditor role.")
    return actor


async def session_actor(call: Call) -> Actor | None:
    """The signed-in auditor, None without a session cookie; SignedOut for a cookie whose session
    was ended, has expired or is unknown, or whose key was revoked or lost the auditor role."""
    token = call.request.cookies.get(SESSION_COOKIE)
    if token is None:
        return None
    actor = await anyio.to_thread.run_sync(_live_actor, call.context, token)
    call.trace.tenant, call.trace.actor = actor.tenant, actor.principal
    call.trace.begin()  # a page read from here on
    return actor


def _check_origin(request: Request) -> None:
    """Forms are accepted from these pages only: another site's form could otherwise sign a reviewer
    in under someone else's key, or out. Browsers send Origin with every POST; a request without one
    is accepted only when the browser says it comes from this origin (Sec-Fetch-Site)."""
    origin = request.headers.get("origin")
    if origin is None:
        if request.headers.get("sec-fetch-site") != "same-origin":
            raise Forbidden(
                "This form can only be sent from the audit page itself, and this request did not say "
                "where it came from (no Origin header)."
            )
        return
    if urlsplit(origin).netloc != request.headers.get("host"):
        raise Forbidden("This form can only be sent from the audit page itself.")


# --- the pages -------------------------------------------------------------------------------------


def page_query(params: QueryParams) -> tuple[Filters, int | None]:
    """The list's filters and cursor from the query string."""
    return review_query(params, frozenset(), "not a filter of this page")


MORE_FILTERS = ("outcome", "revision", "reason", "returned", "masked", "revealed", "entity")  # folded on the page


def filter_values(params: QueryParams) -> dict[str, str]:
    return {name: params.get(name, "") for name in FILTER_NAMES}


def list_context(values: dict[str, str]) -> dict[str, object]:
    """What the list's form shows besides the values: the outcomes to choose and whether the folded
    filters are open (one is set, as when a chart of the overview links here)."""
    return {"decisions": KNOWN_DECISIONS, "outcomes": OUTCOMES, "more_set": any(values.get(n) for n in MORE_FILTERS)}


async def list_page(call: Call) -> tuple[int, Response]:
    """GET /audit: the sign-in form, or the tenant's traces, newest first, filtered and paged."""
    actor = await session_actor(call)
    if actor is None:
        return sign_in_form(200)
    params = call.request.query_params
    values = filter_values(params)
    chosen = {name: value for name, value in values.items() if value}
    try:
        filters, after = page_query(params)
    except BadRequest as exc:
        call.trace.error_code = exc.code
        return page(
            exc.status,
            "list.html",
            actor,
            filters=values,
            error=exc.message,
            rows=[],
            older=None,
            newest=None,
            **list_context(values),
        )
    found = await anyio.to_thread.run_sync(list_traces, call.context.store, actor.tenant, filters, after, PAGE_SIZE)
    call.trace.record(AuditListed(listed=len(found.traces)))
    older = "/audit?" + urlencode({**chosen, "cursor": found.cursor}) if found.cursor is not None else None
    newest = "/audit?" + urlencode(chosen) if after is not None else None
    return page(
        200, "list.html", actor, filters=values, error=None, rows=found.traces, older=older, newest=newest, **list_context(values)
    )


async def trace_page(call: Call) -> tuple[int, Response]:
    """GET /audit/traces/{trace_id}: one trace of the own tenant; any other is the same 404."""
    actor = await session_actor(call)
    if actor is None:
        return sign_in_form(401, "Sign in to read this trace.")
    found = await anyio.to_thread.run_sync(get_trace, call.context.store, actor.tenant, call.request.path_params["trace_id"])
    if found is None:
        raise NotFound(UNKNOWN_TRACE)
    trace, lineage = found.trace, found.lineage
    call.trace.record(TraceRead(trace=trace.trace_id))
    retrieve = lineage if isinstance(lineage, RetrieveCall) else None
    return page(
        200,
        "trace.html",
        actor,
        trace=trace,
        stages=stages_of(retrieve, trace.used),
        channel=lineage.channel or "http",
        reasons=retrieve.decision.reasons if retrieve and retrieve.decision else [],
        sources=sorted((name, s.wire()) for name, s in ((retrieve.sources if retrieve else None) or {}).items()),
        lineage_json=json.dumps(trace.lineage or {}, indent=2, sort_keys=True),
    )


async def verify_page(call: Call) -> tuple[int, Response]:
    """GET /audit/verify: recompute the own tenant's hash chain and name its first broken link."""
    actor = await session_actor(call)
    if actor is None:
        return sign_in_form(401, "Sign in to check the chain.")
    report = await anyio.to_thread.run_sync(call.context.audit.verify, actor.tenant)
    call.trace.record(report.record())
    return page(200, "verify.html", actor, report=report, rows=report.rows, tenant=actor.tenant)


async def form_fields(call: Call) -> dict[str, str]:
    """A url-encoded form within the body limit; only each field's first value counts."""
    content_type = call.request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/x-www-form-urlencoded":
        raise BadRequest("Expected a form (application/x-www-form-urlencoded).")
    raw = await call.body()
    try:
        fields = parse_qs(raw.decode("utf-8"), keep_blank_values=True, max_num_fields=10)
    except ValueError as exc:  # also bad UTF-8; the message could quote the body, so it is dropped
        raise BadRequest("The form could not be read.") from exc
    return {name: values[0] for name, values in fields.items()}


def refuse(call: Call, error: type[GatewayError], message: str) -> tuple[int, Response]:
    call.trace.error_code = error.code
    return sign_in_form(error.status, message)


async def sign_in(call: Call) -> tuple[int, Response]:
    """POST /audit/sign-in: an auditor API key opens a session. The key itself goes nowhere: not in
    the cookie, the trace, a log line or the page sent back."""
    _check_origin(call.request)
    key = (await form_fields(call)).get("key", "").strip()
    match = KEY_PATTERN.fullmatch(key)
    if match is None:  # JWTs are for API calls; a session is tied to a stored key
        return refuse(call, Unauthenticated, "That key was not accepted.")
    try:
        actor = call.context.authenticator.authenticate("Bearer " + key)
    except Unauthenticated:
        return refuse(call, Unauthenticated, "That key was not accepted.")
    call.trace.tenant, call.trace.actor = actor.tenant, actor.principal
    if ROLE not in actor.roles:
        return refuse(call, Forbidden, "This key does not have the auditor role.")
    key_id, minutes = match.group(1), call.context.settings.audit_session_minutes
    token, opened = await anyio.to_thread.run_sync(
        functools.partial(
            open_session,
            call.context.store,
            _session_key(call.context),
            key_id,
            minutes,
            replacing=call.request.cookies.get(SESSION_COOKIE),
        )
    )
    call.trace.record(SessionOpened(key_id=key_id, session=opened.ref, expires_at=opened.expires_at.isoformat()))
    response = redirect_home()
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=minutes * 60,
        path="/audit",
        secure=call.request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )
    return 303, response


async def sign_out(call: Call) -> tuple[int, Response]:
    """POST /audit/sign-out: the session's row is deleted, so its cookie opens nothing any more, even
    replayed; the browser drops it too. The key stays valid until revoked."""
    _check_origin(call.request)
    with contextlib.suppress(SignedOut):  # a dead session signs out all the same
        await session_actor(call)  # names the reviewer in the trace
    token = call.request.cookies.get(SESSION_COOKIE)
    ended = None
    if token is not None:
        ended = await anyio.to_thread.run_sync(end_session, call.context.store, _session_key(call.context), token)
    call.trace.record(SessionEnded.of(ended.ref if ended else None))
    response = redirect_home()
    forget_session(response)
    return 303, response


# The operations this module serves (gateway/http/operation.py).
OPERATIONS = (
    page_operation(
        "GET /audit: The audit page: the sign-in form, or the tenant's traces",
        "audit_page",
        list_page,
        page_answer("The sign-in form, or a page of traces"),
        {400: "A bad filter, shown on the page", 401: "The session is not valid any more: the sign-in form"},
        parameters=(*REVIEW_FILTERS, CURSOR),
    ),
    page_operation(
        "POST /audit/sign-in: Open a session with an auditor key",
        "audit_sign_in",
        sign_in,
        {**REDIRECT, "headers": {**REDIRECT["headers"], "Set-Cookie": {"schema": STRING}}},
        {
            400: "Not a form",
            401: "The key was not accepted",
            403: "Not from this page, or not an auditor's key",
            413: "The body is too large",
        },
        status=303,
        auth=None,
        body={
            "required": True,
            "content": {
                "application/x-www-form-urlencoded": {
                    "schema": obj(
                        {"key": {"type": "string", "description": "An API key with the auditor role"}}, required=["key"]
                    )
                }
            },
        },
        description="Accepted from the audit page only: the `Origin` header must name this host.",
    ),
    page_operation(
        "POST /audit/sign-out: End the session",
        "audit_sign_out",
        sign_out,
        REDIRECT,
        {403: "Not from this page"},
        status=303,
        description="Accepted from the audit page only: the `Origin` header must name this host.",
    ),
    page_operation(
        "GET /audit/traces/{trace_id}: One trace as a page",
        "audit_page_trace",
        trace_page,
        page_answer("The trace"),
        {401: NOT_SIGNED_IN, 404: "No such trace in the tenant"},
        parameters=(TRACE_ID,),
    ),
    page_operation(
        "GET /audit/verify: The chain check as a page",
        "audit_page_verify",
        verify_page,
        page_answer("The chain check"),
        {401: NOT_SIGNED_IN},
    ),
)
