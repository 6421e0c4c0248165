"""POST /v1/retrieve."""

from __future__ import annotations

from api.retrieve import RetrieveRequest, RetrieveResponse
from core.request import parse_retrieve
from gateway.admission import retrieve_cost
from gateway.http.operation import RETRIEVE, json_answer, json_body, ref
from gateway.http.traced import Call, requires, serving
from gateway.telemetry import layer


@requires(admit=False)
async def handle(call: Call) -> tuple[int, RetrieveResponse]:
    """Admitted at the cost its body implies (a deep walk, synthesis and large budgets cost more)."""
    actor = call.actor
    request = parse_retrieve(await call.json())
    attributes = {
        "gen_ai.operation.name": "retrieval",
        "gen_ai.data_source.id": "gateway",
        "gateway.mode": request.effective_mode,
    }
    async with call.admitted(retrieve_cost(request, call.context.settings.default_budget_bytes)):
        with layer("retrieval", attributes):
            body = await call.context.pipeline.run(actor, request, call.trace)
    return 200, body


# The operations this module serves (gateway/http/operation.py).
OPERATIONS = (
    RETRIEVE.operation(
        "POST /v1/retrieve: Retrieve the context for one task",
        serving("retrieve", handle),
        json_answer("The packed context", ref(RetrieveResponse)),
        errors={
            400: "malformed JSON, identity fields in the body, synthesize without a model, expand without a cursor",
            404: "a cursor that is unknown, expired, spent or another actor's",
            409: "a cursor another expand keeps advancing",
            422: None,
        },
        body=json_body(ref(RetrieveRequest), "Only `task.type` is required; unknown fields are refused (422)"),
        description="Any authenticated key; the policy decides what the actor may read (403 `policy_denied`).",
    ),
)
