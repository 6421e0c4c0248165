"""Expand: the next page of a result, continued from a cursor stored in the database.

The policy decides again (same task, kinds, instant and subjects as the call that issued the
cursor), every entry is read again inside the new constraints and verified again, so an item
forbidden since is never returned; it is dropped from the cursor for good.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import anyio.to_thread
from sqlalchemy.engine import Engine

from audit.trace import TraceBuilder
from core.records import RecallQuery, Record, SourceResult
from core.instants import utc_now
from core.actor import Actor
from gateway.pipeline.budget import pack
from gateway.pipeline.cursors import Cursor, advance, load
from gateway.policy.decide import decide
from gateway.writes.documents import join_section
from core.errors import BadRequest, Conflict, ConnectorError
from gateway.pipeline.fuse import Fused
from gateway.privacy.mask import prepare as prepare_masking
from gateway.privacy.store import Privacy
from gateway.policy.base import PolicyEngine
from gateway.pipeline.ranking import Ranked
from gateway.pipeline.request import RetrieveRequest
from gateway.pipeline.retrieve import SOURCES, Connectors, admit, decision_constraints, respond
from gateway.settings import Settings
from gateway.synthesis.client import Synthesizer
from gateway.policy.verify import verify
from gateway.telemetry import current as current_telemetry
from gateway.telemetry import layer

PAGE_ENTRIES = 100  # entries read per expand; what fits the budget is returned
ATTEMPTS = 3


async def expand(
    *,
    settings: Settings,
    store: Engine,
    policy: PolicyEngine,
    connectors: Connectors,
    privacy: Privacy,
    synthesizer: Synthesizer | None,
    actor: Actor,
    request: RetrieveRequest,
    trace: TraceBuilder,
) -> dict[str, Any]:
    admit(request, trace, synthesizer)
    if request.synthesize:
        raise BadRequest("synthesize: an expand returns the next page of context; synthesise from the first call")
    if not request.cursor:
        raise BadRequest("cursor: mode expand needs the cursor of an earlier call")
    token = request.cursor
    for _ in range(ATTEMPTS):
        cursor = await anyio.to_thread.run_sync(load, store, actor, token, settings.cursor_idle_seconds)
        page = await _page(settings, store, policy, connectors, privacy, actor, request, cursor, trace)
        if page is not None:
            return page
    raise Conflict("cursor: another expand of this cursor is in progress; try again")


async def _page(
    settings: Settings,
    store: Engine,
    policy: PolicyEngine,
    connectors: Connectors,
    privacy: Privacy,
    actor: Actor,
    request: RetrieveRequest,
    cursor: Cursor,
    trace: TraceBuilder,
) -> dict[str, Any] | None:
    started = time.perf_counter()
    stored = cursor.request
    if request.task.model_dump() != stored["task"]:
        raise BadRequest("task: an expand continues the task of the call that issued the cursor")
    original = RetrieveRequest.model_validate(
        {"task": stored["task"], "kinds": stored["kinds"], "as_of": stored["as_of"], "graph": stored["graph"],
         "mode": "expand", "cursor": request.cursor}
    )
    with layer("policy.decide") as span:
        decision = await decide(policy, actor, original, utc_now())
        span.set_attributes({"gateway.policy.allow": decision.allow, "gateway.policy.revision": decision.revision})
        constraints = decision_constraints(decision, trace).with_subjects(tuple(stored["subjects"]))

    entries = cursor.remaining[:PAGE_ENTRIES]
    wanted = tuple(dict.fromkeys([e["id"] for e in entries] + [p for e in entries for p in e["pieces"]]))
    with layer("retrieval exact", {"gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": "exact"}) as span:
        try:
            result = await connectors.exact.search(constraints.items, RecallQuery(ids=wanted, limit=max(len(wanted), 1)))
        except ConnectorError as exc:
            result = SourceResult("exact", "error", detail=exc.message)
        span.set_attribute("gateway.source.status", result.status)
    records = {c.record.id: c.record for c in result.candidates}
    with layer("policy.verify", {"gateway.policy.checked": len(records)}) as span:
        verdict = await verify(policy, actor, request.task, constraints, records.values())
        span.set_attribute("gateway.policy.pushdown_mismatches", len(verdict.denied))
    current_telemetry().mismatched(len(verdict.denied))
    page = [ranked for e in entries if (ranked := _entry(e, records, verdict.allowed_ids)) is not None]
    if constraints.disclosure.mask and page:
        allowed_pieces = tuple(r for r in records.values() if r.id in verdict.allowed_ids)
        with layer("pii.mask"):
            masking = await prepare_masking(store, privacy, constraints.tenant, [r.entry for r in page], allowed_pieces)
            masked = masking.apply([r.entry for r in page], frozenset(constraints.disclosure.reveal))
        page = [replace(r, entry=entry) for r, entry in zip(page, masked)]
        trace.record(pii={"masked": masking.masker.counts(), "analysed_at_request": masking.analysed_now})
    limit = request.budget.bytes if request.budget else stored["budget_bytes"] or settings.default_budget_bytes
    with layer("rank_and_pack", {"gateway.budget.limit_bytes": limit}):
        packed = pack(page, limit, settings.budget_shares)
    packed_ids = [r.record.id for r in packed.items]
    gone = [e["id"] for e in entries if e["id"] not in {r.record.id for r in page}]
    remaining = [e for e in cursor.remaining if e["id"] not in set(packed_ids) | set(gone)]
    if result.status == "error":  # nothing was read: keep every entry for a later page
        remaining, gone = list(cursor.remaining), []
    if not await anyio.to_thread.run_sync(advance, store, cursor, packed_ids, remaining):
        return None
    trace.record(
        retrieved={"expand": [e["id"] for e in entries]},
        dropped_by_policy=[{"id": i, "reason": reason} for i, reason in verdict.denied],
        dropped_since_issued=gone,
        dropped_for_budget=list(packed.dropped_ids),
        packed=packed_ids,
    )
    sources = {name: {"status": "skipped", "count": 0, "ms": 0.0, "detail": "expand continues a cursor"} for name in SOURCES}
    sources["exact"] = {"status": result.status, "count": len(page), "ms": round(result.ms, 3)}
    if result.detail:
        sources["exact"]["detail"] = result.detail
    timings = {"decide_ms": round(decision.ms, 3), "verify_ms": round(verdict.ms, 3),
               "total_ms": round((time.perf_counter() - started) * 1000, 3)}
    depth = {"requested": request.depth, "effective": "fast", "fallback_reason": "expand_reads_by_id"}
    trace.record(sources=sources, timings=timings)
    return respond(trace.trace_id, "expand", decision.revision, packed, sources, timings, depth,
                   request.cursor if remaining else None)


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
