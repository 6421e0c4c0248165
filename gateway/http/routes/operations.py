"""Health, readiness and the loaded policy."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from core.store import store_reachable
from gateway.http.traced import Call, requires, traced


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> JSONResponse:
    context = request.app.state.context
    load = context.admission.saturation()
    checks = {
        "policy": "ok" if await context.policy.ready() else f"{context.policy.name} engine not answering",
        "store": "ok" if await anyio.to_thread.run_sync(store_reachable, context.store) else "unreachable",
        # Honest under a flood: past its capacity the process asks the balancer for no more calls.
        "admission": "ok" if not load["saturated"] else f"saturated: {load['in_flight']} of {load['capacity']} units in flight",
    }
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse({"status": "ready" if ready else "not ready", "checks": checks, "admission": load},
                        status_code=200 if ready else 503)


@requires()
async def _policy(call: Call) -> tuple[int, dict[str, Any]]:
    policy = call.context.policy
    return 200, {"engine": policy.name, "revision": policy.revision, "loaded_at": policy.loaded_at.isoformat()}


async def policy_route(request: Request) -> Response:
    return await traced(request, "policy", _policy)
