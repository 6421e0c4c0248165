"""Reading the audit trail, one tenant at a time: filtered lists with cursors, one trace whole with
what the agent later reported about it, and streaming export.

Every read is scoped to the reader's tenant chain; a trace of another tenant is indistinguishable
from one that does not exist.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import ColumnElement, false, or_, select
from sqlalchemy.engine import Engine

from api.audit import FeedbackRef, Trace, TraceList, TraceSummary
from audit.chain import COLUMNS, StoredTrace, audit_facet, audit_item, audit_trace, chain_of, derived, hashed_content, selection
from audit.record import FeedbackCall, Lineage, UsageCall, read_lineage
from core.audit_facts import RETRIEVAL, SUBJECT, SUBJECT_STAGES, facts_of, outcome
from core.csv_cells import csv_line

MAX_PAGE = 200
EXPORT_CHUNK_BYTES = 64 * 1024  # one response chunk per ~64 KiB, not per row
# What an export holds of each row, in its order (its CSV header).
EXPORT_COLUMNS = selection(
    "trace_id",
    "created_at",
    "tenant",
    "actor",
    "endpoint",
    "status_code",
    "decision",
    "task_type",
    "policy_engine",
    "policy_revision",
    "error_code",
    "seq",
    "row_hash",
    "lineage",
)


# The contract's name of a column where it is not the column's own (api.audit.TraceSummary's `task`).
WIRE_NAMES = {"task": "task_type"}


def answered(model: type[BaseModel]) -> dict[str, str]:
    """The fields of one of the contract's answers that are columns of the row, each with its column:
    a named selection of StoredTrace's columns, derived from the contract instead of restated."""
    named = {name: WIRE_NAMES.get(name, name) for name in model.model_fields}
    return {name: column for name, column in named.items() if column in COLUMNS}


LISTED = answered(TraceSummary)  # the review list shows columns only
if LISTED.keys() != TraceSummary.model_fields.keys():
    raise ValueError("api.audit.TraceSummary: every field of the review list is a column of the audit row")
SHOWN = answered(Trace)  # one trace whole: those and more; what the agent reported later is read from its own rows


@dataclass(frozen=True, slots=True)
class Filters:
    actor: str | None = None
    task: str | None = None
    decision: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    item: str | None = None
    # The overview's links: a retrieval call's outcome (core.audit_facts.OUTCOMES), the policy
    # revision in force, and the facets: a denial reason, a sensitivity returned, a type masked or
    # revealed ("any": some type), an entity (any subject stage).
    outcome: str | None = None
    revision: str | None = None
    reason: str | None = None
    returned: str | None = None
    masked: str | None = None
    revealed: str | None = None
    entity: str | None = None

    def facets(self) -> list[tuple[str, str | None]]:
        """(facet, value) pairs the filters ask for; a value of None: any value of the facet."""
        asked: list[tuple[str, str | None]] = []
        for facet, value in (("reason", self.reason), ("returned", self.returned), ("masked", self.masked)):
            if value:
                asked.append((facet, value))
        if self.revealed:
            asked.append(("revealed", None if self.revealed == "any" else self.revealed))
        return asked

    def texts(self) -> tuple[str | None, ...]:
        return (
            self.actor,
            self.task,
            self.decision,
            self.item,
            self.outcome,
            self.revision,
            self.reason,
            self.returned,
            self.masked,
            self.revealed,
            self.entity,
        )


def _unheld(value: str) -> bool:
    """A value no row holds: the NUL character, which nothing written to the trail contains and
    PostgreSQL refuses to compare (an error, where SQLite finds nothing). Matches nothing on both."""
    return "\x00" in value


def _where(tenant: str, filters: Filters) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = [audit_trace.c.chain == chain_of(tenant)]
    if any(value and _unheld(value) for value in filters.texts()):
        return [*conditions, false()]
    if filters.actor:
        conditions.append(audit_trace.c.actor == filters.actor)
    if filters.task:
        conditions.append(audit_trace.c.task_type == filters.task)
    if filters.decision:
        conditions.append(audit_trace.c.decision == filters.decision)
    if filters.since:
        conditions.append(audit_trace.c.created_at >= filters.since)
    if filters.until:
        conditions.append(audit_trace.c.created_at < filters.until)
    if filters.outcome:
        conditions += _outcome_where(filters.outcome)
    if filters.revision:
        conditions.append(audit_trace.c.policy_revision == filters.revision)
    for facet, value in filters.facets():
        found = select(audit_facet.c.trace_pk).where(audit_facet.c.facet == facet)
        conditions.append(audit_trace.c.pk.in_(found.where(audit_facet.c.value == value) if value is not None else found))
    if filters.entity:
        conditions.append(
            audit_trace.c.pk.in_(
                select(audit_facet.c.trace_pk).where(
                    audit_facet.c.facet.in_([SUBJECT + s for s in SUBJECT_STAGES]), audit_facet.c.value == filters.entity
                )
            )
        )
    if filters.item:
        # Driven from the item's index: the calls that returned it, not a scan of the chain.
        conditions.append(audit_trace.c.pk.in_(select(audit_item.c.trace_pk).where(audit_item.c.item_id == filters.item)))
    return conditions


def _outcome_where(result: str) -> list[ColumnElement[bool]]:
    """The columns of a retrieval call with that outcome (a superset: `_returned` checks each row
    with core.audit_facts.outcome itself)."""
    retrieval = audit_trace.c.endpoint == RETRIEVAL
    if result == "rate_limited":
        return [retrieval, audit_trace.c.status_code == 429]
    if result == "deny":
        return [retrieval, audit_trace.c.decision == "deny"]
    if result == "allow":
        return [retrieval, audit_trace.c.status_code >= 200, audit_trace.c.status_code < 300]
    if result == "error":
        return [retrieval, or_(audit_trace.c.status_code >= 500, audit_trace.c.decision == "error")]
    if result == "invalid":
        return [retrieval, audit_trace.c.status_code >= 300, audit_trace.c.status_code < 500]
    return [false()]


def summary(row: StoredTrace) -> TraceSummary:
    """The row as the review list shows it."""
    return TraceSummary(**{name: getattr(row, column) for name, column in LISTED.items()})


def list_traces(engine: Engine, tenant: str, filters: Filters, after: int | None, limit: int) -> TraceList:
    """Newest first; `after` is the chain position (seq) of the last row of the previous page, and
    the page's cursor (`c_<seq>`) names its own last row when more follow. Paged by seq, the
    (chain, seq) index serves the order: no page sorts the whole chain."""
    conditions = _where(tenant, filters)
    if after is not None:
        conditions.append(audit_trace.c.seq < after)
    statement = select(audit_trace).where(*conditions).order_by(audit_trace.c.seq.desc()).limit(min(limit, MAX_PAGE) + 1)
    with engine.connect() as conn:
        rows = [StoredTrace.of(r._mapping) for r in conn.execute(statement)]
    page = rows[: min(limit, MAX_PAGE)]
    more = len(rows) > len(page)
    return TraceList(
        traces=[summary(row) for row in page if _returned(row, filters)],
        cursor=f"c_{page[-1].seq}" if more and page else None,
    )


def _returned(row: StoredTrace, filters: Filters) -> bool:
    """The item filter, checked again against the row's own (hashed) lineage: an index row added by
    someone who can write the database never makes a call look as if it returned the item."""
    if filters.item is not None and filters.item not in derived(row.lineage).packed:
        return False
    if filters.outcome and outcome(row.endpoint, row.status_code, row.decision) != filters.outcome:
        return False
    asked = filters.facets()
    if not asked and not filters.entity:
        return True
    facets = facts_of(row.as_dict()).facets
    for facet, value in asked:
        if not any(f == facet and (value is None or v == value) for f, v in facets):
            return False
    return not filters.entity or any(f.startswith(SUBJECT) and v == filters.entity for f, v in facets)


@dataclass(frozen=True, slots=True)
class WholeTrace:
    """One trace whole: the contract's Trace (api.audit), with its lineage read once, for what the
    trace page and the usage report read of it (stages, sources, reasons, what it returned)."""

    trace: Trace
    lineage: Lineage


def get_trace(engine: Engine, tenant: str, trace_id: str) -> WholeTrace | None:
    """One trace whole, with the usage and feedback the agent reported later (their own rows)."""
    if _unheld(trace_id):
        return None
    with engine.connect() as conn:
        row = conn.execute(
            select(audit_trace).where(audit_trace.c.trace_id == trace_id, audit_trace.c.chain == chain_of(tenant))
        ).first()
        if row is None:
            return None
        notes = [
            StoredTrace.of(n._mapping)
            for n in conn.execute(
                select(audit_trace)
                .where(audit_trace.c.about == trace_id, audit_trace.c.chain == chain_of(tenant), audit_trace.c.status_code == 200)
                .order_by(audit_trace.c.pk)
            )
        ]
    m = StoredTrace.of(row._mapping)
    notes_read = [(n, read_lineage(n.endpoint, n.lineage)) for n in notes]
    used = sorted({i for _, lineage in notes_read if isinstance(lineage, UsageCall) for i in lineage.used or ()})
    feedback = [
        FeedbackRef(
            trace_id=n.trace_id,
            created_at=n.created_at,
            **(lineage.feedback.model_dump(mode="json") if lineage.feedback else {}),
        )
        for n, lineage in notes_read
        if isinstance(lineage, FeedbackCall)
    ]
    trace = Trace(**{name: getattr(m, column) for name, column in SHOWN.items()}, used=used, feedback=feedback)
    return WholeTrace(trace, read_lineage(m.endpoint, m.lineage))


def export(engine: Engine, tenant: str, filters: Filters, fmt: str) -> Iterator[bytes]:
    """Every matching row, oldest first (chain order, which the (chain, seq) index serves without a
    sort), streamed from a server-side cursor in bounded memory, in chunks of about 64 KiB."""
    statement = select(audit_trace).where(*_where(tenant, filters)).order_by(audit_trace.c.seq)
    chunk: list[bytes] = [_csv_line(EXPORT_COLUMNS)] if fmt == "csv" else []
    size = 0
    with engine.connect() as conn:
        result = conn.execution_options(stream_results=True, yield_per=500).execute(statement)
        try:
            for found in result:
                row = StoredTrace.of(found._mapping)
                if not _returned(row, filters):
                    continue
                record = hashed_content(row, EXPORT_COLUMNS)  # the instant as the hash writes it
                if fmt == "csv":
                    line = _csv_line(tuple(json.dumps(v, sort_keys=True) if c == "lineage" else v for c, v in record.items()))
                else:
                    line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
                chunk.append(line)
                size += len(line)
                if size >= EXPORT_CHUNK_BYTES:
                    yield b"".join(chunk)
                    chunk, size = [], 0
        finally:
            result.close()
    if chunk:
        yield b"".join(chunk)


def _csv_line(values: tuple[Any, ...]) -> bytes:
    """One row, text cells neutralised against formulas (core.csv_cells); status_code and seq are
    integers, written as numbers."""
    return csv_line(values).encode()
