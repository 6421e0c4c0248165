"""Audit review endpoints for principals with the auditor role, own tenant only."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse

from audit.chain import verify
from gateway.routes.traced import Call, traced


async def verify_chain(call: Call) -> tuple[int, dict[str, Any]]:
    """GET /v1/audit/verify: recompute the tenant's hash chain and name the first broken link."""
    actor = call.authenticate(required_role="auditor")
    call.trace.decision = "read"
    report = await anyio.to_thread.run_sync(verify, call.context.store, actor.tenant)
    call.trace.record(audit_verify={"ok": report["ok"], "rows": sum(c["rows"] for c in report["chains"].values())})
    return 200, report


async def verify_route(request: Request) -> JSONResponse:
    return await traced(request, "audit_verify", verify_chain)
