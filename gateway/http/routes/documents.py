"""PUT /v1/documents/{id}: a Markdown body with front matter, cut into section items."""

from __future__ import annotations

import anyio.to_thread

from api.writes import ID, DocumentReport
from audit.record import DocumentWritten
from gateway.http.operation import INGEST, NOT_FOUND_ROUTE, STRING, json_answer, path_parameter, ref
from gateway.http.traced import Call, requires, serving
from gateway.writes.documents import parse_document
from gateway.writes.items import ingest_document


@requires("ingest")
async def handle(call: Call) -> tuple[int, DocumentReport]:
    actor = call.actor
    document = parse_document(call.request.path_params["document_id"], await call.body())
    report = await anyio.to_thread.run_sync(ingest_document, call.context.store, actor.tenant, document)
    if report["changed"]:
        call.context.nudge_workers()
    call.trace.record(DocumentWritten.of(report))
    return (200 if not report["rejected"] else 422), DocumentReport.model_validate(report)


# The operations this module serves (gateway/http/operation.py).
OPERATIONS = (
    INGEST.operation(
        "PUT /v1/documents/{document_id}: Write a Markdown document, cut into section items",
        serving("document", handle),
        json_answer("The document's sections as written", ref(DocumentReport)),
        errors={
            400: "a bad document id, a body that is not UTF-8 text or holds NUL",
            404: NOT_FOUND_ROUTE,
            422: "a section was rejected (the report says why)",
        },
        also={422: ref(DocumentReport)},
        parameters=(path_parameter("document_id", "The document's id", ID),),
        body={
            "required": True,
            "description": "Markdown; front matter holds the envelope fields of `ItemIn` (acl is required)",
            "content": {"text/markdown": {"schema": STRING}},
        },
    ),
)
