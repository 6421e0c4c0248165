"""POST /v1/retrieve."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from core.request import parse_retrieve
from gateway.admission import retrieve_cost
from gateway.http.traced import Call, requires, traced
from gateway.telemetry import layer


@requires(admit=False)
async def handle(call: Call) -> tuple[int, dict[str, Any]]:
    """Admitted at the cost its body implies (a deep walk, synthesis and large budgets cost more)."""
    actor = call.actor
    request = parse_retrieve(await call.json())
    attributes = {
        "gen_ai.operation.name": "retrieval",
        "gen_ai.data_source.id": "gateway",
        "gateway.mode": request.effective_mode,
    }
    with call.admitted(retrieve_cost(request, call.context.settings.default_budget_bytes)), layer("retrieval", attributes):
        body = await call.context.pipeline.run(actor, request, call.trace)
    return 200, body


async def retrieve_route(request: Request) -> Response:
    return await traced(request, "retrieve", handle)
