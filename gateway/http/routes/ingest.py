"""PUT /v1/items: a JSON array or NDJSON; writers need the ingest role, the tenant is theirs.

An NDJSON body (`Content-Type: application/x-ndjson`, or `application/jsonl`) is streamed: read a
part at a time (gateway/http/line_stream.py), each part admitted and written on its own, so a body of
any length loads in bounded memory and no seat is held while the next part arrives. A JSON array
is one body, within GATEWAY_MAX_BODY_BYTES.
"""

from __future__ import annotations

import functools
from typing import Any

import anyio.to_thread

from api.writes import IngestReport, ItemIn
from audit.record import ItemsWritten
from core.errors import BadRequest
from gateway.http.line_stream import line_parts
from gateway.http.operation import INGEST, batch_body, json_answer, ref
from gateway.http.traced import Call, requires, serving
from gateway.writes.items import IngestReport as Report
from gateway.writes.items import ingest, parse_items_body, parse_line

PART_ITEMS = 500  # lines of a streamed body written together (one transaction, one admission)


def streamed(content_type: str | None) -> bool:
    """Whether a body of this type is read as a stream of lines."""
    kind = (content_type or "").split(";")[0].strip().lower()
    return kind in ("application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonl")


@requires("ingest", admit=False)
async def handle(call: Call) -> tuple[int, IngestReport]:
    content_type = call.request.headers.get("content-type")
    if streamed(content_type):
        return await write_stream(call)
    entries = parse_items_body(await call.body(), content_type)
    async with call.admitted(1):
        return await write_items(call, entries)


async def write_items(call: Call, entries: list[Any]) -> tuple[int, IngestReport]:
    """Write the entries in the caller's tenant, wake the workers, and note the counts on the trace."""
    write = functools.partial(
        ingest, call.context.store, call.actor.tenant, entries, intake=call.context.connectors.semantic.intake
    )
    report = await anyio.to_thread.run_sync(write)
    if report.created or report.updated:
        call.context.nudge_workers()
    call.trace.record(_written(len(entries), report))
    return 200, IngestReport.model_validate(report.as_dict())


async def write_stream(call: Call) -> tuple[int, IngestReport]:
    """Write a streamed NDJSON body part by part. A part refused by admission (429) or a stalled
    body (408) ends the call; the parts before it stay written and the trace counts them, and the
    same stream sent again is safe (writes are idempotent by id: what landed comes back unchanged)."""
    settings = call.context.settings
    report, received = Report(), 0
    try:
        async for lines in line_parts(
            call.request,
            part_items=PART_ITEMS,
            part_bytes=settings.max_body_bytes,
            line_limit=settings.max_body_bytes,
            timeout_s=settings.body_timeout_ms / 1000,
        ):
            entries = [parse_line(line, number, received + i) for i, (number, line) in enumerate(lines)]
            write = functools.partial(
                ingest,
                call.context.store,
                call.actor.tenant,
                entries,
                first=received,
                intake=call.context.connectors.semantic.intake,
            )
            async with call.admitted(1, part=True):
                part = await anyio.to_thread.run_sync(write)
            report.add(part)
            received += len(entries)
            if part.created or part.updated:
                call.context.nudge_workers()
    finally:
        call.trace.record(_written(received, report))
    if not received:
        raise BadRequest("body: expected NDJSON, one item per line")
    return 200, IngestReport.model_validate(report.as_dict())


def _written(received: int, report: Report) -> ItemsWritten:
    return ItemsWritten(
        received=received,
        created=report.created,
        updated=report.updated,
        unchanged=report.unchanged,
        rejected=report.rejected_count,
    )


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
