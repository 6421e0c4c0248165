"""The compliance views over HTTP: the overview of a period and the report on one data subject.
Auditor role, the caller's tenant only, like the rest of the review API (routes/audit.py)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import anyio.to_thread
from starlette.datastructures import QueryParams

from api.audit import OverviewReport, SubjectReport
from audit.record import AuditExported, AuditListed
from audit.review import MAX_SUBJECT_PAGE, Overview, period_overview, report_csv, subject_report
from core.errors import BadRequest
from core.instants import parse_rfc3339, utc_now
from core.validation import ascii_int
from gateway.context import GatewayContext
from gateway.http.operation import (
    AUDIT,
    CURSOR,
    ENTITY_ID,
    STRING,
    json_answer,
    query_parameter,
    ref,
)
from gateway.http.traced import Call, Stream, requires, serving

PERIODS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}
DEFAULT_PERIOD = "7d"
MAX_PERIOD = timedelta(days=400)
PAGE_CURSOR = re.compile(r"c_([0-9]{1,18})", re.ASCII)
SUBJECT_CSV = AuditExported(format="csv", report="subject")  # the record of a subject report as CSV, from the API or a page
PERIOD_PARAMETERS = (
    query_parameter("period", "The last 24 h, 7 d (default) or 30 d", {"enum": list(PERIODS)}),
    query_parameter("since", "The period's start, an RFC 3339 instant with its offset (instead of `period`)"),
    query_parameter("until", "The period's end (default: now), with `since`"),
)


def _whole_second(now: datetime) -> datetime:
    """Now rounded up to the whole second: a period ending now reads cleanly and still holds this
    second's rows."""
    return now.replace(microsecond=0) + (timedelta(seconds=1) if now.microsecond else timedelta())


def period_of(params: QueryParams, now: datetime) -> tuple[datetime, datetime]:
    """[since, until) from `period`, or from `since` (and `until`); never both."""
    period = params.get("period") or None
    given = {name: params[name] for name in ("since", "until") if params.get(name)}
    if period is not None and given:
        raise BadRequest(f"{sorted(given)[0]}: give a period or since/until, not both")
    if not given:
        chosen = period or DEFAULT_PERIOD
        if chosen not in PERIODS:
            raise BadRequest(f"period: expected one of {', '.join(PERIODS)}")
        until = _whole_second(now)
        return until - PERIODS[chosen], until
    if "since" not in given:
        raise BadRequest("since: until needs a since")
    instants = {}
    for name, value in given.items():
        try:
            instants[name] = parse_rfc3339(value)
        except ValueError as exc:
            raise BadRequest(f"{name}: expected an instant with its offset, such as 2026-11-30T00:00:00Z") from exc
    since, until = instants["since"], instants.get("until", _whole_second(now))
    if until <= since:
        raise BadRequest("until: must be after since")
    if until - since > MAX_PERIOD:
        raise BadRequest(f"since: a period is at most {MAX_PERIOD.days} days")
    return since, until


def check_names(params: QueryParams, allowed: frozenset[str]) -> None:
    names = sorted(set(params) - allowed)
    if names:
        raise BadRequest(f"{names[0]}: unknown query parameter")


def overview_of(context: GatewayContext, tenant: str, since: datetime, until: datetime) -> Overview:
    """The figures and the chain's state (with what the signer knows of it), read in one worker thread."""
    checkpointer = context.audit.checkpointer
    return period_overview(context.store, tenant, since, until, checkpointer.state(tenant) if checkpointer is not None else None)


def page_cursor(value: str | None) -> int | None:
    if not value:
        return None
    match = PAGE_CURSOR.fullmatch(value)
    if match is None:
        raise BadRequest("cursor: not a cursor this report issued")
    return int(match.group(1))


def with_csv(answer: dict[str, Any]) -> dict[str, Any]:
    return {**answer, "content": {**answer["content"], "text/csv": {"schema": STRING}}}


@requires("auditor")
async def overview(call: Call) -> tuple[int, OverviewReport]:
    """GET /v1/audit/overview: the period's figures (audit.review.overview) and the chain's state."""
    params = call.request.query_params
    check_names(params, frozenset({"period", "since", "until"}))
    since, until = period_of(params, utc_now())
    found = await anyio.to_thread.run_sync(overview_of, call.context, call.actor.tenant, since, until)
    call.trace.record(AuditListed(listed=found.figures.calls.total))
    return 200, found.report()


@requires("auditor")
async def subject(call: Call) -> tuple[int, SubjectReport | Stream]:
    """GET /v1/audit/subjects/{entity_id}: every call about the entity (and those merged with it)."""
    params = call.request.query_params
    check_names(params, frozenset({"cursor", "limit", "format"}))
    entity_id = call.request.path_params["entity_id"]
    fmt = params.get("format", "json")
    if fmt not in ("json", "csv"):
        raise BadRequest("format: expected json or csv")
    if fmt == "csv":
        call.trace.record(SUBJECT_CSV)
        return 200, Stream(report_csv(call.context.store, call.actor.tenant, entity_id), "text/csv")
    after = page_cursor(params.get("cursor"))
    limit = ascii_int("limit", params.get("limit", "100"), 1, MAX_SUBJECT_PAGE)
    found = await anyio.to_thread.run_sync(subject_report, call.context.store, call.actor.tenant, entity_id, after, limit)
    call.trace.record(AuditListed(listed=len(found.calls)))
    return 200, found


# The operations this module serves (gateway/http/operation.py).
OPERATIONS = (
    AUDIT.operation(
        "GET /v1/audit/overview: The compliance overview of a period",
        serving("audit_overview", overview),
        json_answer("Counts by outcome, reason, sensitivity, masking and revision; the chain's state", ref(OverviewReport)),
        errors={400: "an unknown parameter, a bad period or instant"},
        parameters=PERIOD_PARAMETERS,
    ),
    AUDIT.operation(
        "GET /v1/audit/subjects/{entity_id}: Every call about one data subject",
        serving("audit_subject", subject),
        with_csv(json_answer("The calls, newest first, with the stage each reached", ref(SubjectReport))),
        errors={400: "an unknown parameter, a bad cursor, limit or format"},
        parameters=(
            ENTITY_ID,
            CURSOR,
            query_parameter("limit", "Page size (at most 500)", {"type": "string", "pattern": r"^\d+$", "default": "100"}),
            query_parameter("format", "json (default) or csv (every page)", {"enum": ["json", "csv"]}),
        ),
    ),
)
