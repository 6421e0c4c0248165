"""The compliance pages: the overview of a period (charts drawn on the server, every figure a link to
the traces behind it) and the report on one data subject. Session-signed-in auditors, own tenant
only, like the rest of the audit page (views.py). See docs/audit.md."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

import anyio.to_thread
from starlette.responses import Response

from audit.record import AuditListed
from audit.review import Bar, Figures, report_csv, subject_report
from core.audit_facts import OUTCOMES
from core.errors import BadRequest
from core.instants import parse_rfc3339, utc_now
from core.tables import SENSITIVITIES
from gateway.http.audit_pages.charts import Mark, Row, legend, ranked, timeline
from gateway.http.audit_pages.render import NOT_SIGNED_IN, SECURITY_HEADERS, page, page_operation, sign_in_form
from gateway.http.audit_pages.views import session_actor
from gateway.http.operation import CURSOR, ENTITY_ID, query_parameter
from gateway.http.operation import page as page_answer
from gateway.http.routes.compliance import (
    PERIOD_PARAMETERS,
    PERIODS,
    SUBJECT_CSV,
    check_names,
    overview_of,
    page_cursor,
    period_of,
    with_csv,
)
from gateway.http.traced import Call

REPORT_PAGE = 100


def by_level(counts: dict[str, int]) -> list[tuple[str, int]]:
    """Sensitivities from the lowest level to the highest, any other name after them."""
    return sorted(
        counts.items(), key=lambda kv: (SENSITIVITIES.index(kv[0]) if kv[0] in SENSITIVITIES else len(SENSITIVITIES), kv[0])
    )


def traces_link(**filters: str | None) -> str:
    """The trace list filtered as given (the audit page's own filters)."""
    return "/audit?" + urlencode({k: v for k, v in filters.items() if v})


def _period_links(since: str, until: str) -> dict[str, str]:
    return {"since": since, "until": until}


def charts(figures: Figures) -> dict[str, Any]:
    """The overview's charts and tables, each figure with the link to its traces."""
    window = _period_links(figures.period.since, figures.period.until)
    bars = figures.timeline

    def bar_link(bar: Bar, outcome: str) -> str:
        return traces_link(outcome=outcome, since=bar.start, until=bar.end)

    marks = []
    for revision in figures.revisions[1:]:  # the first was in force when the period began
        first = parse_rfc3339(revision.first_seen)
        at = next((i for i, bar in enumerate(bars) if parse_rfc3339(bar.start) <= first < parse_rfc3339(bar.end)), None)
        if at is not None:
            marks.append(Mark(at, revision.revision or "none"))
    denials, returned, masking = figures.denials, figures.returned, figures.masking
    return {
        "timeline": timeline("calls-chart", bars, OUTCOMES, bar_link, marks),
        "legend": legend(OUTCOMES, figures.calls.by_outcome, lambda o: traces_link(outcome=o, **window)),
        "by_reason": ranked(
            "denials-by-reason",
            "Denials by reason",
            [Row(r.reason, r.calls, traces_link(outcome="deny", reason=r.reason, **window)) for r in denials.by_reason],
        ),
        "by_task": ranked(
            "denials-by-task",
            "Denials by task type",
            [Row(t.task or "(none)", t.calls, traces_link(outcome="deny", task=t.task, **window)) for t in denials.by_task],
        ),
        "by_sensitivity": ranked(
            "returned-by-sensitivity",
            "Items returned by sensitivity",
            [Row(s, n, traces_link(returned=s, **window)) for s, n in by_level(returned.by_sensitivity)],
        ),
        "restricted_by_actor": ranked(
            "restricted-by-actor",
            "Restricted items returned, by actor",
            [
                Row(a.actor or "(none)", a.items, traces_link(actor=a.actor, returned="restricted", **window))
                for a in returned.restricted_by_actor
            ],
        ),
        "placeholders": ranked(
            "placeholders-by-type",
            "Placeholders issued by type",
            [Row(t, n, traces_link(masked=t, **window)) for t, n in masking.placeholders_by_type.items()],
        ),
        "reveals_by_type": ranked(
            "reveals-by-type",
            "Reveals by type",
            [Row(r.type, r.calls, traces_link(revealed=r.type, **window)) for r in masking.reveals_by_type],
        ),
        "reveals_by_actor": ranked(
            "reveals-by-actor",
            "Reveals by principal",
            [
                Row(r.actor or "(none)", r.calls, traces_link(actor=r.actor, revealed="any", **window))
                for r in masking.reveals_by_actor
            ],
        ),
        "revision_links": {r.revision: traces_link(revision=r.revision, **window) for r in figures.revisions if r.revision},
        "window": window,
    }


async def overview_page(call: Call) -> tuple[int, Response]:
    """GET /audit/overview: the period's figures as charts, with the chain's state at the top."""
    actor = await session_actor(call)
    if actor is None:
        return sign_in_form(401, "Sign in to read the overview.")
    params = call.request.query_params
    chosen = {name: params.get(name, "") for name in ("period", "since", "until")}
    try:
        check_names(params, frozenset(chosen))
        since, until = period_of(params, utc_now())
    except BadRequest as exc:
        call.trace.error_code = exc.code
        return page(exc.status, "message.html", actor, title="Overview", message=exc.message)
    found = await anyio.to_thread.run_sync(overview_of, call.context, actor.tenant, since, until)
    call.trace.record(AuditListed(listed=found.figures.calls.total))
    return page(
        200,
        "overview.html",
        actor,
        figures=found.figures,
        chain=found.chain,
        charts=charts(found.figures),
        chosen=chosen,
        periods=list(PERIODS),
    )


async def subject_page(call: Call) -> tuple[int, Response]:
    """GET /audit/subjects/{entity_id} (or /audit/subjects?entity=...): the subject report as a
    page, or ?format=csv for every call of it."""
    actor = await session_actor(call)
    if actor is None:
        return sign_in_form(401, "Sign in to read a subject report.")
    params = call.request.query_params
    entity_id = call.request.path_params.get("entity_id") or params.get("entity", "")
    check_names(params, frozenset({"cursor", "format"} | ({"entity"} if "entity_id" not in call.request.path_params else set())))
    if not entity_id:
        return page(200, "subject.html", actor, report=None, entity_id="", older=None, csv=None)
    fmt = params.get("format", "html")
    if fmt not in ("html", "csv"):
        raise BadRequest("format: expected html or csv")
    if fmt == "csv":
        call.trace.record(SUBJECT_CSV)
        body = b"".join(await anyio.to_thread.run_sync(lambda: list(report_csv(call.context.store, actor.tenant, entity_id))))
        headers = {**SECURITY_HEADERS, "content-disposition": 'attachment; filename="subject-report.csv"'}
        return 200, Response(body, media_type="text/csv", headers=headers)
    after = page_cursor(params.get("cursor"))
    report = await anyio.to_thread.run_sync(subject_report, call.context.store, actor.tenant, entity_id, after, REPORT_PAGE)
    call.trace.record(AuditListed(listed=len(report.calls)))
    base = "/audit/subjects/" + quote(entity_id, safe="")
    older = base + "?" + urlencode({"cursor": report.cursor}) if report.cursor else None
    return page(
        200,
        "subject.html",
        actor,
        report=report,
        entity_id=entity_id,
        older=older,
        csv=base + "?format=csv",
        traces=traces_link(entity=entity_id),
    )


# The operations this module serves (gateway/http/operation.py).
OPERATIONS = (
    page_operation(
        "GET /audit/overview: The compliance overview of a period as a page",
        "audit_page_overview",
        overview_page,
        page_answer("Charts of the period, each figure a link to its traces"),
        {400: "A bad period, shown on the page", 401: NOT_SIGNED_IN},
        parameters=PERIOD_PARAMETERS,
    ),
    page_operation(
        "GET /audit/subjects: Look up a data subject: the form, or the report of `entity`",
        "audit_page_subjects",
        subject_page,
        page_answer("The form or the report"),
        {400: "A bad cursor or an unknown parameter, shown on the page", 401: NOT_SIGNED_IN},
        parameters=(query_parameter("entity", "The entity id to report on"), CURSOR),
    ),
    page_operation(
        "GET /audit/subjects/{entity_id}: The report on one data subject as a page (or `format=csv`)",
        "audit_page_subject",
        subject_page,
        with_csv(page_answer("The calls about the subject, or with `format=csv` all of them as CSV")),
        {400: "A bad cursor or format, or an unknown parameter, shown on the page", 401: NOT_SIGNED_IN},
        parameters=(ENTITY_ID, CURSOR, query_parameter("format", "html (default) or csv", {"enum": ["html", "csv"]})),
    ),
)
