"""The entities a request is about, resolved and verified as a retrieve does it (for explain)."""

from __future__ import annotations

from connectors.base import ExactConnector
from core.actor import Actor
from core.errors import ConnectorError, PolicyUnavailable
from core.request import RetrieveRequest
from gateway.pipeline.entities import resolve
from gateway.policy.base import PolicyEngine
from gateway.policy.decide import Constraints, Subjects
from gateway.policy.verify import verify


def request_subjects(exact: ExactConnector, actor: Actor, request: RetrieveRequest) -> Subjects:
    """Subjects of `request` under a decision's constraints, verified by the engine that decided."""

    async def subjects(engine: PolicyEngine, constraints: Constraints) -> tuple[str, ...]:
        if not request.entities:
            return ()
        resolution, read = await resolve(exact, constraints.items, request.entities)
        names = tuple(dict.fromkeys(e for record in read for e in record.linked_entities()))
        try:
            linked = await exact.linked(constraints.tenant, names)
        except ConnectorError as exc:  # as in a retrieve: what cannot be verified is no decision
            raise PolicyUnavailable("the entities the request names could not be read for verification") from exc
        verdict = await verify(engine, actor, request.task, constraints, read, linked)
        return resolution.keep(verdict.allowed_ids).subjects

    return subjects
