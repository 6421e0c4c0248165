"""Parity: the embedded engine (regorus) and OPA decide alike on the same inputs, nulls and malformed
values included; OPA both as a library in this process (1.20.2, opa_bindings) and as the `opa` binary
a platform team deploys (tests/engines.py, serving policies/ as a bundle). Where regorus fails the whole evaluation
(the gateway answers 503), OPA must not allow either."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opa_bindings import OpaEngine, OpaError

from core.errors import PolicyUnavailable
from gateway.policy.bundle import read_bundle
from gateway.policy.embedded import EmbeddedEngine
from gateway.settings import PROJECT_POLICIES
from tests.engines import OpaServer, unavailable

UNAVAILABLE = "unavailable"


class OpaBinary:
    """The `opa` binary (`opa run --server --bundle policies/`), asked over its REST API as the
    gateway's OPA engine asks it; a non-200 answer or an undefined document is an OpaError."""

    def __init__(self) -> None:
        self.server = OpaServer((PROJECT_POLICIES,), bundle=True)
        self.client = httpx.Client(base_url=self.server.url, timeout=30)

    def eval_document(self, path: str, policy_input: dict[str, Any]) -> Any:
        response = self.client.post("/v1/data/" + path.replace(".", "/"), json={"input": policy_input})
        body = response.json()
        if response.status_code != 200 or "result" not in body:
            raise OpaError(f"{response.status_code}: {body.get('code', 'undefined')}")
        return body["result"]

    def close(self) -> None:
        self.client.close()
        self.server.stop()


@pytest.fixture(scope="module", params=["library", "binary"])
def engines(request: pytest.FixtureRequest) -> Iterator[tuple[EmbeddedEngine, Any]]:
    """regorus beside OPA: compiled into this process (opa_bindings), and the `opa` binary."""
    bundle = read_bundle(PROJECT_POLICIES)
    embedded = EmbeddedEngine(bundle)
    opa: Any
    if request.param == "library":
        opa = OpaEngine()
        opa.add_data(bundle.data)
        for path, source in bundle.modules:
            opa.add_policy(path, source)
    else:
        try:
            opa = OpaBinary()
        except RuntimeError as exc:
            unavailable(str(exc))
    yield embedded, opa
    asyncio.run(embedded.aclose())
    opa.close()


def on_embedded(engine: EmbeddedEngine, entrypoint: str, policy_input: dict[str, Any]) -> Any:
    try:
        return asyncio.run(engine.evaluate(entrypoint, policy_input))
    except PolicyUnavailable:
        return UNAVAILABLE


def on_opa(engine: Any, entrypoint: str, policy_input: dict[str, Any]) -> Any:
    try:
        return engine.eval_document(f"gateway/{entrypoint}".replace("/", "."), policy_input)
    except OpaError:
        return UNAVAILABLE


def decision(result: Any, keys: tuple[str, ...]) -> Any:
    return result if result == UNAVAILABLE else {k: _sorted(result.get(k)) for k in keys}


def _sorted(value: Any) -> Any:
    if isinstance(value, list):
        return sorted(value, key=lambda v: json.dumps(v, sort_keys=True))
    return value


ACTOR = {"id": "alice", "tenant": "acme", "roles": ["agent"], "groups": ["sales"], "clearance": "confidential"}
NOW = "2026-11-30T00:00:00Z"
CHOICES: dict[str, list[Any]] = {
    "tenant": ["acme", "globex", None, "", 7],
    "acl": [["*"], ["group:sales"], ["user:alice"], ["role:agent"], ["group:finance"], [], None, "group:sales"],
    "sensitivity": ["public", "internal", "confidential", "restricted", "secret", None],
    "valid_from": [None, "2020-01-01T00:00:00Z", "2030-01-01T00:00:00Z", "2026-11-30T00:00:00Z"],
    "valid_to": [None, "2025-01-01T00:00:00Z", "2031-01-01T00:00:00+02:00", "2026-11-30T00:00:00Z"],
    "scope": [[], ["sales"], ["support"], ["sales", "support"], None, {}],
    "kind": ["memory", "document", "property", "edge", "entity", "weird", None],
    "status": ["active", "superseded", "disputed", "retracted", "pending_deletion", None],
    "attached_to": [None, "ent_jane", "ent_other", 3],
}


VALID = {
    "tenant": "acme",
    "acl": ["group:sales"],
    "sensitivity": "internal",
    "valid_from": None,
    "valid_to": None,
    "scope": ["sales"],
    "kind": "memory",
    "status": "active",
    "attached_to": None,
}


def items_input(items: list[dict[str, Any]], constraints: dict[str, Any], **more: Any) -> dict[str, Any]:
    """The input of `gateway/items` for ACTOR on an account follow-up about ent_jane."""
    return {
        "actor": ACTOR,
        "task": {"type": "account_followup"},
        "constraints": constraints,
        "subjects": ["ent_jane"],
        "items": items,
        **more,
    }


def random_item(rng: random.Random, index: int) -> dict[str, Any]:
    """A valid envelope with zero to three fields changed to a random value, or removed."""
    item: dict[str, Any] = {"id": f"i{index}", **VALID}
    for field in rng.sample(sorted(CHOICES), rng.choice([0, 1, 1, 2, 3])):
        if rng.random() < 0.15:
            del item[field]
        else:
            item[field] = rng.choice(CHOICES[field])
    return item


def constraints_for(engine: EmbeddedEngine, task: dict[str, Any]) -> dict[str, Any]:
    result = on_embedded(engine, "request", {"actor": ACTOR, "task": task, "request": {}, "now": NOW})
    assert result != UNAVAILABLE and result["allow"]
    return result["constraints"]  # type: ignore[no-any-return]


def test_items_parity_on_200_random_batches(engines: tuple[EmbeddedEngine, Any]) -> None:
    embedded, opa = engines
    rng = random.Random(20261130)
    constraints = constraints_for(embedded, {"type": "account_followup", "scope": "sales"})
    compared = allowed_somewhere = 0
    for batch in range(200):
        items = [random_item(rng, batch * 10 + i) for i in range(rng.randint(1, 6))]
        policy_input = items_input(items, constraints)
        ours = decision(on_embedded(embedded, "items", policy_input), ("allowed", "denied"))
        theirs = decision(on_opa(opa, "items", policy_input), ("allowed", "denied"))
        if ours == UNAVAILABLE:
            assert theirs == UNAVAILABLE or theirs["allowed"] == [], (items, theirs)
            continue
        assert ours == theirs, items
        compared += 1
        allowed_somewhere += bool(ours["allowed"])
    assert compared > 150 and allowed_somewhere > 10  # the comparison covered real allows


REQUEST_CASES: list[dict[str, Any]] = [
    {"actor": ACTOR, "task": {"type": "account_followup", "scope": "sales"}, "request": {}, "now": NOW},
    {"actor": ACTOR, "task": {"type": "account_followup"}, "request": {"kinds": ["memory", "edge", "nope"]}, "now": NOW},
    {"actor": ACTOR, "task": {"type": "research"}, "request": {"graph": {"max_depth": 3, "relations": ["owns"]}}, "now": NOW},
    {"actor": ACTOR, "task": {"type": "account_followup"}, "request": {"as_of": "2025-01-01T00:00:00Z"}, "now": NOW},
    {"actor": ACTOR, "task": {"type": "account_followup", "scope": "legal"}, "request": {}, "now": NOW},
    {"actor": ACTOR, "task": {"type": "nope"}, "request": {}, "now": NOW},
    {"actor": {**ACTOR, "roles": None}, "task": {"type": "research"}, "request": {}, "now": NOW},
    {"actor": {**ACTOR, "groups": None}, "task": {"type": "research"}, "request": {}, "now": NOW},
    {"actor": {**ACTOR, "clearance": None}, "task": {"type": "research"}, "request": {}, "now": NOW},
    {"actor": {**ACTOR, "clearance": "top"}, "task": {"type": "research"}, "request": {}, "now": NOW},
    {"actor": {**ACTOR, "tenant": None}, "task": {"type": "research"}, "request": {}, "now": NOW},
    {"actor": {k: v for k, v in ACTOR.items() if k != "id"}, "task": {"type": "research"}, "request": {}, "now": NOW},
    {"actor": ACTOR, "task": {"type": "research"}, "request": {}},
    {"actor": ACTOR, "task": {"type": None}, "request": {"kinds": None, "graph": None}, "now": NOW},
    {"actor": ACTOR, "task": {}, "request": None, "now": NOW},
]


@pytest.mark.parametrize("case", range(len(REQUEST_CASES)))
def test_request_parity(engines: tuple[EmbeddedEngine, Any], case: int) -> None:
    embedded, opa = engines
    policy_input = REQUEST_CASES[case]
    keys = ("allow", "reasons", "constraints")
    ours = decision(on_embedded(embedded, "request", policy_input), keys)
    theirs = decision(on_opa(opa, "request", policy_input), keys)
    if ours == UNAVAILABLE:
        assert theirs == UNAVAILABLE or theirs["allow"] is not True
    else:
        assert ours == theirs
