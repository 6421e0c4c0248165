"""The items policy on regorus's compiled path (gateway/policy/compiled.py) decides exactly as the
interpreter does: on random batches far larger than one VM execution holds (so chunks trip the
instruction limit and shrink), on malformed envelopes (where both fail the whole call), through the
policy processes, and for a bundle without a `denied` or an `allowed` rule."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

from core.errors import PolicyUnavailable
from gateway.policy.base import check_items_result
from gateway.policy.bundle import PolicyBundle, read_bundle
from gateway.policy.compiled import MIN_CHUNK, START_CHUNK, CompiledItems
from gateway.policy.embedded import EmbeddedEngine, build_engine, first_value
from gateway.settings import PROJECT_POLICIES
from tests.policies.test_parity import ACTOR, NOW, items_input, random_item

FAILED = "failed"


def interpreter_for(bundle: PolicyBundle) -> Any:
    engine = build_engine(bundle)

    def interpret(policy_input: dict[str, Any]) -> Any:
        engine.set_input_json(json.dumps(policy_input))
        return first_value(engine.eval_query_as_json("data.gateway.items"))

    return interpret


def outcome(evaluate: Any, policy_input: dict[str, Any]) -> Any:
    try:
        document = evaluate(policy_input)
    except Exception:  # noqa: BLE001 - a failed evaluation is an outcome both paths must share
        return FAILED
    return {
        "allowed": sorted(document["allowed"]),
        "denied": sorted(json.dumps(d, sort_keys=True) for d in document.get("denied") or []),
    }


def constraints(interpret_request: Any) -> dict[str, Any]:
    return interpret_request({"actor": ACTOR, "task": {"type": "account_followup", "scope": "sales"}, "request": {}, "now": NOW})


@pytest.fixture(scope="module")
def shipped() -> tuple[CompiledItems, Any, dict[str, Any]]:
    bundle = read_bundle(PROJECT_POLICIES)
    compiled = CompiledItems.compile(bundle)
    assert compiled is not None, "the shipped items policy compiles to a program"
    engine = build_engine(bundle)
    engine.set_input_json(
        json.dumps({"actor": ACTOR, "task": {"type": "account_followup", "scope": "sales"}, "request": {}, "now": NOW})
    )
    decided = first_value(engine.eval_query_as_json("data.gateway.request"))
    assert decided["allow"]
    return compiled, interpreter_for(bundle), decided["constraints"]


def well_formed(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items whose tenant and attached_to are of the types the envelope allows."""
    return [i for i in items if all(isinstance(i.get(f), (str, list, type(None))) for f in ("tenant", "attached_to"))]


def long_acl(rng: random.Random, item: dict[str, Any]) -> dict[str, Any]:
    """Some items carry long ACLs and many scopes: each costs the VM more instructions."""
    if rng.random() < 0.3 and isinstance(item.get("acl"), list):
        item = {**item, "acl": item["acl"] + [f"group:g{n}" for n in range(rng.randint(5, 40))]}
    if rng.random() < 0.2 and isinstance(item.get("scope"), list):
        item = {**item, "scope": item["scope"] + [f"s{n}" for n in range(rng.randint(3, 20))]}
    return item


def test_large_random_batches_decide_exactly_as_the_interpreter(shipped: tuple[CompiledItems, Any, dict[str, Any]]) -> None:
    compiled, interpret, decided = shipped
    rng = random.Random(20261202)
    compared = failed = allowed = 0
    for batch in range(40):
        size = rng.choice([1, 7, 60, 150, 400])
        items = [long_acl(rng, random_item(rng, batch * 1000 + i)) for i in range(size)]
        if rng.random() < 0.7:  # most batches hold only well-formed envelopes, so both paths answer
            items = well_formed(items)
        policy_input = items_input(items, decided, entities={})
        ours = outcome(lambda i: compiled.evaluate(i, interpret), policy_input)
        theirs = outcome(interpret, policy_input)
        assert ours == theirs, (batch, size)
        compared += 1
        failed += ours == FAILED
        allowed += ours != FAILED and bool(ours["allowed"])
    assert compared - failed >= 20 and allowed >= 10  # real verdicts, not only failures
    assert compiled.chunk != START_CHUNK or compiled.fallbacks > 0  # the limit was met, and the chunk size measured


def test_a_chunk_that_trips_the_limit_shrinks_and_the_verdicts_stay_whole(
    shipped: tuple[CompiledItems, Any, dict[str, Any]],
) -> None:
    _, interpret, decided = shipped
    compiled = CompiledItems.compile(read_bundle(PROJECT_POLICIES))
    assert compiled is not None
    compiled.chunk = 10_000  # far past what one execution holds: it must find its size, never drop items
    items = [
        {
            "id": f"i{n}",
            "kind": "memory",
            "tenant": "acme",
            "acl": ["group:sales", *(f"group:x{k}" for k in range(20))],
            "sensitivity": "internal",
            "scope": ["sales"],
            "status": "active",
            "valid_from": None,
            "valid_to": None,
            "attached_to": None,
        }
        for n in range(300)
    ]
    policy_input = {"actor": ACTOR, "task": {"type": "account_followup"}, "constraints": decided, "subjects": [], "items": items}
    ours = compiled.evaluate(policy_input, interpret)
    assert sorted(ours["allowed"]) == sorted(f"i{n}" for n in range(300)) == sorted(interpret(policy_input)["allowed"])
    assert MIN_CHUNK <= compiled.chunk < 300


def test_the_policy_processes_verify_on_the_compiled_path_with_the_interpreters_verdicts(
    shipped: tuple[CompiledItems, Any, dict[str, Any]],
) -> None:
    _, interpret, decided = shipped
    rng = random.Random(7)
    items = well_formed([random_item(rng, n) for n in range(250)])
    policy_input = items_input(items, decided, entities={})
    engine = EmbeddedEngine(read_bundle(PROJECT_POLICIES), workers=1)
    try:
        served = outcome(lambda i: asyncio.run(engine.evaluate("items", i)), policy_input)
    finally:
        engine._close()
    assert served == outcome(interpret, policy_input) and served != FAILED


def write_policy(root: Path, items_rego: str) -> PolicyBundle:
    shipped = read_bundle(PROJECT_POLICIES)
    for path, source in shipped.modules:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(items_rego if path.endswith("items/items.rego") else source)
    (root / "gateway" / "config").mkdir(parents=True, exist_ok=True)
    (root / "gateway" / "config" / "data.json").write_text(json.dumps(shipped.data.get("gateway", {}).get("config", {})))
    return read_bundle(root)


def test_a_policy_without_denied_answers_denied_empty(tmp_path: Path) -> None:
    bundle = write_policy(
        tmp_path, 'package gateway.items\n\nallowed := [item.id | some item in input.items; item.kind == "memory"]\n'
    )
    compiled = CompiledItems.compile(bundle)
    assert compiled is not None
    policy_input = {"items": [{"id": "a", "kind": "memory"}, {"id": "b", "kind": "edge"}]}
    assert compiled.evaluate(policy_input, interpreter_for(bundle)) == {"allowed": ["a"], "denied": []}


def test_a_policy_without_an_allowed_rule_fails_closed_on_the_compiled_path_too(tmp_path: Path) -> None:
    bundle = write_policy(tmp_path, "package gateway.items\n\nsomething_else := true\n")
    compiled = CompiledItems.compile(bundle)
    assert compiled is not None
    answered = compiled.evaluate({"items": [{"id": "a"}]}, interpreter_for(bundle))
    assert "allowed" not in answered and compiled.fallbacks == 1  # the interpreter's own document answers it
    engine = EmbeddedEngine(bundle, workers=1)
    try:
        with pytest.raises(PolicyUnavailable):  # the service answers 503, never an allow
            check_items_result(engine.evaluate_sync("items", {"items": [{"id": "a"}]}))
    finally:
        engine._close()
