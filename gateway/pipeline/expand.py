"""Expand: the next page of a result, continued from a cursor stored in the database.

The policy decides again (same task, kinds, instant and subjects as the call that issued the
cursor), every entry is read again inside the new constraints and verified again, so an item
forbidden since is never returned; it is dropped from the cursor for good.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

import anyio.to_thread
from sqlalchemy.engine import Engine

from api.retrieve import RetrieveResponse
from audit.record import DepthRecord, Expanded, FallbackReason, SourceRecord, TraceBuilder, dropped
from connectors.base import ExactConnector
from core import work
from core.actor import Actor
from core.errors import BadRequest, Conflict, ConnectorError
from core.records import Fused, RecallQuery, Record, SkipReason, SourceResult
from core.request import RetrieveRequest, Task
from gateway.admission import DOOR_COURTESY_MAX_S, give_way
from gateway.pipeline.budget import Packed
from gateway.pipeline.cursors import Cursor, advance, load
from gateway.pipeline.ranking import Ranked
from gateway.pipeline.recall import SOURCES
from gateway.pipeline.respond import respond
from gateway.pipeline.returned import note_returned
from gateway.pipeline.stages import StageTimer
from gateway.policy.decide import Constraints
from gateway.policy.verify import Verdict
from gateway.privacy.mask import Masking
from gateway.settings import Settings
from gateway.writes.documents import join_section

PAGE_ENTRIES = 100  # entries read per expand; what fits the budget is returned
ATTEMPTS = 3


class ExactSource(Protocol):
    @property
    def exact(self) -> ExactConnector: ...


class Stages(Protocol):
    """What an expand needs of the pipeline (gateway.pipeline.pipeline.Pipeline, which passes itself):
    its store, settings and exact connector, and the stages it runs again. Named here, so this module
    never imports the pipeline that imports it."""

    @property
    def settings(self) -> Settings: ...
    @property
    def store(self) -> Engine: ...
    @property
    def connectors(self) -> ExactSource: ...

    def admit(self, request: RetrieveRequest, trace: TraceBuilder) -> None: ...
    async def decide(
        self, actor: Actor, request: RetrieveRequest, trace: TraceBuilder, timer: StageTimer
    ) -> tuple[Constraints, str]: ...
    async def verify(
        self, actor: Actor, task: Task, constraints: Constraints, records: list[Record], timer: StageTimer
    ) -> Verdict: ...
    async def mask(
        self, constraints: Constraints, entries: list[Fused], pieces: tuple[Record, ...], trace: TraceBuilder, timer: StageTimer
    ) -> tuple[Masking, list[Fused]]: ...
    async def mask_response(
        self, body: RetrieveResponse, constraints: Constraints, masking: Masking, trace: TraceBuilder, timer: StageTimer
    ) -> RetrieveResponse: ...
    def pack(self, ranked: list[Ranked], limit_bytes: int) -> Packed: ...


async def expand(pipeline: Stages, actor: Actor, request: RetrieveRequest, trace: TraceBuilder) -> RetrieveResponse:
    pipeline.admit(request, trace)
    if request.synthesize:
        raise BadRequest("synthesize: an expand returns the next page of context; synthesise from the first call")
    if not request.cursor:
        raise BadRequest("cursor: mode expand needs the cursor of an earlier call")
    token, settings = request.cursor, pipeline.settings
    for _ in range(ATTEMPTS):
        await give_way(DOOR_COURTESY_MAX_S)  # before it starts, then between its stages (gateway/admission.py)
        cursor = await anyio.to_thread.run_sync(work.timed(load), pipeline.store, actor, token, settings.cursor_idle_seconds)
        page = await _page(pipeline, actor, request, cursor, trace)
        if page is not None:
            return page
    raise Conflict("cursor: another expand of this cursor is in progress; try again")


async def _page(
    pipeline: Stages, actor: Actor, request: RetrieveRequest, cursor: Cursor, trace: TraceBuilder
) -> RetrieveResponse | None:
    timer = StageTimer()
    stored = cursor.request
    if request.task.model_dump() != stored["task"]:
        raise BadRequest("task: an expand continues the task of the call that issued the cursor")
    # Decided again on the first call's shape: what it was allowed (history included) carries over.
    original = RetrieveRequest.model_validate(
        {
            "task": stored["task"],
            "kinds": stored["kinds"],
            "as_of": stored["as_of"],
            "graph": stored["graph"],
            "include_historical": stored.get("include_historical", False),
            "mode": "expand",
            "cursor": request.cursor,
        }
    )
    constraints, revision = await pipeline.decide(actor, original, trace, timer)
    constraints = constraints.with_subjects(tuple(stored["subjects"]))
    await give_way()  # between its stages, as a retrieve does (gateway/admission/courtesy.py)

    entries = cursor.remaining[:PAGE_ENTRIES]
    wanted = tuple(dict.fromkeys([e["id"] for e in entries] + [p for e in entries for p in e["pieces"]]))
    with timer.stage(
        "retrieval exact", attributes={"gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": "exact"}
    ) as span:
        try:
            result = await pipeline.connectors.exact.search(constraints.items, RecallQuery(ids=wanted, limit=max(len(wanted), 1)))
        except ConnectorError as exc:
            result = SourceResult("exact", "error", detail=exc.message)
        span.set_attribute("gateway.source.status", result.status)
    records = {c.record.id: c.record for c in result.candidates}
    verdict = await pipeline.verify(actor, request.task, constraints, list(records.values()), timer)
    await give_way()
    page = [ranked for e in entries if (ranked := _entry(e, records, verdict.allowed_ids)) is not None]
    masking = None
    if constraints.disclosure.mask and page:
        allowed_pieces = tuple(r for r in records.values() if r.id in verdict.allowed_ids)
        masking, masked = await pipeline.mask(constraints, [r.entry for r in page], allowed_pieces, trace, timer)
        page = [replace(r, entry=entry) for r, entry in zip(page, masked)]
    limit = request.budget.bytes if request.budget else stored["budget_bytes"] or pipeline.settings.default_budget_bytes
    with timer.stage("rank_and_pack", attributes={"gateway.budget.limit_bytes": limit}):
        packed = pipeline.pack(page, limit)
    packed_ids = [r.record.id for r in packed.items]
    gone = [e["id"] for e in entries if e["id"] not in {r.record.id for r in page}]
    # A page that placed nothing: what it left out is larger than the whole page budget, and would
    # be left out of every page after it (a client following the cursor would loop for ever). Those
    # entries are spent with the page, named in its trace as dropped for budget.
    oversized = set(packed.dropped_ids) if not packed_ids else set()
    remaining = [e for e in cursor.remaining if e["id"] not in set(packed_ids) | set(gone) | oversized]
    if result.status == "error":  # nothing was read: keep every entry for a later page
        remaining, gone = list(cursor.remaining), []
    await give_way()
    if not await anyio.to_thread.run_sync(work.timed(advance), pipeline.store, cursor, packed_ids, remaining):
        return None
    sources = {
        name: SourceRecord(
            status="skipped", detail=SkipReason.EXPAND_CONTINUES_CURSOR.value, skip=SkipReason.EXPAND_CONTINUES_CURSOR
        )
        for name in SOURCES
    }
    sources["exact"] = SourceRecord(status=result.status, count=len(page), ms=round(result.ms, 3), detail=result.detail or None)
    timings = {k: v for k, v in timer.finish().items() if k in ("queue_ms", "decide_ms", "verify_ms", "total_ms")}
    depth = DepthRecord(requested=request.depth, effective="fast", fallback_reason=FallbackReason.EXPAND_READS_BY_ID)
    read = tuple(e["id"] for e in entries)
    trace.record(
        Expanded(
            retrieved={"expand": list(read)},
            dropped_by_policy=dropped(verdict.denied),
            dropped_since_issued=tuple(gone),
            dropped_for_budget=tuple(packed.dropped_ids),
            packed=tuple(packed_ids),
            sources=sources,
            timings=timings,
        )
    )
    body = respond(trace.trace_id, "expand", revision, packed, sources, timings, depth, request.cursor if remaining else None)
    if masking is not None:  # the page's other strings, with its text's placeholders
        body = await pipeline.mask_response(body, constraints, masking, trace, timer)
    note_returned(trace, records.values(), packed, masking, body)
    return body


def _entry(entry: dict[str, Any], records: dict[str, Record], allowed: frozenset[str]) -> Ranked | None:
    """The entry as it reads now, or None when it is gone or no longer allowed."""
    record = records.get(entry["id"])
    if record is None or record.id not in allowed:
        return None
    pieces = tuple(p for p in entry["pieces"] if p in records and p in allowed)
    if pieces:
        text = join_section([records[p].text for p in sorted(pieces)])
        record = replace(record, text=text)
    return Ranked(Fused(record, 0.0, tuple(entry["found_by"]), pieces), entry["label"], entry["current"], 0)
