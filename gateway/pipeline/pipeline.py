"""The retrieve pipeline as one object: built once with what it runs on, one call per retrieve.

`retrieve` runs decide → resolve → recall → sections → verify → fuse → mask → rank and pack →
cursor → respond (→ synthesis); `expand` (gateway.pipeline.expand) reuses the public stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import get_current_span
from sqlalchemy.engine import Engine

from api.retrieve import Answer, RetrieveResponse
from audit.record import (
    Accounted,
    Budgeted,
    Decided,
    DecisionRecord,
    Masked,
    Presented,
    RelevanceRecord,
    Resolved,
    SectionsUnread,
    Sifted,
    Timed,
    TraceBuilder,
    Verified,
    dropped,
)
from connectors.base import ExactConnector, GraphConnector, LexicalConnector
from core.actor import Actor
from core.errors import BadRequest, ConnectorError, MaskingUnavailable, PolicyDenied, PolicyUnavailable
from core.instants import utc_now
from core.records import Fused, RecallQuery, Record, SkipReason, SourceResult
from core.request import RetrieveRequest, Task
from gateway.admission import DOOR_COURTESY_MAX_S, give_way
from gateway.pipeline.budget import Packed, pack
from gateway.pipeline.cursors import prepared
from gateway.pipeline.entities import Resolution, ResolvedEntity, resolve
from gateway.pipeline.expand import expand
from gateway.pipeline.fuse import fuse
from gateway.pipeline.ranking import Ranked, rank
from gateway.pipeline.recall import SOURCES, Search, chosen_sources, recall
from gateway.pipeline.relevance import above_floor
from gateway.pipeline.respond import cite, entities_report, mask_fields, request_shape, respond, source_records
from gateway.pipeline.returned import note_returned
from gateway.pipeline.sections import read_whole, section_keys
from gateway.pipeline.semantic import Semantic, rerank, semantic_search
from gateway.pipeline.stages import StageTimer
from gateway.pipeline.understand import depth_report, has_letters, rephrase
from gateway.policy.base import PolicyEngine
from gateway.policy.decide import Constraints, decide
from gateway.policy.verify import Verdict, verify
from gateway.privacy.mask import Masking
from gateway.privacy.mask import prepare as prepare_masking
from gateway.privacy.store import Privacy
from gateway.settings import Settings
from gateway.synthesis.answer import synthesize
from gateway.synthesis.client import Synthesizer
from gateway.telemetry import current as current_telemetry
from gateway.telemetry import documents


@dataclass(frozen=True, slots=True)
class Connectors:
    exact: ExactConnector
    lexical: LexicalConnector
    semantic: Semantic
    graph: GraphConnector | None = None


class Pipeline:
    """Every stage of a retrieve call, with the store, policy, connectors and privacy it runs on."""

    def __init__(
        self,
        settings: Settings,
        store: Engine,
        policy: PolicyEngine,
        connectors: Connectors,
        privacy: Privacy,
        synthesizer: Synthesizer | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.policy = policy
        self.connectors = connectors
        self.privacy = privacy
        self.synthesizer = synthesizer

    async def run(self, actor: Actor, request: RetrieveRequest, trace: TraceBuilder) -> RetrieveResponse:
        """One call: an expand continues a cursor, every other mode retrieves."""
        if request.effective_mode == "expand":
            return await self.expand(actor, request, trace)
        return await self.retrieve(actor, request, trace)

    async def expand(self, actor: Actor, request: RetrieveRequest, trace: TraceBuilder) -> RetrieveResponse:
        """The next page of an earlier result, decided and verified again (gateway.pipeline.expand)."""
        return await expand(self, actor, request, trace)

    async def retrieve(self, actor: Actor, request: RetrieveRequest, trace: TraceBuilder) -> RetrieveResponse:
        timer = StageTimer()
        self.admit(request, trace)
        if request.cursor is not None:
            raise BadRequest("cursor: a cursor is continued with mode expand")
        if request.effective_mode == "fetch" and not request.fetch:
            raise BadRequest("fetch: mode fetch needs a list of item ids")

        # A heavy call gives way to lighter tenants' calls between its stages, and longest before it
        # starts (gateway/admission/courtesy.py).
        await give_way(DOOR_COURTESY_MAX_S)
        constraints, revision = await self.decide(actor, request, trace, timer)
        await give_way()
        resolution, resolution_error, entity_verdict = await self.resolve(actor, request, constraints, trace, timer)
        constraints = constraints.with_subjects(resolution.subjects)
        trace.record(Resolved(entities=resolution.report() if request.entities else None, subjects=tuple(constraints.subjects)))

        await give_way()
        results = await self.recall(request, constraints, resolution, timer)
        if resolution_error and results["exact"].status in ("skipped", "empty"):
            results["exact"] = SourceResult("exact", "error", detail=f"entity resolution failed: {resolution_error}")
        candidates = [c.record for result in results.values() for c in result.candidates]
        pieces = await self.sections(constraints, candidates, trace, timer)
        await give_way()
        verdict = await self.verify(actor, request.task, constraints, candidates + list(pieces), timer, entity_verdict)
        retrieved = {name: [c.record.id for c in r.candidates] for name, r in results.items() if r.candidates}
        denied = dropped(verdict.denied)
        trace.record(Verified(retrieved=retrieved, dropped_by_policy=denied, pushdown_mismatches=len(denied)))

        await give_way()
        similarity = await self.rerank(request, constraints, results, verdict.allowed_ids, timer)
        floor = self.connectors.semantic.floor(self.settings.semantic_floor)
        with timer.stage("fuse", "fuse_ms"):
            fused = fuse({name: r.candidates for name, r in results.items()}, verdict.allowed_ids, similarity, floor)
            relevant, floor_report = above_floor(fused, results["semantic"].candidates, floor)
            relevant, merged = read_whole(relevant, pieces, verdict.allowed_ids)
        trace.record(
            Sifted(
                section_pieces=tuple(sorted(p.id for p in pieces if p.id in verdict.allowed_ids)),
                merged_into_sections=tuple(merged),
                relevance=RelevanceRecord.model_validate(floor_report),
            )
        )
        masking = None
        timer.set("mask_ms", 0.0)  # reported even when the policy masks nothing
        if constraints.disclosure.mask:  # before packing, so the budget counts what is returned
            masking, relevant = await self.mask(constraints, relevant, pieces, trace, timer)

        packed, cursor = self.rank_and_pack(actor, request, constraints, relevant, trace, timer)

        timer.set("embed_ms", results["semantic"].embed_ms or 0.0)
        timer.set("semantic_ms", results["semantic"].ms)
        timer.set("lexical_ms", results["lexical"].ms)
        timer.set("graph_ms", results["graph"].ms)
        timings = timer.finish()
        sources = source_records(results, verdict.allowed_ids)
        if resolution.alias_error:
            sources["exact"] = sources["exact"].model_copy(update={"aliases": f"skipped: {resolution.alias_error}"})
        depth = depth_report(request.depth, results["semantic"], self.connectors.semantic.unavailable)
        trace.record(Accounted(sources=sources, timings=timings, depth=depth))  # later figures: Timed
        body = respond(trace.trace_id, request.effective_mode, revision, packed, sources, timings, depth, cursor)
        body = body.model_copy(update={"entities": entities_report(resolution)})
        if masking is not None:  # every other string of the items and entities, with the text's placeholders
            body = await self.mask_response(body, constraints, masking, trace, timer, request.query or "")
        note_returned(trace, [*candidates, *pieces], packed, masking, body)
        if request.synthesize and self.synthesizer is not None:
            answer = Answer.model_validate(await self.synthesize(request, constraints, packed, pieces, masking, trace, timer))
            later = {"synthesis_ms": round(timer.timings.synthesis_ms or 0.0, 3), "total_ms": timer.finish()["total_ms"]}
            trace.record(Timed(timings=later))
            body = body.model_copy(update={"answer": answer, "timings": {**body.timings, **later}})
        if resolution.alias_error:
            body = body.model_copy(update={"partial": True})
        return body

    # ---------------------------------------------------------------- stages

    def admit(self, request: RetrieveRequest, trace: TraceBuilder) -> None:
        """Checks every mode shares, before any decision; the request's shape goes on the trace first."""
        trace.record(request_shape(request, trace))
        if request.synthesize and self.synthesizer is None:
            raise BadRequest("synthesize: no synthesis endpoint is configured on this gateway (GATEWAY_LLM_URL)")

    async def decide(
        self, actor: Actor, request: RetrieveRequest, trace: TraceBuilder, timer: StageTimer
    ) -> tuple[Constraints, str]:
        """The constraints of an allow, and the policy revision; a denial ends the call with 403."""
        trace.record(Presented(roles=tuple(actor.roles), groups=tuple(actor.groups), clearance=actor.clearance))
        with timer.stage("policy.decide") as span:
            decision = await decide(self.policy, actor, request, utc_now())
            span.set_attributes({"gateway.policy.allow": decision.allow, "gateway.policy.revision": decision.revision})
        timer.set("decide_ms", decision.ms)
        allowed = decision.constraints if decision.allow else None
        policy = DecisionRecord(allow=decision.allow, reasons=list(decision.reasons), ms=decision.ms)
        trace.record(Decided(decision=policy, constraints=allowed.policy_result if allowed else None))
        if allowed is None:
            raise PolicyDenied("the policy denied this request", reasons=list(decision.reasons))
        return allowed, decision.revision

    async def resolve(
        self, actor: Actor, request: RetrieveRequest, constraints: Constraints, trace: TraceBuilder, timer: StageTimer
    ) -> tuple[Resolution, str | None, Verdict | None]:
        """The request's entities, verified like any item; a failed lookup is reported, not raised."""
        if not request.entities:
            return Resolution(), None, None
        error = None
        with timer.stage("entities.resolve", attributes={"gateway.entities.requested": len(request.entities)}) as span:
            try:
                resolution, read = await resolve(self.connectors.exact, constraints.items, request.entities)
            except ConnectorError as exc:  # the call goes on without the entities, and says so
                resolution, read, error = Resolution(), [], exc.message
            verdict = await verify(self.policy, actor, request.task, constraints, read, await self.linked(constraints, read))
            resolution = resolution.keep(verdict.allowed_ids)
            span.set_attribute("gateway.entities.resolved", len(resolution.live))
        timer.add("verify_ms", verdict.ms)
        return resolution, error, verdict

    async def recall(
        self, request: RetrieveRequest, constraints: Constraints, resolution: Resolution, timer: StageTimer
    ) -> dict[str, SourceResult]:
        """Every chosen source, concurrently, each under its deadline; one result per source."""
        searches, skipped = self.searches(request, constraints, resolution.live)
        with timer.stage("recall", "recall_ms", {"gateway.sources": sorted(searches)}):
            results = await recall(searches, self.settings.connector_deadline_ms)
        for name in SOURCES:
            if name not in results:
                reason, detail = skipped.get(name, (SkipReason.NOT_REQUESTED, None))
                results[name] = SourceResult.skipped(name, reason, detail)
        return results

    async def sections(
        self, constraints: Constraints, candidates: list[Record], trace: TraceBuilder, timer: StageTimer
    ) -> tuple[Record, ...]:
        """Every piece of the sections the document hits belong to, inside the filter."""
        with timer.stage("sections", "sections_ms"):
            try:
                return await self.connectors.exact.sections(constraints.items, section_keys(candidates), tuple(candidates))
            except ConnectorError as exc:  # hits are still returned, as the pieces that were found
                trace.record(SectionsUnread(section_lookup_error=exc.message))
                return ()

    async def verify(
        self,
        actor: Actor,
        task: Task,
        constraints: Constraints,
        records: list[Record],
        timer: StageTimer,
        earlier: Verdict | None = None,
    ) -> Verdict:
        """The policy's second look at every candidate; what it denies is a pushdown mismatch."""
        with timer.stage("policy.verify", attributes={"gateway.policy.checked": len(records)}) as span:
            linked = await self.linked(constraints, records)
            verdict = await verify(self.policy, actor, task, constraints, records, linked)
            denied = verdict.denied + (earlier.denied if earlier else ())
            span.set_attribute("gateway.policy.pushdown_mismatches", len(denied))
        timer.add("verify_ms", verdict.ms)
        current_telemetry().mismatched(len(denied))
        return Verdict(verdict.allowed_ids, denied, verdict.ms)

    async def rerank(
        self,
        request: RetrieveRequest,
        constraints: Constraints,
        results: dict[str, SourceResult],
        allowed: frozenset[str],
        timer: StageTimer,
    ) -> dict[str, float]:
        """The rerank after the verify (gateway/pipeline/semantic.py), unless it is off."""
        if self.settings.rerank != "vectors":
            return {}
        tags = tuple(request.filters.tags) if request.filters else ()
        return await rerank(self.connectors.semantic, constraints.items, results, allowed, tags, timer)

    async def linked(self, constraints: Constraints, records: list[Record]) -> tuple[Record, ...]:
        """The entities the records name, read for the item policy's link check (never returned). If
        they cannot be read, nothing can be verified: the call fails closed."""
        ids = tuple(dict.fromkeys(e for record in records for e in record.linked_entities()))
        try:
            return await self.connectors.exact.linked(constraints.tenant, ids)
        except ConnectorError as exc:
            raise PolicyUnavailable("the entities the candidates name could not be read for verification") from exc

    async def mask(
        self,
        constraints: Constraints,
        entries: list[Fused],
        pieces: tuple[Record, ...],
        trace: TraceBuilder,
        timer: StageTimer,
    ) -> tuple[Masking, list[Fused]]:
        """The entries with personal data masked, but for the types the policy reveals."""
        with timer.stage("pii.mask", "mask_ms") as span:
            masking = await prepare_masking(self.store, self.privacy, constraints.tenant, entries, pieces)
            masked = masking.apply(entries, frozenset(constraints.disclosure.reveal))
            span.set_attributes({f"gateway.pii.masked.{kind}": n for kind, n in masking.masker.counts().items()})
        trace.record(Masked(masked=masking.masker.counts(), analysed_at_request=masking.analysed_now))
        return masking, masked

    async def mask_response(
        self,
        body: RetrieveResponse,
        constraints: Constraints,
        masking: Masking,
        trace: TraceBuilder,
        timer: StageTimer,
        question: str = "",
    ) -> RetrieveResponse:
        """The body with every string of its items and entities but those the contract marks clear
        (ids, enumerations, instants, the text masked already) masked with the same placeholders, at
        response building (outside the budget, which counts text only). Detection runs now, once per
        distinct string, batched."""
        with timer.stage("pii.mask_fields", "mask_ms") as span:
            body = await mask_fields(body, masking, frozenset(constraints.disclosure.reveal), question)
            span.set_attributes({f"gateway.pii.masked.{kind}": n for kind, n in masking.masker.counts().items()})
        finished = timer.finish()
        later: dict[str, float] = {
            key: finished[key] for key in ("mask_ms", "total_ms") if key in body.timings
        }  # the figures it reported
        trace.record(Masked(masked=masking.masker.counts(), analysed_at_request=masking.analysed_now))
        trace.record(Timed(timings=later))
        return body.model_copy(update={"timings": {**body.timings, **later}})

    def rank_and_pack(
        self,
        actor: Actor,
        request: RetrieveRequest,
        constraints: Constraints,
        relevant: list[Fused],
        trace: TraceBuilder,
        timer: StageTimer,
    ) -> tuple[Packed, str | None]:
        """Current truth first, then as much as the budget holds; the cursor to the rest."""
        scopes = (request.task.scope,) if request.task.scope else constraints.items.scopes
        history = request.include_historical or request.effective_mode == "fetch"
        limit = request.budget.bytes if request.budget else self.settings.default_budget_bytes
        with timer.stage("rank_and_pack", "fuse_ms", {"gateway.budget.limit_bytes": limit}) as span:
            ranking = rank(relevant, at=constraints.items.valid_at, scopes=scopes, include_history=history)
            packed = self.pack(ranking.shown, limit)
            span.set_attributes({"gateway.budget.used_bytes": packed.used_bytes, "gateway.packed": len(packed.items)})
        # On the enclosing retrieval span: what the call returned, as ids and scores (never text).
        get_current_span().set_attributes(
            {
                "gen_ai.retrieval.documents": documents([(r.record.id, r.entry.score) for r in packed.items]),
                "gen_ai.retrieval.top_k": request.limit,
            }
        )
        cursor = self.issue_cursor(actor, request, constraints, packed, trace)
        hidden, packed_ids = tuple(r.record.id for r in ranking.hidden), tuple(r.record.id for r in packed.items)
        trace.record(
            Budgeted(
                dropped_as_historical=hidden,
                dropped_for_budget=tuple(packed.dropped_ids),
                packed=packed_ids,
                cursor_issued=cursor is not None,
            )
        )
        return packed, cursor

    def pack(self, ranked: list[Ranked] | tuple[Ranked, ...], limit_bytes: int) -> Packed:
        return pack(ranked, limit_bytes, self.settings.budget_shares)

    def issue_cursor(
        self, actor: Actor, request: RetrieveRequest, constraints: Constraints, packed: Packed, trace: TraceBuilder
    ) -> str | None:
        """A cursor over what did not fit; it keeps the request's shape and subjects, never its text.
        It is stored with the call's audit row, in one transaction, and only if the call succeeds."""
        if not packed.leftover:
            return None
        shape = {
            "task": request.task.model_dump(),
            "kinds": request.kinds,
            "as_of": request.as_of,
            "graph": request.graph.model_dump(),
            "include_historical": request.include_historical,
            "budget_bytes": request.budget.bytes if request.budget else None,
            "subjects": list(constraints.subjects),
        }
        entries = [
            {
                "id": r.record.id,
                "found_by": list(r.entry.found_by),
                "label": r.label,
                "current": r.current,
                "pieces": list(r.entry.pieces),
            }
            for r in packed.leftover
        ]
        returned = [r.record.id for r in packed.items]
        token, write = prepared(
            self.store, actor, shape, entries, returned, self.settings.cursor_idle_seconds, self.settings.cursor_max_per_actor
        )
        trace.writes.append(write)
        return token

    async def synthesize(
        self,
        request: RetrieveRequest,
        constraints: Constraints,
        packed: Packed,
        pieces: tuple[Record, ...],
        masking: Masking | None,
        trace: TraceBuilder,
        timer: StageTimer,
    ) -> dict[str, Any]:
        """An answer from the packed context, masked before the model reads it."""
        assert self.synthesizer is not None
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": self.synthesizer.model}
        with timer.stage("synthesis", "synthesis_ms", attributes):
            if masking is None:  # only what was packed goes to the model, so only that is masked
                try:
                    masking = await prepare_masking(
                        self.store, self.privacy, constraints.tenant, [r.entry for r in packed.items], pieces
                    )
                except MaskingUnavailable:
                    pass  # synthesize() reports it; nothing is sent unmasked
            cited = list(zip(cite(packed.items), [r.entry for r in packed.items]))
            return await synthesize(
                self.synthesizer, self.privacy, constraints.disclosure, request.query or "", cited, masking, trace
            )

    def searches(
        self, request: RetrieveRequest, constraints: Constraints, resolved: tuple[ResolvedEntity, ...]
    ) -> tuple[dict[str, Search], dict[str, tuple[SkipReason, str | None]]]:
        """The searches to run, and why any chosen source will not run."""
        connectors, where = self.connectors, constraints.items
        sources = chosen_sources(request)
        tags = tuple(request.filters.tags) if request.filters else ()
        searches: dict[str, Search] = {}
        skipped: dict[str, tuple[SkipReason, str | None]] = {}
        if sources["exact"]:
            query = RecallQuery(text=None, tags=tags, ids=tuple(request.fetch or ()), limit=request.limit)
            searches["exact"] = lambda: connectors.exact.search(where, query)
        if sources["graph"]:
            graph = connectors.graph
            if graph is None:
                skipped["graph"] = (SkipReason.NO_GRAPH_CONNECTOR, None)
            else:
                graph_query = RecallQuery(limit=request.limit)
                searches["graph"] = lambda: graph.search(where, constraints.graph, graph_query)
        wordy = bool(request.query) and has_letters(request.query or "")
        text = rephrase(request.query or "", resolved, request.task.type) if request.depth == "deep" else request.query
        if sources["lexical"] and wordy:
            lexical_query = RecallQuery(text=text, tags=tags, limit=request.limit)
            searches["lexical"] = lambda: connectors.lexical.search(where, lexical_query)
        if sources["semantic"]:
            semantic = connectors.semantic
            if not wordy:
                skipped["semantic"] = (SkipReason.NO_WORDS_TO_EMBED, None)
            elif request.depth == "fast":
                skipped["semantic"] = (SkipReason.DEPTH_FAST, None)
            elif semantic.unavailable:
                skipped["semantic"] = (SkipReason.SEMANTIC_UNAVAILABLE, semantic.unavailable)
            elif semantic.connector is None:
                skipped["semantic"] = (SkipReason.NO_SEMANTIC_CONNECTOR, None)
            else:
                semantic_query = RecallQuery(text=text, tags=tags, limit=request.limit)
                searches["semantic"] = lambda: semantic_search(semantic, where, semantic_query)
        return searches, skipped
