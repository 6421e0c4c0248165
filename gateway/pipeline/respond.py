"""The response body of a retrieve or expand, and what the trail keeps of the request."""

from __future__ import annotations

from typing import Any

from audit.lineage import DepthRecord, Fingerprint, RequestShape, SourceRecord
from audit.trace import TraceBuilder
from core.instants import rfc3339
from core.records import SourceResult
from core.request import RetrieveRequest
from gateway.pipeline.budget import Packed
from gateway.pipeline.entities import TOMBSTONE, Resolution
from gateway.pipeline.ranking import Ranked
from gateway.privacy.mask import Masking

EMPTY_REASON = "no_relevant_permitted_items"
CITATION_PREFIX = {"memory": "M", "document": "D", "property": "P", "edge": "E"}
RESOLVED_FROM = {"domain": "website", "profile": "website"}
# When the policy masks, every string of an item and of an entity, at any depth, is masked (see
# `mask_fields`) except these top-level fields: an allowlist, so a field added later is masked
# unless it is added here. Ids, enumerations (the store's, or the policy's vocabulary of scopes and
# relations) and instants; an item's `text` was masked from stored spans before packing. Numbers,
# booleans and nulls are never masked.
ITEM_NOT_MASKED = frozenset(
    {
        "id",
        "entity",
        "document",
        "from",
        "to",
        "pieces",
        "citation",  # ids
        "kind",
        "status",
        "authority",
        "sensitivity",
        "found_by",
        "scope",
        "relation",  # enumerations
        "valid_from",
        "valid_to",
        "recorded_at",  # instants
        "text",  # masked before packing
    }
)
ENTITY_NOT_MASKED = frozenset({"id", "kind", "status", "merged_from", "aliases"})
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
        )
        for name, result in results.items()
    }


def respond(
    trace_id: str,
    mode: str,
    revision: str,
    packed: Packed,
    sources: dict[str, SourceRecord],
    timings: dict[str, float],
    depth: DepthRecord,
    cursor: str | None,
) -> dict[str, Any]:
    items = [item_body(ranked, citation) for ranked, citation in zip(packed.items, cite(packed.items))]
    return {
        "trace_id": trace_id,
        "mode": mode,
        "decision": {"allow": True, "policy_revision": revision, "reasons": []},
        "entities": [],
        "items": items,
        "sources": {name: record.wire() for name, record in sources.items()},
        "depth": depth.model_dump(mode="json"),
        "budget": {"limit_bytes": packed.limit_bytes, "used_bytes": packed.used_bytes, "per_source": packed.per_source},
        "partial": any(s.status in ("error", "timeout") for s in sources.values()),
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
            {
                "from": record.edge_from,
                "to": record.edge_to,
                "relation": record.relation,
                "confidence": record.confidence,
                "weight": record.weight,
            }
        )
    return body


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


async def mask_fields(body: dict[str, Any], masking: Masking, keep: frozenset[str], question: str = "") -> None:
    """The body's items and entities with every string but the allowlisted fields masked, in place,
    with the request's placeholders (those of the text), the types in `keep` left in clear. Then one
    mask per value: whatever was masked in a field or named in the question is masked in every
    item's text too, where the analyzer missed it."""
    items, entities = body["items"], body["entities"]
    objects = [(item, ITEM_NOT_MASKED) for item in items] + [(entity, ENTITY_NOT_MASKED) for entity in entities]
    masked = await masking.fields(objects, keep, IDENTIFIER_TYPES, also=(question,) if question else ())
    body["items"], body["entities"] = masked[: len(items)], masked[len(items) :]
    texts = [item for item in body["items"] if isinstance(item.get("text"), str)]
    for item, text in zip(texts, masking.sweep([item["text"] for item in texts], keep)):
        item["text"] = text
