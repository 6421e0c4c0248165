"""POST /v1/policy/impact: a candidate policy replayed on the caller's tenant's recorded calls."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from core.errors import BadRequest, ConfigurationError, Forbidden
from core.validation import has_nul
from gateway.http.traced import Call, requires, traced
from gateway.policy.candidate import inline_bundle, open_candidate
from gateway.policy.impact import impact, parse_window, summary

FIELDS = ("policies", "since", "limit", "tenant")
COST = 4  # admission units: a run replays up to 10,000 calls on both policies


@requires("policy_admin", admit=False)
async def handle(call: Call) -> tuple[int, dict[str, Any]]:
    """The impact report of `policies` on the caller's tenant, with a `summary` for people."""
    call.trace.decision = "read"
    body = await call.json()
    if not isinstance(body, dict):
        raise BadRequest("body: expected a JSON object")
    if has_nul(body):
        raise BadRequest("body: strings must not contain the NUL character")
    unknown = sorted(set(body) - set(FIELDS))
    if unknown:
        raise BadRequest(f"{unknown[0]}: unknown field; expected {', '.join(FIELDS)}")
    tenant = call.actor.tenant
    if body.get("tenant", tenant) != tenant:
        raise Forbidden("tenant: impact replays the calls of the caller's own tenant only")
    window = parse_window(tenant, body.get("since"), body.get("limit"))
    bundle = inline_bundle(body.get("policies"))
    with call.admitted(COST):
        try:
            candidate = await open_candidate(bundle)
        except ConfigurationError as exc:
            raise BadRequest(f"policies: {exc.message}") from exc
        try:
            report = await impact(call.context.store, call.context.policy, candidate, window)
        finally:
            await candidate.aclose()
    call.trace.lineage.policy_impact = {
        "candidate_revision": report["candidate_revision"], "replayed": report["replayed"],
        "flips": sum(g["count"] for groups in report["flips"].values() for g in groups),
        "newly_allowed": report["items"]["newly_allowed"]["count"], "newly_denied": report["items"]["newly_denied"]["count"],
    }
    return 200, {**report, "summary": summary(report)}


async def policy_impact_route(request: Request) -> Response:
    return await traced(request, "policy_impact", handle)
