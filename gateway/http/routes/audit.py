"""The audit trail over HTTP. Review endpoints need the auditor role and read the caller's tenant
only; usage and feedback are reported by the agent that made the call, about that call."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import anyio.to_thread
from starlette.datastructures import QueryParams

from api.audit import FeedbackRequest, FeedbackResult, Trace, TraceList, TraceProof, UsageRequest, UsageResult, VerifyReport
from audit.record import (
    AuditExported,
    AuditListed,
    FeedbackGiven,
    ReportedOn,
    RetrieveCall,
    TraceRead,
    UsageReported,
)
from audit.review import MAX_PAGE, Filters, WholeTrace, export, get_trace, list_traces
from core.audit_facts import OUTCOMES
from core.errors import BadRequest, NotFound
from core.instants import parse_rfc3339
from core.validation import ascii_int, validated
from gateway.http.operation import (
    AUDIT,
    NDJSON,
    REVIEW_FILTERS,
    STRING,
    TRACE_ID,
    TRACE_ID_HEADER,
    json_answer,
    json_body,
    query_parameter,
    ref,
)
from gateway.http.operation import (
    CURSOR as CURSOR_PARAMETER,
)
from gateway.http.traced import Call, Stream, requires, serving

UNKNOWN_TRACE = "trace: no such trace"
PROOF_COST = 4  # admission units of a proof: O(n) in its chain (222 ms at 100,000 rows), like an impact run
CURSOR = re.compile(r"c_([0-9]{1,18})", re.ASCII)  # fullmatch: ASCII digits, no trailing newline
FILTER_NAMES = (
    "actor",
    "task",
    "decision",
    "since",
    "until",
    "item",
    "outcome",
    "revision",
    "reason",
    "returned",
    "masked",
    "revealed",
    "entity",
)
TEXT_FILTERS = ("actor", "task", "decision", "item", "revision", "reason", "returned", "masked", "revealed", "entity")


def review_query(params: QueryParams, others: frozenset[str], unknown: str) -> tuple[Filters, int | None]:
    """The filters and cursor of a review request (the JSON API's and the audit page's); `others`
    are the further parameters the caller reads itself, any other is refused as `<name>: <unknown>`.
    Blank values (empty form fields) mean no filter."""
    names = sorted(set(params) - {*FILTER_NAMES, "cursor", *others})
    if names:
        raise BadRequest(f"{names[0]}: {unknown}")
    instants: dict[str, datetime] = {}
    for name in ("since", "until"):
        if params.get(name):
            try:
                instants[name] = parse_rfc3339(params[name])
            except ValueError as exc:
                raise BadRequest(f"{name}: expected an instant with its offset, such as 2026-11-30T00:00:00Z") from exc
    after = None
    if params.get("cursor"):
        match = CURSOR.fullmatch(params["cursor"])
        if not match:
            raise BadRequest("cursor: not a cursor this page issued")
        after = int(match.group(1))
    result = params.get("outcome") or None
    if result is not None and result not in OUTCOMES:
        raise BadRequest(f"outcome: expected one of {', '.join(OUTCOMES)}")
    texts = {name: params.get(name) or None for name in TEXT_FILTERS}
    filters = Filters(outcome=result, since=instants.get("since"), until=instants.get("until"), **texts)
    return filters, after


def _api_query(call: Call) -> tuple[Filters, int | None]:
    return review_query(call.request.query_params, frozenset({"limit", "format"}), "unknown query parameter")


@requires("auditor")
async def list_route_handler(call: Call) -> tuple[int, TraceList]:
    """GET /v1/audit/traces: newest first, filtered, paged by cursor."""
    actor = call.actor
    filters, after = _api_query(call)
    limit = ascii_int("limit", call.request.query_params.get("limit", "50"), 1, MAX_PAGE)
    found = await anyio.to_thread.run_sync(list_traces, call.context.store, actor.tenant, filters, after, limit)
    call.trace.record(AuditListed(listed=len(found.traces)))
    return 200, found


@requires("auditor")
async def one_trace(call: Call) -> tuple[int, Trace]:
    """GET /v1/audit/traces/{trace_id}: the whole trace, with what the agent reported about it."""
    actor = call.actor
    found = await anyio.to_thread.run_sync(get_trace, call.context.store, actor.tenant, call.request.path_params["trace_id"])
    if found is None:
        raise NotFound(UNKNOWN_TRACE)
    call.trace.record(TraceRead(trace=found.trace.trace_id))
    return 200, found.trace


@requires("auditor", admit=False)
async def trace_proof(call: Call) -> tuple[int, TraceProof]:
    """GET /v1/audit/traces/{trace_id}/proof: the row, its inclusion proof and the signed checkpoint
    it is under (audit.integrity.proofs), for `gateway audit verify-proof`. It reads every row hash of the
    chain up to the checkpoint, so it is admitted at PROOF_COST units, not one."""
    actor = call.actor
    trace_id = call.request.path_params["trace_id"]
    async with call.admitted(PROOF_COST):
        found = await anyio.to_thread.run_sync(call.context.audit.proof, actor.tenant, trace_id)
    if found is None:
        raise NotFound(UNKNOWN_TRACE)
    call.trace.record(TraceRead(trace=trace_id))
    return 200, found


@requires("auditor")
async def export_traces(call: Call) -> tuple[int, dict[str, Any] | Stream]:
    """GET /v1/audit/export?format=jsonl|csv: every matching row, streamed."""
    actor = call.actor
    filters, _ = _api_query(call)
    fmt = call.request.query_params.get("format", "jsonl")
    if fmt not in ("jsonl", "csv"):
        raise BadRequest("format: expected jsonl or csv")
    call.trace.record(AuditExported(format=fmt))
    media = "application/x-ndjson" if fmt == "jsonl" else "text/csv"
    return 200, Stream(export(call.context.store, actor.tenant, filters, fmt), media)


async def _own_trace(call: Call) -> WholeTrace:
    """The caller's own trace; any other (another actor's, another tenant's, none) is the same 404."""
    actor = call.actor
    trace_id = call.params["trace_id"]
    found = await anyio.to_thread.run_sync(get_trace, call.context.store, actor.tenant, trace_id)
    if found is None or found.trace.actor != actor.principal or found.trace.endpoint != "retrieve":
        raise NotFound(UNKNOWN_TRACE)
    call.trace.record(ReportedOn(about=trace_id))
    return found


@requires()
async def report_usage(call: Call) -> tuple[int, UsageResult]:
    """POST /v1/traces/{trace_id}/usage {"used": [ids]}: which returned items the agent used."""
    found = await _own_trace(call)
    used = validated(UsageRequest, await call.json()).used
    returned = found.lineage
    assert isinstance(returned, RetrieveCall)  # _own_trace: a retrieve's
    packed = set(returned.packed or ())
    kept = sorted({i for i in used if i in packed})
    ignored = len(set(used)) - len(kept)
    about = sorted(e for e, items in (returned.named_entities or {}).items() if set(items) & set(kept))
    call.trace.record(UsageReported(used=tuple(kept), used_about=tuple(about) or None, not_returned_by_that_call=ignored))
    return 200, UsageResult(trace_id=found.trace.trace_id, recorded=kept, ignored=ignored)


@requires()
async def report_feedback(call: Call) -> tuple[int, FeedbackResult]:
    """POST /v1/traces/{trace_id}/feedback {"rating": 1..5, "comment": "..."}. The comment is kept as a
    hash and a length only: it is free text and may hold anything."""
    found = await _own_trace(call)
    feedback = validated(FeedbackRequest, await call.json())
    rating, comment = feedback.rating, feedback.comment
    call.trace.record(FeedbackGiven(rating=rating, comment=call.trace.fingerprint(comment) if comment else None))
    return 200, FeedbackResult(trace_id=found.trace.trace_id, rating=rating)


@requires("auditor")
async def verify_chain(call: Call) -> tuple[int, VerifyReport]:
    """GET /v1/audit/verify: recompute the tenant's hash chain and name the first broken link."""
    actor = call.actor
    report = await anyio.to_thread.run_sync(call.context.audit.verify, actor.tenant)
    call.trace.record(report.record())
    return 200, report


# The operations this module serves (gateway/http/operation.py).
OPERATIONS = (
    AUDIT.operation(
        "GET /v1/audit/verify: Check the tenant's hash chain",
        serving("audit_verify", verify_chain),
        json_answer("Where the chain breaks, if it does", ref(VerifyReport)),
    ),
    AUDIT.operation(
        "GET /v1/audit/traces: The tenant's traces, newest first",
        serving("audit_list", list_route_handler),
        json_answer("One page", ref(TraceList)),
        errors={400: "an unknown parameter, a bad instant, cursor or limit"},
        parameters=(
            *REVIEW_FILTERS,
            CURSOR_PARAMETER,
            query_parameter("limit", "Page size", {"type": "string", "pattern": r"^\d+$", "default": "50"}),
        ),
    ),
    AUDIT.operation(
        "GET /v1/audit/traces/{trace_id}: One trace, whole",
        serving("audit_trace", one_trace),
        json_answer("The trace with the usage and feedback its agent reported", ref(Trace)),
        errors={404: "no such trace in this tenant"},
        parameters=(TRACE_ID,),
    ),
    AUDIT.operation(
        "GET /v1/audit/traces/{trace_id}/proof: One trace with its inclusion proof and the signed checkpoint it is under",
        serving("audit_proof", trace_proof),
        json_answer("The proof, for `gateway audit verify-proof`", ref(TraceProof)),
        errors={
            404: "no such trace in this tenant",
            409: "no signed checkpoint with a Merkle root covers the trace yet, or this gateway signs none",
        },
        parameters=(TRACE_ID,),
    ),
    AUDIT.operation(
        "GET /v1/audit/export: Every matching trace, streamed",
        serving("audit_export", export_traces),
        {
            "description": "One trace per line (jsonl) or row (csv), oldest first",
            "headers": {"x-trace-id": {**TRACE_ID_HEADER, "required": True}},
            "content": {NDJSON: {"schema": STRING}, "text/csv": {"schema": STRING}},
        },
        errors={400: "an unknown parameter, a bad instant or format"},
        parameters=(*REVIEW_FILTERS, query_parameter("format", "jsonl (default) or csv", {"enum": ["jsonl", "csv"]})),
    ),
    AUDIT.operation(
        "POST /v1/traces/{trace_id}/usage: Report which returned items the agent used",
        serving("usage", report_usage),
        json_answer("What was recorded", ref(UsageResult)),
        errors={400: 'malformed JSON or not `{"used": [ids]}`', 404: "not a retrieve trace of this actor"},
        parameters=(TRACE_ID,),
        body=json_body(ref(UsageRequest)),
        description="Only the actor of that retrieve call may report.",
    ),
    AUDIT.operation(
        "POST /v1/traces/{trace_id}/feedback: Rate a call",
        serving("feedback", report_feedback),
        json_answer("What was recorded", ref(FeedbackResult)),
        errors={
            400: "malformed JSON, a rating not 1 to 5, a comment over 2,000 characters",
            404: "not a retrieve trace of this actor",
        },
        parameters=(TRACE_ID,),
        body=json_body(ref(FeedbackRequest)),
        description="Only the actor of that retrieve call may report.",
    ),
)
