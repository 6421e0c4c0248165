"""The response body of a retrieve or expand, and what the trail keeps of the request."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from api.retrieve import (
    BudgetReport,
    Decision,
    Depth,
    Mode,
    ResolvedEntity,
    RetrievedItem,
    RetrieveResponse,
    Share,
    SourceStatus,
)
from api.wire import clear_fields
from audit.record import DepthRecord, Fingerprint, RequestShape, SourceRecord, TraceBuilder
from core.records import SourceResult
from core.request import RetrieveRequest
from gateway.pipeline.budget import Packed
from gateway.pipeline.entities import Resolution
from gateway.pipeline.ranking import Ranked
from gateway.privacy.mask import Masking

EMPTY_REASON: Final = "no_relevant_permitted_items"
CITATION_PREFIX = {"memory": "M", "document": "D", "property": "P", "edge": "E"}
RESOLVED_FROM = {"domain": "website", "profile": "website"}
# When the policy masks, every string of an item and of an entity, at any depth, is masked (see
# `mask_fields`) except those of the fields the contract marks clear (api/retrieve.py): ids,
# enumerations, instants, and an item's `text`, masked from stored spans before packing. A field
# added later is masked until it is marked. Numbers, booleans and nulls are never masked.
ITEM_NOT_MASKED = clear_fields(RetrievedItem)
ENTITY_NOT_MASKED = clear_fields(ResolvedEntity)
# An echoed identifier of these kinds (`resolved_from`) is one value of its type as a whole.
IDENTIFIER_TYPES = {"email": "EMAIL_ADDRESS", "phone": "PHONE_NUMBER"}


def request_shape(request: RetrieveRequest, trace: TraceBuilder) -> RequestShape:
    """What the trace keeps of the request: its shape, hashes and sizes, never its text."""
    entities: list[dict[str, Fingerprint]] = [
        {kind: trace.fingerprint(value) for kind, value in ref.model_dump(exclude_none=True).items()} for ref in request.entities
    ]
    return RequestShape(
        task=request.task.model_dump(),
        mode=request.effective_mode,
        mode_requested=request.mode,
        kinds=list(request.kinds) if request.kinds is not None else None,
        sources=request.sources.model_dump(),
        depth=request.depth,
        budget_bytes=request.budget.bytes if request.budget else None,
        as_of=request.as_of,
        query=trace.fingerprint(request.query) if request.query else None,
        entities=entities,
        fetch_count=len(request.fetch or ()),
        tags=[trace.fingerprint(tag) for tag in request.filters.tags] if request.filters else [],
        include_historical=request.include_historical,
        graph=request.graph.model_dump(),
    )


def source_records(results: dict[str, SourceResult], allowed_ids: frozenset[str]) -> dict[str, SourceRecord]:
    """Per source status and timing. `count` holds only candidates the policy confirmed."""
    return {
        name: SourceRecord(
            status=result.status,
            count=sum(1 for c in result.candidates if c.record.id in allowed_ids),
            ms=round(result.ms, 3),
            detail=result.detail or None,
            skip=result.skip,
            lag=result.lag,
            model=result.model,
        )
        for name, result in results.items()
    }


def respond(
    trace_id: str,
    mode: Mode,
    revision: str,
    packed: Packed,
    sources: dict[str, SourceRecord],
    timings: Mapping[str, float | None],
    depth: DepthRecord,
    cursor: str | None,
) -> RetrieveResponse:
    items = [
        RetrievedItem.model_validate(item_body(ranked, citation)) for ranked, citation in zip(packed.items, cite(packed.items))
    ]
    return RetrieveResponse(
        trace_id=trace_id,
        mode=mode,
        decision=Decision(allow=True, policy_revision=revision, reasons=[]),
        entities=[],
        items=items,
        sources={name: SourceStatus(**record.wire()) for name, record in sources.items()},
        depth=Depth(**depth.model_dump(mode="json")),
        budget=BudgetReport(
            limit_bytes=packed.limit_bytes,
            used_bytes=packed.used_bytes,
            per_source={name: Share(**share) for name, share in packed.per_source.items()},
        ),
        partial=any(s.status in ("error", "timeout") for s in sources.values()),
        empty_reason=None if items else EMPTY_REASON,
        cursor=cursor,
        answer=None,
        timings=dict(timings),
    )


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
    """The item's fields by their wire names (an edge's `from`, `to`, `relation`, `confidence` and
    `weight` only on an edge); `respond` makes the contract's `RetrievedItem` of them."""
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
        "valid_from": record.valid_from,
        "valid_to": record.valid_to,
        "recorded_at": record.recorded_at,
        "source": {"system": record.source_system, "uri": record.source_uri},
        "found_by": list(ranked.entry.found_by),
        "pieces": list(ranked.entry.pieces),
    }
    if record.kind == "edge":
        body.update(
            {
                "from": record.edge_from,
                "to": record.edge_to,
                "relation": record.relation,
                "confidence": record.confidence,
                "weight": record.weight,
            }
        )
    return body


def entities_report(resolution: Resolution) -> list[ResolvedEntity]:
    report: list[ResolvedEntity] = []
    for entity in resolution.entities:
        record = entity.record
        if entity.tombstone:  # a bare tombstone: it existed, nothing more
            report.append(ResolvedEntity(id=record.id, kind=record.entity_type or "entity", status="pending_deletion"))
            continue
        given = entity.resolved_from
        report.append(
            ResolvedEntity(
                id=record.id,
                kind=record.entity_type or "entity",
                status="live",
                resolved_from={RESOLVED_FROM.get(given.kind, given.kind): given.value},
                merged_from=list(entity.merged_from),
                aliases=list(entity.aliases),
            )
        )
    return report


async def mask_fields(body: RetrieveResponse, masking: Masking, keep: frozenset[str], question: str = "") -> RetrieveResponse:
    """The body with every string of its items and entities masked but those of fields the contract
    marks clear, with the request's placeholders (those of the text), the types in `keep` left in
    clear. Then one mask per value: whatever was masked in a field or named in the question is
    masked in every item's text too, where the analyzer missed it."""
    items, entities = [item.wire() for item in body.items], [entity.wire() for entity in body.entities]
    objects = [(item, ITEM_NOT_MASKED) for item in items] + [(entity, ENTITY_NOT_MASKED) for entity in entities]
    masked = await masking.fields(objects, keep, IDENTIFIER_TYPES, also=(question,) if question else ())
    items, entities = masked[: len(items)], masked[len(items) :]
    texts = [item for item in items if isinstance(item.get("text"), str)]
    for item, text in zip(texts, masking.sweep([item["text"] for item in texts], keep)):
        item["text"] = text
    return body.model_copy(
        update={
            "items": [RetrievedItem.model_validate(item) for item in items],
            "entities": [ResolvedEntity.model_validate(entity) for entity in entities],
        }
    )
