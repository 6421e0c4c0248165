"""The gateway's reading of policy results fails closed.

A tiny engine returns canned documents, so these units test the gateway's parsing (decide, verify,
check_request_result, check_items_result), not a policy: every malformed or contradictory answer is
PolicyUnavailable, never a default, never a Constraints, never an allowed item. Each malformed case
is a one-field change of a document the control test shows is parsed, so the failure is that field's.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest

from core.actor import Actor
from core.errors import PolicyUnavailable
from core.records import Record
from core.request import RetrieveRequest, Task
from gateway.policy.base import check_items_result, check_request_result
from gateway.policy.decide import Constraints, Decision, constraints_from, decide
from gateway.policy.verify import Verdict, verify

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
ALICE = Actor(id="alice", tenant="acme", roles=("agent",), groups=("sales",), clearance="confidential")
TASK = Task(type="account_followup", scope="sales")
REQUEST = RetrieveRequest(task=TASK, query="pricing")
DELETE = object()  # a mutation that removes the key


class CannedEngine:
    """A PolicyEngine that answers each entry point with a fixed document and records what it was asked."""

    name = "canned"
    revision = "canned-1"
    loaded_at = NOW

    def __init__(self, request: Any = None, items: Any = None) -> None:
        self.answers = {"request": request, "items": items}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def evaluate(self, entrypoint: str, policy_input: dict[str, Any]) -> Any:
        self.calls.append((entrypoint, policy_input))
        return copy.deepcopy(self.answers[entrypoint])

    async def ready(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None


def valid_constraints() -> dict[str, Any]:
    """The shape the project's request policy returns for alice (see policies/gateway/request)."""
    return {
        "tenant": "acme",
        "principals": ["user:alice", "group:sales", "role:agent", "*"],
        "max_sensitivity": "confidential",
        "sensitivities": ["public", "internal", "confidential"],
        "valid_at": "2026-11-30T12:00:00Z",
        "history": False,
        "pii": {"mask": True, "reveal": ["EMAIL_ADDRESS"]},
        "scopes": ["sales"],
        "kinds": ["memory", "document"],
        "statuses": ["active", "disputed"],
        "entity_statuses": ["active", "pending_deletion"],
        "graph": {"relations": ["reports_to", "works_at"], "max_depth": 2, "max_fanout": 10},
    }


def allow(constraints: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    return {"allow": True, "reasons": [], "constraints": valid_constraints() if constraints is None else constraints, **fields}


def changed(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """The valid constraints with the value at `path` replaced (or removed, for DELETE)."""
    constraints = valid_constraints()
    parent = constraints
    for key in path[:-1]:
        parent = parent[key]
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return constraints


def run_decide(result: Any, actor: Actor = ALICE) -> Decision:
    return asyncio.run(decide(CannedEngine(request=result), actor, REQUEST, NOW))


def record(item_id: str) -> Record:
    return Record(
        id=item_id,
        kind="memory",
        tenant="acme",
        text="t",
        acl=("*",),
        sensitivity="internal",
        scope=("sales",),
        authority="unreviewed",
        status="active",
    )


def run_verify(items_result: Any, ids: tuple[str, ...] = ("a", "b")) -> Verdict:
    engine = CannedEngine(items=items_result)
    return asyncio.run(verify(engine, ALICE, TASK, constraints_from(allow()), [record(i) for i in ids]))


def with_entry(result: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """The result with `key` set to `value`, or left without it for DELETE."""
    return result if value is DELETE else {**result, key: value}


def unavailable_to_check_and_call(result: Any, check: Callable[[Any], object], call: Callable[[Any], object], match: str) -> None:
    """The engine's answer is refused as unavailable by its check alone and by the whole call around it."""
    with pytest.raises(PolicyUnavailable, match=match):
        check(result)
    with pytest.raises(PolicyUnavailable, match=match):
        call(result)


# ---------------------------------------------------------------- the controls


def test_control_valid_constraints_are_parsed_field_by_field() -> None:
    """Every malformed case below changes one field of this document, which parses."""
    decision = run_decide(allow())
    assert decision.allow is True and decision.engine == "canned" and decision.revision == "canned-1"
    constraints = decision.constraints
    assert isinstance(constraints, Constraints)
    items = constraints.items
    assert items.tenant == "acme"
    assert items.principals == ("user:alice", "group:sales", "role:agent", "*")
    assert items.sensitivities == ("public", "internal", "confidential")
    assert items.valid_at == NOW
    assert (items.scopes, items.kinds) == (("sales",), ("memory", "document"))
    assert (items.statuses, items.entity_statuses, items.history) == (
        ("active", "disputed"),
        ("active", "pending_deletion"),
        False,
    )
    assert (constraints.graph.relations, constraints.graph.max_depth, constraints.graph.fanout) == (
        ("reports_to", "works_at"),
        2,
        10,
    )
    assert (constraints.disclosure.mask, constraints.disclosure.reveal) == (True, ("EMAIL_ADDRESS",))


def test_control_a_deny_needs_no_constraints() -> None:
    decision = run_decide({"allow": False, "reasons": ["unknown_task"]})
    assert (decision.allow, decision.reasons, decision.constraints) == (False, ("unknown_task",), None)


def test_control_a_valid_items_answer_keeps_allowed_and_denied() -> None:
    verdict = run_verify({"allowed": ["a"], "denied": [{"id": "b", "reason": "embargo"}]})
    assert verdict.allowed_ids == frozenset({"a"})
    assert verdict.denied == (("b", "embargo"),)


# ---------------------------------------------------------------- malformed constraints


REQUIRED = ["tenant", "principals", "sensitivities", "valid_at", "scopes", "kinds", "statuses"]


@pytest.mark.parametrize("key", REQUIRED)
def test_a_missing_constraint_is_policy_unavailable(key: str) -> None:
    with pytest.raises(PolicyUnavailable, match="malformed constraints: KeyError"):
        run_decide(allow(changed((key,), DELETE)))


# A string where a list belongs: iterating it would silently give one-letter entries.
LIST_FIELDS = [
    ("principals",),
    ("sensitivities",),
    ("scopes",),
    ("kinds",),
    ("statuses",),
    ("entity_statuses",),
    ("graph", "relations"),
    ("pii", "reveal"),
]


@pytest.mark.parametrize("path", LIST_FIELDS, ids=".".join)
@pytest.mark.parametrize("value", ["EMAIL_ADDRESS", {"EMAIL_ADDRESS": True}], ids=["string", "object"])
def test_a_list_constraint_of_another_type_is_policy_unavailable(path: tuple[str, ...], value: Any) -> None:
    with pytest.raises(PolicyUnavailable, match="malformed constraints: ValueError"):
        run_decide(allow(changed(path, value)))


@pytest.mark.parametrize(
    "principals",
    [["user:alice", ""], [""], ["user:alice", None], ["user:alice", 7], ["*", ["x"]]],
    ids=["empty_string", "only_empty", "null", "number", "nested_list"],
)
def test_an_empty_or_non_string_principal_is_policy_unavailable(principals: list[Any]) -> None:
    with pytest.raises(PolicyUnavailable, match="malformed constraints: ValueError"):
        run_decide(allow(changed(("principals",), principals)))


@pytest.mark.parametrize("tenant", ["", None, 7, ["acme"]], ids=["empty", "null", "number", "list"])
def test_a_tenant_that_is_not_a_non_empty_string_is_policy_unavailable(tenant: Any) -> None:
    with pytest.raises(PolicyUnavailable, match="malformed constraints: ValueError"):
        run_decide(allow(changed(("tenant",), tenant)))


@pytest.mark.parametrize("path", [("history",), ("pii", "mask")], ids=".".join)
@pytest.mark.parametrize("value", ["true", "false", 1, 0, None], ids=["str_true", "str_false", "one", "zero", "null"])
def test_a_flag_that_is_not_a_boolean_is_policy_unavailable(path: tuple[str, ...], value: Any) -> None:
    with pytest.raises(PolicyUnavailable, match="malformed constraints: ValueError"):
        run_decide(allow(changed(path, value)))


@pytest.mark.parametrize("pii", ["mask", ["EMAIL_ADDRESS"], True, 1], ids=["string", "list", "true", "number"])
def test_pii_that_is_not_an_object_is_policy_unavailable(pii: Any) -> None:
    with pytest.raises(PolicyUnavailable, match="malformed constraints: AttributeError"):
        run_decide(allow(changed(("pii",), pii)))


@pytest.mark.parametrize("graph", ["reports_to", ["reports_to"], True], ids=["string", "list", "true"])
def test_graph_that_is_not_an_object_is_policy_unavailable(graph: Any) -> None:
    with pytest.raises(PolicyUnavailable, match="malformed constraints: AttributeError"):
        run_decide(allow(changed(("graph",), graph)))


@pytest.mark.parametrize(
    "valid_at",
    [
        "yesterday",
        "2026-11-30",
        "2026-11-30T12:00:00",
        "2026-13-45T00:00:00Z",
        "9999-12-31T23:59:59Z",
        "9999-12-31T23:59:59-01:00",
        1796040000,
        None,
    ],
    ids=["word", "date_only", "no_offset", "impossible_date", "past_2200", "no_utc_instant", "number", "null"],
)
def test_a_bad_valid_at_is_policy_unavailable_and_not_echoed(valid_at: Any) -> None:
    with pytest.raises(PolicyUnavailable, match="malformed constraints: ValueError") as failure:
        run_decide(allow(changed(("valid_at",), valid_at)))
    assert str(valid_at) not in failure.value.message


@pytest.mark.parametrize("key", ["max_depth", "max_fanout"])
@pytest.mark.parametrize("value", ["deep", "", None, [2], {"n": 2}], ids=["word", "empty", "null", "list", "object"])
def test_a_graph_limit_that_is_not_a_number_is_policy_unavailable(key: str, value: Any) -> None:
    with pytest.raises(PolicyUnavailable, match="malformed constraints: (ValueError|TypeError)"):
        run_decide(allow(changed(("graph", key), value)))


@pytest.mark.parametrize("value", ["3", True, 2.5], ids=["numeric_string", "boolean", "fraction"])
def test_a_graph_depth_of_another_json_type_is_policy_unavailable(value: Any) -> None:
    with pytest.raises(PolicyUnavailable):
        run_decide(allow(changed(("graph", "max_depth"), value)))


def test_constraints_from_raises_policy_unavailable_itself() -> None:
    """The parser, not only decide, refuses: any caller of constraints_from gets no Constraints."""
    with pytest.raises(PolicyUnavailable):
        constraints_from(allow(changed(("history",), "yes")))


# ---------------------------------------------------------------- the allow and its tenant


@pytest.mark.parametrize("tenant", ["globex", "ACME", "acme "], ids=["other", "case", "padded"])
def test_allowed_constraints_naming_another_tenant_are_policy_unavailable(tenant: str) -> None:
    with pytest.raises(PolicyUnavailable, match="tenant other than the actor's"):
        run_decide(allow(changed(("tenant",), tenant)))


def test_the_same_constraints_are_allowed_for_an_actor_of_that_tenant() -> None:
    """The control for the tenant check: it compares with the actor, it does not refuse 'globex'."""
    globex_actor = Actor(id="gina", tenant="globex", roles=("agent",), groups=(), clearance="internal")
    decision = run_decide(allow(changed(("tenant",), "globex")), actor=globex_actor)
    assert decision.constraints is not None and decision.constraints.tenant == "globex"


# Each carries valid constraints, so without the boolean check the truthy ones would be an allow.
@pytest.mark.parametrize(
    "value", ["true", 1, "false", None, [True], {"value": True}], ids=["str_true", "one", "str_false", "null", "list", "object"]
)
def test_an_allow_that_is_not_a_boolean_is_policy_unavailable(value: Any) -> None:
    unavailable_to_check_and_call(allow(allow=value), check_request_result, run_decide, "boolean allow")


@pytest.mark.parametrize(
    "result",
    [None, [], "allow", True, {}, {"constraints": valid_constraints()}],
    ids=["null", "list", "string", "true", "empty", "no_allow"],
)
def test_a_request_result_that_is_not_an_object_with_allow_is_policy_unavailable(result: Any) -> None:
    with pytest.raises(PolicyUnavailable, match="boolean allow"):
        run_decide(result)


@pytest.mark.parametrize("constraints", [DELETE, None, [], "all", True], ids=["missing", "null", "list", "string", "true"])
def test_an_allow_without_constraints_is_policy_unavailable(constraints: Any) -> None:
    result = with_entry({"allow": True, "reasons": []}, "constraints", constraints)
    unavailable_to_check_and_call(result, check_request_result, run_decide, "allowed without constraints")


# ---------------------------------------------------------------- verify


def test_an_item_both_allowed_and_denied_is_policy_unavailable() -> None:
    with pytest.raises(PolicyUnavailable, match="both allowed and denied"):
        run_verify({"allowed": ["a", "b"], "denied": [{"id": "b", "reason": "embargo"}]})


def test_an_item_neither_allowed_nor_denied_is_dropped_as_not_allowed() -> None:
    verdict = run_verify({"allowed": ["a"], "denied": []}, ids=("a", "b", "c"))
    assert verdict.allowed_ids == frozenset({"a"})
    assert verdict.denied == (("b", "not_allowed"), ("c", "not_allowed"))


def test_an_answer_about_nothing_drops_every_item() -> None:
    verdict = run_verify({"allowed": []})
    assert verdict.allowed_ids == frozenset()
    assert verdict.denied == (("a", "not_allowed"), ("b", "not_allowed"))


def test_an_allowed_id_that_was_not_asked_about_is_ignored() -> None:
    engine = CannedEngine(items={"allowed": ["a", "zzz_not_asked", "b"], "denied": []})
    verdict = asyncio.run(verify(engine, ALICE, TASK, constraints_from(allow()), [record("a")]))
    [(entrypoint, asked)] = engine.calls
    assert entrypoint == "items" and [i["id"] for i in asked["items"]] == ["a"]
    assert verdict.allowed_ids == frozenset({"a"})
    assert "zzz_not_asked" not in verdict.allowed_ids and "b" not in verdict.allowed_ids
    assert verdict.denied == ()


def test_non_string_allowed_entries_allow_nothing() -> None:
    verdict = run_verify({"allowed": [1, None, ["a"], {"id": "a"}]})
    assert verdict.allowed_ids == frozenset()
    assert verdict.denied == (("a", "not_allowed"), ("b", "not_allowed"))


# A string or an object would iterate into ids ("ab" -> "a", "b") without the list check.
@pytest.mark.parametrize(
    "allowed", ["ab", {"a": True, "b": True}, None, True, DELETE], ids=["string", "object", "null", "true", "missing"]
)
def test_an_allowed_that_is_not_a_list_is_policy_unavailable(allowed: Any) -> None:
    unavailable_to_check_and_call(with_entry({"denied": []}, "allowed", allowed), check_items_result, run_verify, "allowed list")


@pytest.mark.parametrize("result", [None, ["a", "b"], "a", True], ids=["null", "list", "string", "true"])
def test_an_items_result_that_is_not_an_object_is_policy_unavailable(result: Any) -> None:
    with pytest.raises(PolicyUnavailable, match="allowed list"):
        run_verify(result)


def test_no_records_asks_nothing() -> None:
    engine = CannedEngine(items="never read")
    verdict = asyncio.run(verify(engine, ALICE, TASK, constraints_from(allow()), []))
    assert verdict == Verdict(frozenset(), (), 0.0) and engine.calls == []
