"""GET /v1/audit/evidence: the evidence pack of the caller's tenant over a period (audit.evidence.pack),
as one zip, for `gateway audit verify-pack`. Needs the auditor role; reads the caller's tenant only."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import anyio.to_thread

from audit.evidence import archive_chunks, pack_archive, signing_of
from audit.record import EvidenceExported
from core.errors import BadRequest
from core.instants import parse_rfc3339, rfc3339, utc_now
from gateway.http.operation import AUDIT, STRING, TRACE_ID_HEADER, query_parameter
from gateway.http.traced import Call, Stream, requires, serving

EVIDENCE_COST = 8  # admission units: it walks the chain's row hashes up to the period, like a proof, and more
PERIOD = ("since", "until")
ZIP = "application/zip"


def _period(call: Call) -> tuple[datetime, datetime]:
    params = call.request.query_params
    unknown = sorted(set(params) - set(PERIOD))
    if unknown:
        raise BadRequest(f"{unknown[0]}: unknown query parameter")
    instants: dict[str, datetime] = {}
    for name in PERIOD:
        if not params.get(name):
            raise BadRequest(f"{name}: required, an instant with its offset, such as 2026-11-30T00:00:00Z")
        try:
            instants[name] = parse_rfc3339(params[name])
        except ValueError as exc:
            raise BadRequest(f"{name}: expected an instant with its offset, such as 2026-11-30T00:00:00Z") from exc
    if instants["until"] <= instants["since"]:
        raise BadRequest("until: must come after since")
    return instants["since"], instants["until"]


@requires("auditor", admit=False)
async def evidence_pack(call: Call) -> tuple[int, dict[str, Any] | Stream]:
    """GET /v1/audit/evidence?since=&until=: the tenant's evidence pack of [since, until) as a zip.
    It reads the chain's row hashes from its start (the Merkle tree before the period), so it is
    admitted at EVIDENCE_COST units."""
    actor = call.actor
    since, until = _period(call)
    context = call.context
    async with call.admitted(EVIDENCE_COST):
        # Signs the tail first, and the chain again when its last checkpoint is older than the period's end.
        signing = await anyio.to_thread.run_sync(signing_of, context.audit.checkpointer, True, (actor.tenant, until))
        manifest, archive = await anyio.to_thread.run_sync(
            pack_archive, context.store, actor.tenant, since, until, signing, utc_now()
        )
    counts = manifest["counts"]
    call.trace.record(EvidenceExported.of(since=rfc3339(since) or "", until=rfc3339(until) or "", rows=counts["rows_in_period"]))
    return 200, Stream(archive_chunks(archive), ZIP)


# The operations this module serves (gateway/http/operation.py).
OPERATIONS = (
    AUDIT.operation(
        "GET /v1/audit/evidence: The tenant's evidence pack of a period, as a zip",
        serving("audit_evidence", evidence_pack),
        {
            "description": "The pack's files (rows, checkpoints, public keys, policy revisions, figures, manifest, "
            "README) in one zip, for `gateway audit verify-pack`",
            "headers": {"x-trace-id": {**TRACE_ID_HEADER, "required": True}},
            "content": {ZIP: {"schema": {**STRING, "contentMediaType": ZIP}}},
        },
        errors={
            400: "an unknown parameter, a missing or bad instant, or until not after since",
            409: "the overview's rollup does not agree with the period's rows (edited): `gateway audit verify` names the hour",
        },
        parameters=(
            {**query_parameter("since", "The period's start (included), RFC 3339 with its offset"), "required": True},
            {**query_parameter("until", "The period's end (excluded), RFC 3339 with its offset"), "required": True},
        ),
        description="Reads the caller's tenant only.",
    ),
)
