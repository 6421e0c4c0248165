"""POST /v1/policy/explain: what a policy (in force, or a candidate) decides for an actor, and why."""

from __future__ import annotations

from api.policy import ExplainReport, ExplainRequest
from audit.record import PolicyExplained
from core.errors import BadRequest, ConfigurationError, Forbidden, PolicyUnavailable, SchemaError
from core.instants import utc_now
from gateway.http.operation import POLICY, json_answer, json_body, ref
from gateway.http.traced import Call, requires, serving
from gateway.pipeline.subjects import request_subjects
from gateway.policy.candidate import inline_bundle, open_candidate
from gateway.policy_tools.explain import differences, explain, parse_actor, parse_items, parse_request

FIELDS = frozenset({"actor", "request", "items", "policies"})
CANDIDATE_COST = 4  # admission units: a candidate compiles in a policy process of its own


@requires("policy_admin", admit=False)
async def handle(call: Call) -> tuple[int, ExplainReport]:
    """The caller's tenant only: the hypothetical actor may be anyone of it, never of another."""
    body = await call.json()
    if not isinstance(body, dict):
        raise BadRequest("body: expected a JSON object {actor, request, items, policies}")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise BadRequest(f"{unknown[0]}: unknown field")
    actor = parse_actor(body.get("actor"))
    if actor.tenant != call.actor.tenant:
        raise Forbidden("actor.tenant: must be the caller's own tenant")
    request, ids = parse_request(body.get("request")), parse_items(body.get("items"))
    bundle = inline_bundle(body["policies"]) if body.get("policies") is not None else None
    context, now = call.context, utc_now()
    subjects = request_subjects(context.connectors.exact, actor, request)
    candidate_revision = bundle.revision if bundle else None
    call.trace.record(
        PolicyExplained(
            actor=actor.principal,
            task=request.task.type,
            items=len(ids),
            in_force=context.policy.revision,
            candidate=candidate_revision,
        )
    )
    async with call.admitted(1 + (CANDIDATE_COST if bundle else 0)):
        in_force = await explain(context.policy, context.store, actor, request, ids, now, subjects)
        if bundle is None:
            return 200, ExplainReport.model_validate({"in_force": in_force.as_json()})
        try:
            engine = await open_candidate(bundle)
        except ConfigurationError as exc:  # the candidate's own compile error, with file:line
            raise SchemaError(f"policies: {exc.message}") from exc
        try:
            candidate = await explain(engine, context.store, actor, request, ids, now, subjects)
        except PolicyUnavailable as exc:  # the candidate's failure, not the service's: as impact answers it
            raise BadRequest(f"policies: the candidate failed at evaluation (it would answer 503): {exc.message}") from exc
        finally:
            await engine.aclose()
    answer = {"in_force": in_force.as_json(), "candidate": candidate.as_json(), "differences": differences(in_force, candidate)}
    return 200, ExplainReport.model_validate(answer)


# The operations this module serves (gateway/http/operation.py).
OPERATIONS = (
    POLICY.operation(
        "POST /v1/policy/explain: Explain a decision and named items for a hypothetical actor, in force or against a candidate",
        serving("policy_explain", handle),
        json_answer(
            "The decision, its constraints, and per item the denying checks and excluding constraints", ref(ExplainReport)
        ),
        errors={
            400: "malformed JSON, an unknown field, a bad actor, request or item id",
            403: "an `actor.tenant` other than the caller's",
            422: "a malformed request, or a candidate that does not compile (file:line)",
        },
        body=json_body(ref(ExplainRequest)),
        description="Items are read in the caller's tenant only (another tenant's id is `not_found`); envelopes only, never text.",
    ),
)
