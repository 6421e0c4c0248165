"""PUT /v1/documents/{id}: a Markdown body with front matter, cut into section items."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from audit.lineage import DocumentRecord
from gateway.http.traced import Call, requires, traced
from gateway.writes.documents import parse_document
from gateway.writes.items import ingest_document


@requires("ingest")
async def handle(call: Call) -> tuple[int, dict[str, Any]]:
    actor = call.actor
    call.trace.decision = "write"
    document = parse_document(call.request.path_params["document_id"], await call.body())
    report = await anyio.to_thread.run_sync(ingest_document, call.context.store, actor.tenant, document)
    if report["changed"]:
        call.context.nudge_workers()
    call.trace.lineage.document = DocumentRecord.model_validate(
        {key: report[key] for key in ("document", "sha256", "changed", "pieces", "created", "updated", "unchanged", "removed")}
    )
    return (200 if not report["rejected"] else 422), report


async def document_route(request: Request) -> Response:
    return await traced(request, "document", handle)
