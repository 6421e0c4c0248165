"""The policy contract as JSON Schemas (gateway/policy/contract/): every input the gateway sends and every
result the shipped policies return, recorded through real retrieve calls, matches them; the shipped
data document does too; a malformed document does not; and the schema files are never policy data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.policy.base import PROBE_ACTOR
from gateway.policy.bundle import read_bundle
from gateway.policy.schema import NAMES, SCHEMA_DIR, validate
from gateway.settings import PROJECT_POLICIES
from tests.conftest import Gateway, open_gateway
from tests.gateway.fixtures import SALES_TASK, seed


def test_every_schema_is_draft_2020_12_and_loads() -> None:
    for name in NAMES:
        document = json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
        assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert validate({}, name) != []  # each requires something
    with pytest.raises(ValueError, match="no policy schema named"):
        validate({}, "nope")


def test_the_shipped_data_document_matches_its_schema() -> None:
    assert validate(read_bundle(PROJECT_POLICIES).data["gateway"]["config"], "data") == []


def test_a_malformed_data_document_is_rejected_with_json_pointers() -> None:
    config = read_bundle(PROJECT_POLICIES).data["gateway"]["config"]
    broken = json.loads(json.dumps(config))
    broken["task_types"]["research"]["graph"]["max_depth"] = "2"
    broken["task_types"]["research"]["grant"] = ["role:agent"]  # a typo of grants: would grant nobody
    broken["task_types"]["research"]["kinds"].append("memo")
    del broken["readable_statuses"]
    errors = validate(broken, "data")
    assert "/task_types/research/graph/max_depth: '2' is not of type 'integer'" in errors
    assert any(e.startswith("/task_types/research: Additional properties") and "grant" in e for e in errors)
    assert any(e.startswith("/task_types/research/kinds/1:") for e in errors)
    assert "/: 'readable_statuses' is a required property" in errors


def test_malformed_inputs_and_results_are_rejected() -> None:
    request_input = {"actor": PROBE_ACTOR, "task": {"type": "research"}, "request": {"query": "text"}, "now": "yesterday"}
    errors = validate(request_input, "request.input")
    assert any(e.startswith("/now:") for e in errors) and any(e.startswith("/request:") for e in errors)
    assert validate({"allow": True, "reasons": []}, "request.result") == ["/: 'constraints' is a required property"]
    assert validate({"allowed": ["a"], "denied": [{"id": "b"}]}, "items.result") == ["/denied/0: 'reason' is a required property"]
    item = {"id": "m1", "kind": "memory", "text": "a body never goes to the policy"}
    errors = validate(
        {"actor": PROBE_ACTOR, "task": {"type": "x"}, "constraints": {}, "subjects": [], "items": [item], "entities": {}},
        "items.input",
    )
    assert any(e.startswith("/items/0: Additional properties") for e in errors)


def test_the_start_up_and_readiness_probes_match_the_input_schemas() -> None:
    request_probe = {"actor": PROBE_ACTOR, "task": {"type": "startup_probe"}, "request": {}, "now": "2026-01-01T00:00:00Z"}
    assert validate(request_probe, "request.input") == []
    for actor in (PROBE_ACTOR, {}):
        items_probe = {"actor": actor, "task": {}, "constraints": {}, "subjects": [], "items": []}
        assert validate(items_probe, "items.input") == []


def test_the_policies_directory_holds_only_what_opa_reads_as_policy() -> None:
    """OPA's own tools load every .json under a directory as data (`opa test policies/`, `opa run
    policies/`), its bundle reader only data.json: with nothing but modules and data.json files there,
    both read what the gateway reads. The schemas live with the package, not among the policies."""
    files = [p.relative_to(PROJECT_POLICIES) for p in PROJECT_POLICIES.rglob("*") if p.is_file()]
    assert files and all(p.suffix == ".rego" or p.name == "data.json" for p in files), files
    assert SCHEMA_DIR.is_dir() and not SCHEMA_DIR.is_relative_to(PROJECT_POLICIES)


def recorded_decisions(gateway: Gateway) -> None:
    """Retrieve calls covering each shape the policy sees: allowed and denied, with entities,
    with a graph walk over edges, with history and as_of, narrowed kinds."""
    key = seed(gateway)
    writer = gateway.auth(gateway.key("writer-acme", roles=("ingest",)))
    edges = [
        {"from": "ent_jane", "relation": "works_at", "to": "ent_other", "acl": ["*"]},
        {"from": "ent_jane", "relation": "owns", "to": "ent_secret", "acl": ["*"]},
    ]
    assert gateway.client.put("/v1/edges", json=edges, headers=writer).status_code == 200
    calls: list[tuple[dict[str, Any], int]] = [
        ({"task": SALES_TASK, "query": "wombatacl"}, 200),
        ({"task": {"type": "compliance_review"}, "query": "wombatacl"}, 403),  # not granted
        ({"task": {"type": "no_such_task"}}, 403),
        (
            {"task": SALES_TASK, "query": "wombatattach", "entities": [{"id": "ent_jane"}, {"email": "other@initech.example"}]},
            200,
        ),
        (
            {
                "task": SALES_TASK,
                "mode": "brief",
                "entities": [{"id": "ent_jane"}],
                "graph": {"max_depth": 2, "relations": ["works_at", "owns"]},
            },
            200,
        ),
        (
            {
                "task": SALES_TASK,
                "query": "quokkaexpired",
                "as_of": "2025-06-01T00:00:00Z",
                "include_historical": True,
                "kinds": ["memory", "edge"],
                "depth": "fast",
            },
            200,
        ),
        ({"task": SALES_TASK, "query": "wombatfuture", "as_of": "2099-01-01T00:00:00+02:00"}, 403),  # as_of_in_future
    ]
    for body, status in calls:
        response = gateway.retrieve(key, body)
        assert response.status_code == status, (body, response.text)


def test_every_recorded_input_and_result_matches_the_schemas(sqlite_url: str, tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    with open_gateway(sqlite_url, tmp_path, decision_log=log) as gateway:
        recorded_decisions(gateway)
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    seen: dict[str, int] = {}
    for entry in entries:
        entrypoint = entry["path"].removeprefix("gateway/")
        assert "error" not in entry, entry.get("error")
        # The log erases what may hold free text (an item's slot): put each erased key back as null,
        # which the contract allows, to check the rest of the input as it was sent.
        assert all(path.endswith("/slot") for path in entry.get("erased", [])), entry.get("erased")
        for path in entry.get("erased", []):
            _put_null(entry, path.split("/"))
        assert validate(entry["input"], f"{entrypoint}.input") == [], entry["input"]
        assert validate(entry["result"], f"{entrypoint}.result") == [], entry["result"]
        seen[entrypoint] = seen.get(entrypoint, 0) + 1
    requests = [e for e in entries if e["path"] == "gateway/request"]
    items = [e for e in entries if e["path"] == "gateway/items"]
    assert seen["request"] >= 7 and seen["items"] >= 4
    assert {tuple(e["result"]["reasons"]) for e in requests if not e["result"]["allow"]} >= {
        ("task_not_granted",),
        ("unknown_task_type",),
        ("as_of_in_future",),
    }
    assert any(e["input"]["request"].get("as_of") and e["input"]["request"].get("include_historical") for e in requests)
    assert any(e["input"].get("entities") for e in items)  # linked entity envelopes were sent
    assert any(i["kind"] == "edge" for e in items for i in e["input"]["items"])  # the graph walk
    assert any(e["result"]["denied"] for e in items) or any(e["result"]["allowed"] for e in items)


def _put_null(node: Any, path: list[str]) -> None:
    """`path` (`input/items/*/slot`, `input/entities/ent_jane/slot`) set to None in `node`, through
    every element at a `*`."""
    head, rest = path[0], path[1:]
    if not rest:
        node[head] = None
    elif head == "*":
        for element in node:
            _put_null(element, rest)
    else:
        _put_null(node[head], rest)
