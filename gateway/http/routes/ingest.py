"""PUT /v1/items: a JSON array or NDJSON; writers need the ingest role, the tenant is theirs."""

from __future__ import annotations

from typing import Any

import anyio.to_thread

from api.writes import IngestReport, ItemIn
from audit.record import ItemsWritten
from gateway.http.operation import INGEST, batch_body, json_answer, ref
from gateway.http.traced import Call, requires, serving
from gateway.writes.items import ingest, parse_items_body


@requires("ingest")
async def handle(call: Call) -> tuple[int, IngestReport]:
    call.trace.decision = "write"
    entries = parse_items_body(await call.body(), call.request.headers.get("content-type"))
    return await write_items(call, entries)


async def write_items(call: Call, entries: list[Any]) -> tuple[int, IngestReport]:
    """Write the entries in the caller's tenant, wake the workers, and note the counts on the trace."""
    report = await anyio.to_thread.run_sync(ingest, call.context.store, call.actor.tenant, entries)
    if report.created or report.updated:
        call.context.nudge_workers()
    call.trace.record(
        ItemsWritten(
            received=len(entries),
            created=report.created,
            updated=report.updated,
            unchanged=report.unchanged,
            rejected=len(report.rejected),
        )
    )
    return 200, IngestReport.model_validate(report.as_dict())


# The operations this module serves (gateway/http/operation.py).
OPERATIONS = (
    INGEST.operation(
        "PUT /v1/items: Write items (idempotent by id)",
        serving("ingest", handle),
        json_answer("What was written, and what was rejected and why", ref(IngestReport)),
        errors={400: "the body is neither a JSON array nor NDJSON"},
        body=batch_body("item", ItemIn),
    ),
)
