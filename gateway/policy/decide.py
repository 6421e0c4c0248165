"""Decide: one evaluation of data.gateway.request, before any search, turned into typed constraints."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from core.actor import Actor
from core.constraints import Disclosure, GraphLimits, ItemFilter
from core.errors import PolicyUnavailable
from core.instants import parse_rfc3339, rfc3339
from core.request import RetrieveRequest
from gateway.policy.base import PolicyEngine, check_request_result
from gateway.privacy.detect import ENTITY_TYPES


@dataclass(frozen=True, slots=True)
class Constraints:
    """An allow's constraints, split by reader: connectors get `items` (and the graph walk `graph`),
    masking reads `disclosure`; `policy_result` is the raw document, sent back to data.gateway.items."""

    items: ItemFilter
    graph: GraphLimits
    disclosure: Disclosure
    policy_result: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def tenant(self) -> str:
        return self.items.tenant

    @property
    def subjects(self) -> tuple[str, ...]:
        return self.items.subjects

    def with_subjects(self, subjects: tuple[str, ...]) -> Constraints:
        return replace(self, items=self.items.with_subjects(subjects))


@dataclass(frozen=True, slots=True)
class Decision:
    allow: bool
    reasons: tuple[str, ...]
    constraints: Constraints | None
    engine: str
    revision: str
    ms: float


def request_input(actor: Actor, request: RetrieveRequest, now: datetime) -> dict[str, Any]:
    """The documented `input` of data.gateway.request (no query text: policies decide on shape)."""
    return {
        "actor": actor.as_policy_input(),
        "task": request.task.model_dump(),
        "request": {
            "mode": request.effective_mode,
            "kinds": request.kinds,
            "as_of": request.as_of and rfc3339(request.as_of_instant),
            "graph": request.graph.model_dump(),
            "sources": request.sources.model_dump(),
            "depth": request.depth,
            "include_historical": request.include_historical,
            "entity_count": len(request.entities),
            "has_query": bool(request.query),
        },
        "now": rfc3339(now),
    }


def constraints_from(result: dict[str, Any]) -> Constraints:
    """Parse the policy's constraints; anything malformed is a policy failure, never a default."""
    c = result["constraints"]
    try:
        graph = c.get("graph") or {}
        pii = c.get("pii") or {}
        constraints = Constraints(
            items=ItemFilter(
                tenant=_text(c["tenant"]),
                principals=_texts(c["principals"]),
                sensitivities=_texts(c["sensitivities"]),
                valid_at=parse_rfc3339(c["valid_at"]),
                scopes=_texts(c["scopes"]),
                kinds=_texts(c["kinds"]),
                statuses=_texts(c["statuses"]),
                entity_statuses=_texts(c.get("entity_statuses", c["statuses"])),
                history=_flag(c.get("history", False)),
            ),
            graph=GraphLimits(
                relations=_texts(graph.get("relations", [])),
                max_depth=_whole(graph.get("max_depth", 1)),
                fanout=_whole(graph.get("max_fanout", 10)),
            ),
            disclosure=Disclosure(
                mask=_flag(pii.get("mask", True)),
                reveal=tuple(t for t in _texts(pii.get("reveal", [])) if t in ENTITY_TYPES),
            ),
            policy_result=c,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PolicyUnavailable(f"policy returned malformed constraints: {type(exc).__name__}") from exc
    return constraints


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("expected a non-empty string")
    return value


def _whole(value: Any) -> int:
    """A JSON whole number (3 or 3.0); a string or a boolean is malformed, not coerced."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer():
        raise ValueError("expected a whole number")
    return int(value)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("expected true or false")
    return value


def _texts(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError("expected a list")
    return tuple(_text(v) for v in value)


async def decide(engine: PolicyEngine, actor: Actor, request: RetrieveRequest, now: datetime) -> Decision:
    started = time.perf_counter()
    result = check_request_result(await engine.evaluate("request", request_input(actor, request, now)))
    reasons = tuple(str(r) for r in result.get("reasons") or ())
    constraints = constraints_from(result) if result["allow"] else None
    if constraints is not None and constraints.tenant != actor.tenant:
        raise PolicyUnavailable("policy constraints name a tenant other than the actor's")
    ms = (time.perf_counter() - started) * 1000
    return Decision(result["allow"], reasons, constraints, engine.name, engine.revision, ms)


# Resolves the entities a request is about, under a decision's constraints, verified by the engine
# that decided (gateway/pipeline/subjects.py makes one; explain takes one).
Subjects = Callable[[PolicyEngine, Constraints], Awaitable[tuple[str, ...]]]
