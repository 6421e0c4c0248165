"""Verify: every candidate goes back to data.gateway.items in one batch; only explicit allows survive."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Collection, Iterable

from core.actor import Actor
from core.errors import PolicyUnavailable
from core.records import Record
from core.request import Task
from gateway.policy.base import PolicyEngine, check_items_result
from gateway.policy.decide import Constraints


@dataclass(frozen=True, slots=True)
class Verdict:
    allowed_ids: frozenset[str]
    denied: tuple[tuple[str, str], ...]  # (id, reason): each is a pushdown mismatch
    ms: float


def items_input(
    actor: Actor, task: Task, constraints: Constraints, records: dict[str, Record], linked: Iterable[Record] = ()
) -> dict[str, Any]:
    """The documented `input` of data.gateway.items for these records (by id) and linked entities."""
    return {
        "actor": actor.as_policy_input(),
        "task": task.model_dump(),
        "constraints": constraints.policy_result,
        "subjects": list(constraints.subjects),
        "items": [record.envelope() for record in records.values()],
        "entities": {entity.id: entity.envelope() for entity in linked},
    }


def verdict_from(result: Any, ids: Collection[str], started: float | None = None) -> Verdict:
    """Read the policy's answer about `ids`: only ids it allows and does not deny survive."""
    result = check_items_result(result)
    allowed = {i for i in result["allowed"] if isinstance(i, str)} & set(ids)
    denied_reasons: dict[str, str] = {}
    for entry in result.get("denied") or ():
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            denied_reasons[entry["id"]] = str(entry.get("reason", "denied"))
    if allowed & denied_reasons.keys():
        raise PolicyUnavailable("policy both allowed and denied the same item")
    # Fail closed: an id neither allowed nor denied is dropped like a denial.
    denied = tuple(sorted((i, denied_reasons.get(i, "not_allowed")) for i in set(ids) - allowed))
    ms = 0.0 if started is None else (time.perf_counter() - started) * 1000
    return Verdict(frozenset(allowed), denied, ms)


async def verify(
    engine: PolicyEngine,
    actor: Actor,
    task: Task,
    constraints: Constraints,
    records: Iterable[Record],
    linked: Iterable[Record] = (),
) -> Verdict:
    """The policy's verdict on every record. `linked` are the entities the records name (their
    subject, attachment, an edge's ends), so the policy can hold back an item whose entity it hides."""
    unique = {record.id: record for record in records}
    if not unique:
        return Verdict(frozenset(), (), 0.0)
    started = time.perf_counter()
    result = await engine.evaluate("items", items_input(actor, task, constraints, unique, linked))
    return verdict_from(result, unique.keys(), started)
