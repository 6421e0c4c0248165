"""Explain: what a policy decides for one actor and request, and why each named item is in or out.

Three answers, each from the real thing rather than a copy of its logic: the decision from
data.gateway.request; each item's verdict from data.gateway.items (and the checks it fails from
data.gateway.items.failures where the policy defines it: the project's policy reports the first failing
check of each item); and whether the SQL pushdown would even consider the item, from the pushdown's
own condition run against the store, part by part (every part that excludes it is named).

Items are read in the actor's tenant only: an id of another tenant is `not_found`, exactly as an id
nobody holds. Only envelopes are read out, never an item's text, name or any other free text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from sqlalchemy import case, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from connectors.sql.cancel import cancellable, watched
from connectors.sql.exact import SqlExactConnector
from connectors.sql.pushdown import bound, conjuncts, item, permitted, record_from_row
from core.actor import Actor
from core.constraints import ItemFilter
from core.errors import BadRequest, ConnectorError, PolicyUnavailable
from core.records import Record
from core.request import RetrieveRequest, parse_retrieve
from core.validation import describe_validation_error, has_nul, principal_id_problem, tenant_problem
from gateway.policy.base import PolicyEngine
from gateway.policy.decide import Constraints, Decision, Subjects, decide
from gateway.policy.verify import items_input, verdict_from

MAX_ITEMS = 50
FAILURES = "gateway.items.failures"  # failing checks, as [id, reason]; a policy may not define it

# What each failing check of policies/gateway/items/items.rego means, in its reason order.
CHECKS = {
    "tenant": "the item belongs to a tenant other than the constraints' tenant",
    "acl": "none of the actor's principals (user, groups, roles, or *) is in the item's acl",
    "sensitivity": "the item's sensitivity is not among the constraints' sensitivities (above the ceiling)",
    "validity": "the item is not valid at the constraints' valid_at (and history does not cover it)",
    "scope": "the item has scopes and none of them is among the constraints' scopes",
    "kind": "the item's kind is not among the constraints' kinds",
    "status": "the item's status is not among the readable statuses",
    "attachment": "the item is attached to an entity the request is not about",
    "linked_entity": "the item names an entity (its subject, attachment or an edge's end) the actor may not see",
}
# What each part of the SQL pushdown's condition (connectors.sql.pushdown.conjuncts) requires.
CONSTRAINTS = {
    "tenant": "tenant equals the constraints' tenant",
    "kind": "kind is among the constraints' kinds",
    "sensitivity": "sensitivity is among the constraints' sensitivities",
    "status": "status is among the constraints' statuses",
    "valid_from": "valid_from is open or not after valid_at",
    "valid_to": "valid_to is open or after valid_at, unless history is read",
    "acl": "one of the constraints' principals is in the acl",
    "scope": "unscoped, or one of the constraints' scopes",
    "attachment": "attached to nothing, or to an entity the request is about",
    "tombstone": "the entity named in this column is not pending deletion",
    "linked_entity": "the entity named in this column is admitted by the same constraints",
}


class _ActorBody(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    id: str
    tenant: str
    roles: list[str] = Field(default_factory=list, max_length=50)
    groups: list[str] = Field(default_factory=list, max_length=200)
    clearance: str = Field(min_length=1, max_length=50)

    @field_validator("id", "tenant")
    @classmethod
    def identity(cls, value: str, info: ValidationInfo) -> str:
        """The id and the tenant are checked as a key's are (core.validation)."""
        problem = {"id": principal_id_problem, "tenant": tenant_problem}[str(info.field_name)](value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("roles", "groups")
    @classmethod
    def names(cls, value: list[str]) -> list[str]:
        if any(not 1 <= len(name) <= 200 for name in value):
            raise ValueError("each name has 1 to 200 characters")
        return value


def parse_actor(value: Any) -> Actor:
    """The hypothetical actor `{id, tenant, roles, groups, clearance}`; malformed is a 400 naming the field."""
    if not isinstance(value, dict):
        raise BadRequest("actor: expected an object {id, tenant, roles, groups, clearance}")
    if has_nul(value):
        raise BadRequest("actor: strings must not contain the NUL character")
    try:
        body = _ActorBody.model_validate(value)
    except ValidationError as exc:
        raise BadRequest(_under("actor", describe_validation_error(exc))) from exc
    return Actor(body.id, body.tenant, tuple(body.roles), tuple(body.groups), body.clearance)


def parse_request(value: Any) -> RetrieveRequest:
    """The retrieve body to explain; a malformed one is a 400 (or 422) naming `request.<field>`."""
    try:
        return parse_retrieve(value)
    except BadRequest as exc:
        raise type(exc)(_under("request", exc.message)) from exc


def _under(field: str, message: str) -> str:
    """A validation message whose fields are named from the body's root (`task.type: ...`) named
    under `field` instead (`request.task.type: ...`)."""
    parts = message.split("; ")
    return "; ".join(field + p.removeprefix("body") if p.startswith("body") else f"{field}.{p}" for p in parts)


def parse_items(value: Any) -> tuple[str, ...]:
    """The item ids to explain: at most MAX_ITEMS, each 1 to 200 characters."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_ITEMS:
        raise BadRequest(f"items: expected a list of at most {MAX_ITEMS} item ids")
    for index, item_id in enumerate(value):
        if not isinstance(item_id, str) or not 1 <= len(item_id) <= 200 or "\x00" in item_id:
            raise BadRequest(f"items[{index}]: expected an item id of 1 to 200 characters")
    return tuple(dict.fromkeys(value))


@dataclass(frozen=True, slots=True)
class Failure:
    """One failing check of the item policy: the rule that reported it, its reason, what that means."""

    rule: str
    reason: str
    meaning: str


def shown(record: Record) -> dict[str, Any]:
    """The envelope as explain shows it: what the policy reads, but for `slot`, free text that
    responses mask (a name or an address can stand in it), left out as the decision log leaves it out."""
    return {key: value for key, value in record.envelope().items() if key != "slot"}


@dataclass(frozen=True, slots=True)
class ItemExplanation:
    """One named item: `allowed`, `denied` (the pushdown reads it, the policy drops it), `excluded`
    (the pushdown never reads it), `request_denied`, or `not_found` (in the actor's tenant)."""

    id: str
    status: str
    envelope: dict[str, Any] | None = None
    allowed: bool | None = None  # by data.gateway.items
    reason: str | None = None  # the policy's reason in data.gateway.items.denied
    denied_by: tuple[Failure, ...] = ()
    pushdown_admits: bool | None = None
    excluded_by: tuple[str, ...] = ()  # the pushdown's parts (conjuncts) that are false for the item

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "envelope": self.envelope,
            "policy": None
            if self.status in ("not_found", "request_denied")
            else {
                "allowed": self.allowed,
                "reason": self.reason,
                "denied_by": [{"rule": f.rule, "reason": f.reason, "meaning": f.meaning} for f in self.denied_by],
            },
            "pushdown": None
            if self.pushdown_admits is None
            else {
                "admits": self.pushdown_admits,
                "excluded_by": [{"constraint": c, "meaning": CONSTRAINTS[c.partition(":")[0]]} for c in self.excluded_by],
            },
        }


@dataclass(frozen=True, slots=True)
class Explanation:
    """What one policy revision decides for the actor and request, and for each named item."""

    engine: str
    revision: str
    allow: bool
    reasons: tuple[str, ...]
    constraints: dict[str, Any] | None
    subjects: tuple[str, ...]
    items: tuple[ItemExplanation, ...]
    failures_document: bool  # denied_by was read from data.gateway.items.failures (the policy defines it)

    def as_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "revision": self.revision,
            "decision": {"allow": self.allow, "reasons": list(self.reasons), "constraints": self.constraints},
            "subjects": list(self.subjects),
            "failures_document": self.failures_document,
            "items": [i.as_json() for i in self.items],
        }


async def explain(
    engine: PolicyEngine,
    store: Engine,
    actor: Actor,
    request: RetrieveRequest,
    ids: Sequence[str],
    now: datetime,
    subjects_of: Subjects,
) -> Explanation:
    """Decide, then explain every id (read in the actor's tenant) against that decision."""
    decision = await decide(engine, actor, request, now)
    found = await cancellable(_read_items, store, actor.tenant, tuple(ids))
    if decision.constraints is None:
        items = tuple(ItemExplanation(i, "request_denied", shown(found[i])) if i in found else _missing(i) for i in ids)
        return _explanation(decision, (), items, True)
    constraints = decision.constraints.with_subjects(await subjects_of(engine, decision.constraints))
    items, listed = await _items(engine, store, actor, request, constraints, ids, found)
    return _explanation(decision, constraints.subjects, items, listed)


def differences(in_force: Explanation, candidate: Explanation) -> dict[str, Any]:
    """Where a candidate decides otherwise than the policy in force: the decision, and item statuses."""
    before = {i.id: i.status for i in in_force.items}
    return {
        "decision": in_force.allow != candidate.allow,
        "items": [
            {"id": i.id, "in_force": before.get(i.id), "candidate": i.status}
            for i in candidate.items
            if before.get(i.id) != i.status
        ],
    }


def _missing(item_id: str) -> ItemExplanation:
    """Nothing with this id in the actor's tenant: said the same way whether another tenant has one or not."""
    return ItemExplanation(item_id, "not_found")


def _explanation(decision: Decision, subjects: tuple[str, ...], items: tuple[ItemExplanation, ...], listed: bool) -> Explanation:
    constraints = decision.constraints.policy_result if decision.constraints else None
    return Explanation(decision.engine, decision.revision, decision.allow, decision.reasons, constraints, subjects, items, listed)


async def _items(
    engine: PolicyEngine,
    store: Engine,
    actor: Actor,
    request: RetrieveRequest,
    constraints: Constraints,
    ids: Sequence[str],
    found: dict[str, Record],
) -> tuple[tuple[ItemExplanation, ...], bool]:
    if not found:
        return tuple(_missing(i) for i in ids), True
    linked_ids = tuple(dict.fromkeys(e for record in found.values() for e in record.linked_entities()))
    try:
        linked = await SqlExactConnector(store).linked(constraints.tenant, linked_ids)
    except ConnectorError as exc:  # as in a retrieve: what cannot be verified is no decision
        raise PolicyUnavailable("the entities the items name could not be read for verification") from exc
    policy_input = items_input(actor, request.task, constraints, found, linked)
    verdict = verdict_from(await engine.evaluate("items", policy_input), found.keys())
    failures = _failures(await _document(engine, FAILURES, policy_input))
    admitted = await cancellable(_pushdown, store, constraints.items, found)
    reasons = dict(verdict.denied)
    items = []
    for item_id in ids:
        record = found.get(item_id)
        if record is None:
            items.append(_missing(item_id))
            continue
        allowed, (admits, excluded_by) = item_id in verdict.allowed_ids, admitted.get(item_id, (False, ()))
        status = "excluded" if not admits else "allowed" if allowed else "denied"
        denied_by: tuple[Failure, ...] = ()
        if not allowed:
            denied_by = (
                tuple(Failure(f"data.{FAILURES}", r, CHECKS.get(r, "a check of this policy")) for r in failures.get(item_id, ()))
                if failures is not None
                else (
                    Failure(
                        "data.gateway.items.denied", reasons[item_id], CHECKS.get(reasons[item_id], "a check of this policy")
                    ),
                )
            )
        items.append(
            ItemExplanation(item_id, status, shown(record), allowed, reasons.get(item_id), denied_by, admits, excluded_by)
        )
    return tuple(items), failures is not None


async def _document(engine: PolicyEngine, path: str, policy_input: dict[str, Any]) -> Any:
    """Another document than an entry point, where the engine can read one (embedded; not OPA yet)."""
    reader = getattr(engine, "evaluate_path", None)
    return None if reader is None else await reader(path, policy_input)


def _failures(document: Any) -> dict[str, tuple[str, ...]] | None:
    """data.gateway.items.failures as reasons per id, in the policy's reason order; None when undefined or not pairs."""
    if not isinstance(document, list):
        return None
    order = {reason: n for n, reason in enumerate(CHECKS)}
    reasons: dict[str, set[str]] = {}
    for pair in document:
        if isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair):
            reasons.setdefault(pair[0], set()).add(pair[1])
    return {i: tuple(sorted(rs, key=lambda r: (order.get(r, len(order)), r))) for i, rs in reasons.items()}


def _read_items(store: Engine, tenant: str, ids: tuple[str, ...]) -> dict[str, Record]:
    """The items with these ids in this tenant only (one statement, whatever other tenants hold)."""
    if not ids:
        return {}
    statement = select(item).where(item.c.tenant == tenant, item.c.id.in_(ids))
    try:
        with watched(store) as conn:
            return {record.id: record for record in (record_from_row(row) for row in conn.execute(statement))}
    except SQLAlchemyError as exc:
        raise ConnectorError(f"item lookup failed: {type(exc).__name__}") from exc


def _pushdown(store: Engine, where: ItemFilter, found: dict[str, Record]) -> dict[str, tuple[bool, tuple[str, ...]]]:
    """Per item: whether `permitted` admits it, and which of its parts do not. An entity is read as the
    exact lookup reads entities (`permitted(("entity",))`), anything else as every other source reads."""
    result: dict[str, tuple[bool, tuple[str, ...]]] = {}
    entities = tuple(i for i, r in found.items() if r.kind == "entity")
    others = tuple(i for i, r in found.items() if r.kind != "entity")
    try:
        with watched(store) as conn:
            for kinds, ids in ((("entity",), entities), (None, others)):
                if not ids:
                    continue
                parts = conjuncts(kinds)
                statement = select(
                    item.c.id,
                    case((permitted(kinds), 1), else_=0).label("permitted"),
                    *(case((clause, 1), else_=0).label(f"part_{n}") for n, (_, clause) in enumerate(parts)),
                ).where(item.c.tenant == where.tenant, item.c.id.in_(ids))
                for row in conn.execute(statement, bound(where)):
                    m = row._mapping
                    excluded = tuple(name for n, (name, _) in enumerate(parts) if not m[f"part_{n}"])
                    result[m["id"]] = (bool(m["permitted"]), excluded)
    except SQLAlchemyError as exc:
        raise ConnectorError(f"pushdown check failed: {type(exc).__name__}") from exc
    return result
