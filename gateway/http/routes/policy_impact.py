"""POST /v1/policy/impact: a candidate policy replayed on the caller's tenant's recorded calls."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import anyio

from api.policy import ImpactReport, ImpactRequest
from audit.record import PolicyImpactRun
from core import work
from core.errors import BadRequest, ConfigurationError, DeadlineExceeded, Forbidden
from gateway.http.operation import POLICY, json_answer, json_body, ref
from gateway.http.traced import Call, requires, serving
from gateway.policy.candidate import inline_bundle, open_candidate
from gateway.policy_tools.impact import impact, parse_window
from gateway.policy_tools.impact_report import summary

FIELDS = ("policies", "since", "limit", "tenant")
COST = 4  # admission units: a run replays up to 10,000 calls on both policies
DISCONNECT_POLL_S = 0.5  # how often a running replay looks whether its client is still there


@requires("policy_admin", admit=False)
async def handle(call: Call) -> tuple[int, ImpactReport]:
    """The impact report of `policies` on the caller's tenant, with a `summary` for people."""
    body = await call.json_object()
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise BadRequest(f"{unknown[0]}: unknown field; expected {', '.join(FIELDS)}")
    tenant = call.actor.tenant
    if body.get("tenant", tenant) != tenant:
        raise Forbidden("tenant: impact replays the calls of the caller's own tenant only")
    window = parse_window(tenant, body.get("since"), body.get("limit"))
    bundle = inline_bundle(body.get("policies"))
    async with call.admitted(COST):
        try:
            candidate = await open_candidate(bundle)
        except ConfigurationError as exc:
            raise BadRequest(f"policies: {exc.message}") from exc
        try:
            report = await _bounded(call, impact(call.context.store, call.context.policy, candidate, window))
        finally:
            # The candidate's process is the call's work too: charged, it prices the actor's next runs.
            work.charge(cpu_s=candidate.cpu_s())
            await candidate.aclose()
    call.trace.record(PolicyImpactRun.of(report))
    return 200, ImpactReport.model_validate({**report, "summary": summary(report)})


async def _bounded(call: Call, run: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    """The replay, stopped at its total deadline (504) or as soon as the client has gone (a 400 in
    its audit row: nobody is left to read the answer)."""
    deadline = call.context.settings.impact_deadline_seconds
    done: dict[str, Any] = {}
    left = False

    async def watch(scope: anyio.CancelScope) -> None:
        nonlocal left
        while not await call.request.is_disconnected():
            await anyio.sleep(DISCONNECT_POLL_S)
        left = True
        scope.cancel()

    async def replay(scope: anyio.CancelScope) -> None:
        done["report"] = await run
        scope.cancel()

    with anyio.move_on_after(deadline) as timer:
        async with anyio.create_task_group() as group:
            group.start_soon(watch, group.cancel_scope)
            group.start_soon(replay, group.cancel_scope)
    if "report" in done:
        return dict(done["report"])
    if left:
        raise BadRequest("the client left before the replay ended; impact stopped")
    assert timer.cancelled_caught
    raise DeadlineExceeded(f"impact: the replay ran past its {deadline} s deadline; narrow it with `limit` or `since`")


# The operations this module serves (gateway/http/operation.py).
OPERATIONS = (
    POLICY.operation(
        "POST /v1/policy/impact: Replay the tenant's recorded calls against a candidate policy",
        serving("policy_impact", handle),
        json_answer("Decisions that flip and items newly allowed or denied", ref(ImpactReport)),
        errors={
            400: "malformed JSON, an unknown field, a bad `since` or `limit`, a candidate that does not compile (file:line)",
            403: "a `tenant` other than the caller's",
            504: "`deadline_exceeded`: the replay ran past `GATEWAY_IMPACT_DEADLINE_SECONDS`",
        },
        body=json_body(ref(ImpactRequest)),
        description="Reads envelopes and request shapes only; the report holds counts, task types, roles and trace ids.",
    ),
)
