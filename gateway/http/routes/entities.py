"""Entity and edge writes: PUT /v1/entities/{id}, POST /v1/entities/{id}/merge,
DELETE /v1/entities/{id}, PUT /v1/edges. Writers need the ingest role; the tenant is theirs."""

from __future__ import annotations

import re
from typing import Any

import anyio.to_thread

from api.writes import IngestReport, MergeRequest, MergeResult, TombstoneResult
from audit.record import EntityMerged, EntityTombstoned, EntityWritten
from core.errors import BadRequest
from core.validation import has_nul, validated
from gateway.http.operation import (
    ENTITY_ID,
    INGEST,
    MERGE_ROUTE,
    NOT_FOUND_ROUTE,
    batch_body,
    json_answer,
    json_body,
    ref,
)
from gateway.http.routes.ingest import write_items
from gateway.http.traced import Call, requires, serving
from gateway.writes.entities import mark_pending_deletion, merge
from gateway.writes.items import ID, Rejected, ingest, parse_items_body


def _entity_id(call: Call) -> str:
    entity_id = str(call.request.path_params["entity_id"])
    if not re.fullmatch(ID, entity_id):
        raise BadRequest("id: entity ids use letters, digits and _.:@- only, at most 200")
    return entity_id


@requires("ingest")
async def put_entity(call: Call) -> tuple[int, IngestReport]:
    actor = call.actor
    entity_id = _entity_id(call)
    body = await call.json()
    if not isinstance(body, dict):
        raise BadRequest("body: expected a JSON object")
    if body.get("id", entity_id) != entity_id:
        raise BadRequest("id: differs from the id in the path")
    if body.get("kind", "entity") != "entity":
        raise BadRequest("kind: this endpoint writes entities")
    report = await anyio.to_thread.run_sync(
        ingest, call.context.store, actor.tenant, [{**body, "id": entity_id, "kind": "entity"}]
    )
    if report.created or report.updated:
        call.context.nudge_workers()
    call.trace.record(EntityWritten(created=report.created, updated=report.updated, rejected=len(report.rejected)))
    return (422 if report.rejected else 200), IngestReport.model_validate(report.as_dict())


@requires("ingest")
async def merge_entity(call: Call) -> tuple[int, MergeResult]:
    actor = call.actor
    entity_id = _entity_id(call)
    into = validated(MergeRequest, await call.json()).into
    result = await anyio.to_thread.run_sync(merge, call.context.store, actor.tenant, entity_id, into)
    call.trace.record(EntityMerged(changed=result["changed"], entity=entity_id, into=into))
    return 200, MergeResult.model_validate(result)


@requires("ingest")
async def delete_entity(call: Call) -> tuple[int, TombstoneResult]:
    actor = call.actor
    result = await anyio.to_thread.run_sync(mark_pending_deletion, call.context.store, actor.tenant, _entity_id(call))
    call.trace.record(EntityTombstoned(changed=result["changed"], hidden_items=result["hidden_items"]))
    return 200, TombstoneResult.model_validate(result)


def edge_entry(entry: Any) -> Any:
    """An edge as sent to /v1/edges: kind is edge; a missing id is derived from (from, relation, to)."""
    if not isinstance(entry, dict) or has_nul(entry):
        return entry  # ingest rejects it with its reason
    entry = dict(entry)
    entry.setdefault("kind", "edge")
    if "id" not in entry:
        missing = [k for k in ("from", "relation", "to") if not isinstance(entry.get(k), str)]
        if missing:
            return Rejected(tuple(f"{k}: required (a string) unless the edge has an id" for k in missing))
        entry["id"] = f"edge:{entry['from']}:{entry['relation']}:{entry['to']}"[:200]
    return entry


@requires("ingest")
async def put_edges(call: Call) -> tuple[int, IngestReport]:
    entries = [edge_entry(e) for e in parse_items_body(await call.body(), call.request.headers.get("content-type"))]
    wrong_kind = [i for i, e in enumerate(entries) if isinstance(e, dict) and e.get("kind") != "edge"]
    if wrong_kind:
        raise BadRequest(f"[{wrong_kind[0]}].kind: this endpoint writes edges only")
    return await write_items(call, entries)


# The operations this module serves (gateway/http/operation.py).
OPERATIONS = (
    INGEST.operation(
        "PUT /v1/entities/{entity_id}: Write an entity",
        serving("entity", put_entity),
        json_answer("What was written", ref(IngestReport)),
        errors={
            400: "not a JSON object, an id other than the path's, a kind other than entity",
            404: NOT_FOUND_ROUTE,
            405: MERGE_ROUTE,
            422: "the entity was rejected (the report says why)",
        },
        also={422: ref(IngestReport)},
        parameters=(ENTITY_ID,),
        body=json_body(ref("EntityIn")),
    ),
    INGEST.operation(
        "DELETE /v1/entities/{entity_id}: Mark an entity pending deletion (everything attached is hidden at once)",
        serving("entity", delete_entity),
        json_answer("The tombstone", ref(TombstoneResult)),
        errors={400: "not an entity id", 404: "no such entity in this tenant", 405: MERGE_ROUTE},
        parameters=(ENTITY_ID,),
    ),
    INGEST.operation(
        "POST /v1/entities/{entity_id}/merge: Merge an entity into a survivor",
        serving("entity_merge", merge_entity),
        json_answer("The merge", ref(MergeResult)),
        errors={
            400: "malformed JSON, no `into`, unknown fields, a merge into itself",
            404: "either entity is not in this tenant",
            409: "the merge would close a cycle, or involves an entity pending deletion",
        },
        parameters=(ENTITY_ID,),
        body=json_body(ref(MergeRequest)),
    ),
    INGEST.operation(
        "PUT /v1/edges: Write edges",
        serving("edges", put_edges),
        json_answer("What was written, and what was rejected and why", ref(IngestReport)),
        errors={400: "the body is neither a JSON array nor NDJSON, or names another kind"},
        body=batch_body("edge", "EdgeIn"),
    ),
)
