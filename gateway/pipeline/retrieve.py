"""One retrieve call through the pipeline: decide, resolve, recall, verify, fuse, pack, respond."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from opentelemetry.trace import get_current_span
from sqlalchemy.engine import Engine

from audit.trace import TraceBuilder
from connectors.base import ExactConnector, GraphConnector, LexicalConnector
from core.records import RecallQuery, SourceResult
from core.instants import rfc3339, utc_now
from core.actor import Actor
from gateway.pipeline.budget import Packed, pack
from gateway.pipeline.cursors import issue
from gateway.policy.decide import Constraints, Decision, decide
from gateway.pipeline.entities import TOMBSTONE, Resolution, ResolvedEntity, resolve
from core.errors import BadRequest, ConnectorError, MaskingUnavailable, PolicyDenied
from gateway.synthesis.answer import synthesize
from gateway.pipeline.fuse import fuse
from gateway.privacy.mask import prepare as prepare_masking
from gateway.privacy.store import Privacy
from gateway.pipeline.ranking import Ranked, rank
from gateway.policy.base import PolicyEngine
from gateway.pipeline.recall import Search, recall
from gateway.pipeline.relevance import above_floor
from gateway.pipeline.request import RetrieveRequest
from gateway.pipeline.sections import read_whole, section_keys
from gateway.pipeline.semantic import Semantic, semantic_search
from gateway.settings import Settings
from gateway.synthesis.client import Synthesizer
from gateway.telemetry import current as current_telemetry
from gateway.telemetry import documents, layer
from gateway.pipeline.understand import depth_report, has_letters, rephrase
from gateway.policy.verify import verify

EMPTY_REASON = "no_relevant_permitted_items"
SOURCES = ("exact", "graph", "lexical", "semantic")
MODE_SOURCES = {
    "brief": {"exact", "graph", "lexical", "semantic"},
    "scout": {"exact", "lexical", "semantic"},
    "fetch": {"exact"},
    "filter": {"exact", "lexical"},
    "expand": set(),
}
CITATION_PREFIX = {"memory": "M", "document": "D", "property": "P", "edge": "E"}
RESOLVED_FROM = {"domain": "website", "profile": "website"}


@dataclass(frozen=True, slots=True)
class Connectors:
    exact: ExactConnector
    lexical: LexicalConnector
    semantic: Semantic
    graph: GraphConnector | None = None


def chosen_sources(request: RetrieveRequest) -> dict[str, bool]:
    """Mode defaults, then the caller's explicit switches; an explicit false always wins."""
    defaults = MODE_SOURCES[request.effective_mode]
    explicit = request.sources.model_dump()
    return {name: (explicit[name] if explicit[name] is not None else name in defaults) for name in SOURCES}


def request_shape(request: RetrieveRequest, trace: TraceBuilder) -> dict[str, Any]:
    """What the trace keeps of the request: its shape, hashes and sizes, never its text."""
    return {
        "task": request.task.model_dump(),
        "mode": request.effective_mode,
        "mode_requested": request.mode,
        "kinds": request.kinds,
        "sources": request.sources.model_dump(),
        "depth": request.depth,
        "budget_bytes": request.budget.bytes if request.budget else None,
        "as_of": request.as_of,
        "query": trace.fingerprint(request.query) if request.query else None,
        "entities": [
            {kind: trace.fingerprint(value) for kind, value in ref.model_dump(exclude_none=True).items()}
            for ref in request.entities
        ],
        "fetch_count": len(request.fetch or ()),
        "tags": list(request.filters.tags) if request.filters else [],
        "include_historical": request.include_historical,
    }


async def retrieve(
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
    started = time.perf_counter()
    admit(request, trace, synthesizer)
    if request.cursor is not None:
        raise BadRequest("cursor: a cursor is continued with mode expand")
    if request.effective_mode == "fetch" and not request.fetch:
        raise BadRequest("fetch: mode fetch needs a list of item ids")

    with layer("policy.decide") as span:
        decision = await decide(policy, actor, request, utc_now())
        span.set_attributes({"gateway.policy.allow": decision.allow, "gateway.policy.revision": decision.revision})
        constraints = decision_constraints(decision, trace)

    resolution, entity_ms, resolution_error = Resolution(), 0.0, None
    entity_denied: tuple[tuple[str, str], ...] = ()
    if request.entities:
        with layer("entities.resolve", {"gateway.entities.requested": len(request.entities)}) as span:
            try:
                resolution, read = await resolve(connectors.exact, constraints.items, request.entities)
            except ConnectorError as exc:  # the call goes on without the entities, and says so
                resolution_error, read = exc.message, []
            entity_verdict = await verify(policy, actor, request.task, constraints, read)
            resolution, entity_denied = resolution.keep(entity_verdict.allowed_ids), entity_verdict.denied
            entity_ms = entity_verdict.ms
            span.set_attribute("gateway.entities.resolved", len(resolution.live))
        trace.record(entities={"resolved": len(resolution.live), "tombstones": len(resolution.entities) - len(resolution.live),
                               "aliases": sum(len(e.aliases) for e in resolution.live), "alias_error": resolution.alias_error})
    constraints = constraints.with_subjects(resolution.subjects)

    sources = chosen_sources(request)
    searches, skipped = _searches(connectors, constraints, request, sources, resolution.live)
    recall_started = time.perf_counter()
    with layer("recall", {"gateway.sources": sorted(searches)}):
        results = await recall(searches, settings.connector_deadline_ms)
    recall_ms = (time.perf_counter() - recall_started) * 1000
    if resolution_error and results.get("exact", SourceResult("exact", "skipped")).status in ("skipped", "empty"):
        results["exact"] = SourceResult("exact", "error", detail=f"entity resolution failed: {resolution_error}")
    for name in SOURCES:
        if name not in results:
            detail = skipped.get(name) or "not requested"
            results[name] = SourceResult(name, "skipped", detail=detail)

    candidates = [c.record for result in results.values() for c in result.candidates]
    sections_started = time.perf_counter()
    with layer("sections"):
        try:
            pieces = await connectors.exact.sections(constraints.items, section_keys(candidates))
        except ConnectorError as exc:  # hits are still returned, as the pieces that were found
            pieces = ()
            trace.record(section_lookup_error=exc.message)
    sections_ms = (time.perf_counter() - sections_started) * 1000
    with layer("policy.verify", {"gateway.policy.checked": len(candidates) + len(pieces)}) as span:
        verdict = await verify(policy, actor, request.task, constraints, candidates + list(pieces))
        span.set_attribute("gateway.policy.pushdown_mismatches", len(verdict.denied) + len(entity_denied))
    current_telemetry().mismatched(len(verdict.denied) + len(entity_denied))
    trace.record(
        retrieved={name: [c.record.id for c in r.candidates] for name, r in results.items() if r.candidates},
        dropped_by_policy=[{"id": i, "reason": reason} for i, reason in verdict.denied + tuple(entity_denied)],
        pushdown_mismatches=len(verdict.denied) + len(entity_denied),
    )

    fuse_started = time.perf_counter()
    with layer("fuse"):
        fused = fuse({name: r.candidates for name, r in results.items()}, verdict.allowed_ids)
        relevant, floor_report = above_floor(fused, results["semantic"].candidates, settings.semantic_floor)
        relevant, merged = read_whole(relevant, pieces, verdict.allowed_ids)
    trace.record(section_pieces=sorted(p.id for p in pieces if p.id in verdict.allowed_ids), merged_into_sections=merged)
    trace.record(relevance=floor_report)
    mask_started = time.perf_counter()
    masking = None
    if constraints.disclosure.mask:  # before packing, so the budget counts what is returned
        with layer("pii.mask") as span:
            masking = await prepare_masking(store, privacy, constraints.tenant, relevant, pieces)
            relevant = masking.apply(relevant, frozenset(constraints.disclosure.reveal))
            span.set_attributes({f"gateway.pii.masked.{kind}": n for kind, n in masking.masker.counts().items()})
        trace.record(pii={"masked": masking.masker.counts(), "analysed_at_request": masking.analysed_now})
    mask_ms = (time.perf_counter() - mask_started) * 1000
    scopes = (request.task.scope,) if request.task.scope else constraints.items.scopes
    history = request.include_historical or request.effective_mode == "fetch"
    limit = request.budget.bytes if request.budget else settings.default_budget_bytes
    with layer("rank_and_pack", {"gateway.budget.limit_bytes": limit}) as span:
        ranking = rank(relevant, at=constraints.items.valid_at, scopes=scopes, include_history=history)
        packed = pack(ranking.shown, limit, settings.budget_shares)
        span.set_attributes({"gateway.budget.used_bytes": packed.used_bytes, "gateway.packed": len(packed.items)})
    # On the enclosing retrieval span: what the call returned, as ids and scores (never text).
    get_current_span().set_attributes({
        "gen_ai.retrieval.documents": documents([(r.record.id, r.entry.score) for r in packed.items]),
        "gen_ai.retrieval.top_k": request.limit,
    })
    fuse_ms = (time.perf_counter() - fuse_started) * 1000
    cursor = None
    if packed.leftover:
        with layer("cursor.issue"):
            cursor = await anyio.to_thread.run_sync(
                lambda: issue(store, actor, cursor_request(request, constraints), [cursor_entry(r) for r in packed.leftover],
                              [r.record.id for r in packed.items], settings.cursor_idle_seconds)
            )
    trace.record(
        dropped_as_historical=[r.record.id for r in ranking.hidden],
        dropped_for_budget=list(packed.dropped_ids),
        packed=[r.record.id for r in packed.items],
        cursor_issued=cursor is not None,
    )
    total_ms = (time.perf_counter() - started) * 1000
    timings = {
        "decide_ms": round(decision.ms, 3),
        "verify_ms": round(entity_ms + verdict.ms, 3),
        "embed_ms": round(results["semantic"].embed_ms or 0.0, 3),
        "semantic_ms": round(results["semantic"].ms, 3),
        "lexical_ms": round(results["lexical"].ms, 3),
        "graph_ms": round(results["graph"].ms, 3),
        "sections_ms": round(sections_ms, 3),
        "recall_ms": round(recall_ms, 3),
        "fuse_ms": round(fuse_ms, 3),
        "mask_ms": round(mask_ms, 3),
        "total_ms": round(total_ms, 3),
    }
    sources_report = _source_report(results, verdict.allowed_ids)
    if resolution.alias_error and "exact" in sources_report:
        sources_report["exact"]["aliases"] = f"skipped: {resolution.alias_error}"
    depth = depth_report(request.depth, results["semantic"], connectors.semantic.unavailable)
    trace.record(sources=sources_report, timings=timings, depth=depth)
    body = respond(trace.trace_id, request.effective_mode, decision.revision, packed, sources_report, timings, depth, cursor)
    if request.synthesize and synthesizer is not None:
        synthesis_started = time.perf_counter()
        with layer("synthesis", {"gen_ai.operation.name": "chat", "gen_ai.request.model": synthesizer.model}):
            if masking is None:  # only what was packed goes to the model, so only that is masked
                try:
                    masking = await prepare_masking(store, privacy, constraints.tenant, [r.entry for r in packed.items], pieces)
                except MaskingUnavailable:
                    pass  # synthesize() reports it; nothing is sent unmasked
            body["answer"] = await synthesize(synthesizer, privacy, constraints.disclosure, request.query or "", packed,
                                              cite(packed.items), masking, trace)
        timings["synthesis_ms"] = round((time.perf_counter() - synthesis_started) * 1000, 3)
        timings["total_ms"] = round((time.perf_counter() - started) * 1000, 3)
    body["entities"] = entities_report(resolution)
    body["partial"] = body["partial"] or bool(resolution.alias_error)
    return body


def admit(request: RetrieveRequest, trace: TraceBuilder, synthesizer: Synthesizer | None) -> None:
    """Checks every mode shares, before any decision; the request's shape goes on the trace first."""
    trace.record(request=request_shape(request, trace))
    if request.synthesize and synthesizer is None:
        raise BadRequest("synthesize: no synthesis endpoint is configured on this gateway (GATEWAY_LLM_URL)")


def decision_constraints(decision: Decision, trace: TraceBuilder) -> Constraints:
    """The constraints of an allow; a denial ends the call with 403 and a trace."""
    trace.decision = "allow" if decision.allow else "deny"
    trace.record(decision={"allow": decision.allow, "reasons": list(decision.reasons), "ms": round(decision.ms, 3)})
    if not decision.allow or decision.constraints is None:
        raise PolicyDenied("the policy denied this request", reasons=list(decision.reasons))
    trace.record(constraints=decision.constraints.policy_result)
    return decision.constraints


def cursor_request(request: RetrieveRequest, constraints: Constraints) -> dict[str, Any]:
    """What an expand needs to decide again: the request's shape and its subjects, never its text."""
    return {
        "task": request.task.model_dump(),
        "kinds": request.kinds,
        "as_of": request.as_of,
        "graph": request.graph.model_dump(),
        "include_historical": request.include_historical,
        "budget_bytes": request.budget.bytes if request.budget else None,
        "subjects": list(constraints.subjects),
    }


def cursor_entry(ranked: Ranked) -> dict[str, Any]:
    return {
        "id": ranked.record.id,
        "found_by": list(ranked.entry.found_by),
        "label": ranked.label,
        "current": ranked.current,
        "pieces": list(ranked.entry.pieces),
    }


def entities_report(resolution: Resolution) -> list[dict[str, Any]]:
    report: list[dict[str, Any]] = []
    for entity in resolution.entities:
        record = entity.record
        if entity.tombstone:  # a bare tombstone: it existed, nothing more
            report.append({"id": record.id, "kind": record.entity_type or "entity", "status": TOMBSTONE})
            continue
        given = entity.resolved_from
        report.append(
            {
                "id": record.id,
                "kind": record.entity_type or "entity",
                "status": "live",
                "resolved_from": {RESOLVED_FROM.get(given.kind, given.kind): given.value},
                "merged_from": list(entity.merged_from),
                "aliases": list(entity.aliases),
            }
        )
    return report


def _searches(
    connectors: Connectors,
    constraints: Constraints,
    request: RetrieveRequest,
    sources: dict[str, bool],
    resolved: tuple[ResolvedEntity, ...],
) -> tuple[dict[str, Search], dict[str, str]]:
    """The searches to run, and why any chosen source will not run."""
    tags = tuple(request.filters.tags) if request.filters else ()
    searches: dict[str, Search] = {}
    skipped: dict[str, str] = {}
    if sources["exact"]:
        query = RecallQuery(text=None, tags=tags, ids=tuple(request.fetch or ()), limit=request.limit)
        searches["exact"] = lambda: connectors.exact.search(constraints.items, query)
    if sources["graph"]:
        graph = connectors.sql.graph
        if graph is None:
            skipped["graph"] = "no graph connector in this deployment"
        else:
            graph_query = RecallQuery(limit=request.limit)
            searches["graph"] = lambda: graph.search(constraints.items, constraints.graph, graph_query)
    wordy = bool(request.query) and has_letters(request.query or "")
    text = rephrase(request.query or "", resolved, request.task.type) if request.depth == "deep" else request.query
    if sources["lexical"] and wordy:
        lexical_query = RecallQuery(text=text, tags=tags, limit=request.limit)
        searches["lexical"] = lambda: connectors.lexical.search(constraints.items, lexical_query)
    if sources["semantic"]:
        semantic = connectors.semantic
        if not wordy:
            skipped["semantic"] = "query has no words to embed"
        elif request.depth == "fast":
            skipped["semantic"] = "depth fast runs no embedding"
        elif semantic.unavailable or semantic.connector is None:
            skipped["semantic"] = semantic.unavailable or "no semantic connector"
        else:
            semantic_query = RecallQuery(text=text, tags=tags, limit=request.limit)
            searches["semantic"] = lambda: semantic_search(semantic, constraints.items, semantic_query)
    return searches, skipped


def _source_report(results: dict[str, SourceResult], allowed_ids: frozenset[str]) -> dict[str, dict[str, Any]]:
    """Per source status and timing. `count` holds only candidates the policy confirmed."""
    report: dict[str, dict[str, Any]] = {}
    for name, result in results.items():
        entry: dict[str, Any] = {
            "status": result.status,
            "count": sum(1 for c in result.candidates if c.record.id in allowed_ids),
            "ms": round(result.ms, 3),
        }
        if result.detail:
            entry["detail"] = result.detail
        if result.lag is not None:
            entry["lag"] = result.lag
        report[name] = entry
    return report


def respond(
    trace_id: str,
    mode: str,
    revision: str,
    packed: Packed,
    sources: dict[str, dict[str, Any]],
    timings: dict[str, float],
    depth: dict[str, Any],
    cursor: str | None,
) -> dict[str, Any]:
    items = [item_body(ranked, citation) for ranked, citation in zip(packed.items, cite(packed.items))]
    return {
        "trace_id": trace_id,
        "mode": mode,
        "decision": {"allow": True, "policy_revision": revision, "reasons": []},
        "entities": [],
        "items": items,
        "sources": sources,
        "depth": depth,
        "budget": {"limit_bytes": packed.limit_bytes, "used_bytes": packed.used_bytes, "per_source": packed.per_source},
        "partial": any(s["status"] in ("error", "timeout") for s in sources.values()),
        "empty_reason": None if items else EMPTY_REASON,
        "cursor": cursor,
        "answer": None,
        "timings": timings,
    }


def cite(items: tuple[Ranked, ...]) -> list[str]:
    """Citations in packing order: M1, M2 for memories, D1 for documents, P1 properties, E1 edges."""
    counters: dict[str, int] = {}
    citations = []
    for ranked in items:
        prefix = CITATION_PREFIX.get(ranked.record.kind, "X")
        counters[prefix] = counters.get(prefix, 0) + 1
        citations.append(f"{prefix}{counters[prefix]}")
    return citations


def item_body(ranked: Ranked, citation: str) -> dict[str, Any]:
    record = ranked.record
    body: dict[str, Any] = {
        "id": record.id,
        "kind": record.kind,
        "citation": citation,
        "text": record.text,
        "entity": record.entity,
        "section": record.section,
        "document": record.document,
        "slot": record.slot,
        "authority": record.authority,
        "status": ranked.label,
        "current": ranked.current,
        "sensitivity": record.sensitivity,
        "scope": list(record.scope),
        "valid_from": rfc3339(record.valid_from),
        "valid_to": rfc3339(record.valid_to),
        "recorded_at": rfc3339(record.recorded_at),
        "source": {"system": record.source_system, "uri": record.source_uri},
        "found_by": list(ranked.entry.found_by),
        "pieces": list(ranked.entry.pieces),
    }
    if record.kind == "edge":
        body.update(
            {"from": record.edge_from, "to": record.edge_to, "relation": record.relation,
             "confidence": record.confidence, "weight": record.weight}
        )
    return body
