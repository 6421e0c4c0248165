"""POST /v1/retrieve."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.pipeline.request import parse_retrieve
from gateway.pipeline.expand import expand
from gateway.pipeline.retrieve import retrieve
from gateway.http.traced import Call, traced
from gateway.telemetry import layer


async def handle(call: Call) -> tuple[int, dict[str, Any]]:
    actor = call.authenticate()
    request = parse_retrieve(await call.json())
    context = call.context
    run = expand if request.effective_mode == "expand" else retrieve
    attributes = {"gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": "gateway", "gateway.mode": request.effective_mode}
    with layer("retrieval", attributes):
        body = await run(
            settings=context.settings,
            store=context.store,
            policy=context.policy,
            connectors=context.connectors,
            privacy=context.privacy,
            synthesizer=context.synthesizer,
            actor=actor,
            request=request,
            trace=call.trace,
        )
    return 200, body


async def retrieve_route(request: Request) -> Response:
    return await traced(request, "retrieve", handle)
