"""POST /v1/policy/explain and `gateway policy explain`: the decision, and why each named item is in
or out (the denying rule, the excluding constraint), in the caller's tenant only, envelopes only."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gateway.cli import main
from gateway.settings import PROJECT_POLICIES
from tests.conftest import Gateway, make_gateway
from tests.gateway.fixtures import SALES_TASK, seed

ALICE = {"id": "alice", "tenant": "acme", "roles": ["agent"], "groups": ["sales"], "clearance": "confidential"}
REQUEST = {"task": SALES_TASK, "query": "note"}
TEXT_MARKERS = ("quokka", "wombat", "Jane", "Secret", "globex pricing")


@pytest.fixture(scope="module")
def seeded(module_gateway: Gateway) -> Gateway:
    seed(module_gateway)
    return module_gateway


def admin(gateway: Gateway, tenant: str = "acme") -> str:
    return gateway.key(f"policy-admin-{tenant}", tenant=tenant, roles=("policy_admin",))


def explain(gateway: Gateway, body: dict[str, Any], key: str | None = None) -> Any:
    return gateway.client.post("/v1/policy/explain", json=body, headers=gateway.auth(key or admin(gateway)))


def items_of(answer: dict[str, Any], part: str = "in_force") -> dict[str, dict[str, Any]]:
    return {item["id"]: item for item in answer[part]["items"]}


def project_policies(change_config: Any = None) -> dict[str, Any]:
    """The project's policies as an inline candidate `{modules, data}`, its config changed by `change_config`."""
    modules = {
        str(p.relative_to(PROJECT_POLICIES)): p.read_text()
        for p in PROJECT_POLICIES.rglob("*.rego")
        if not p.name.endswith("_test.rego")
    }
    config = json.loads((PROJECT_POLICIES / "gateway" / "config" / "data.json").read_text())
    if change_config is not None:
        change_config(config)
    return {"modules": modules, "data": {"gateway": {"config": config}}}


def test_explain_gives_the_decision_and_its_constraints(seeded: Gateway) -> None:
    response = explain(seeded, {"actor": ALICE, "request": REQUEST})
    assert response.status_code == 200, response.text
    answer = response.json()["in_force"]
    assert answer["decision"]["allow"] is True
    constraints = answer["decision"]["constraints"]
    assert constraints["tenant"] == "acme"
    assert constraints["sensitivities"] == ["public", "internal", "confidential"]
    assert "group:sales" in constraints["principals"]
    assert answer["items"] == [] and answer["revision"] and answer["engine"] == "embedded"


def test_explain_naming_the_denying_rule(seeded: Gateway) -> None:
    """An item the ACL denies: the policy names the acl check (read from data.gateway.items.failures),
    and the pushdown names its acl constraint."""
    answer = explain(seeded, {"actor": ALICE, "request": REQUEST, "items": ["mem_acl", "mem_acl_ok"]}).json()
    denied, allowed = items_of(answer)["mem_acl"], items_of(answer)["mem_acl_ok"]
    assert answer["in_force"]["failures_document"] is True
    assert denied["status"] == "excluded"
    assert denied["policy"]["allowed"] is False and denied["policy"]["reason"] == "acl"
    assert [(f["rule"], f["reason"]) for f in denied["policy"]["denied_by"]] == [("data.gateway.items.failures", "acl")]
    assert "acl" in denied["policy"]["denied_by"][0]["meaning"]
    assert [c["constraint"] for c in denied["pushdown"]["excluded_by"]] == ["acl"]
    assert allowed["status"] == "allowed" and allowed["policy"] == {"allowed": True, "reason": None, "denied_by": []}
    assert allowed["pushdown"] == {"admits": True, "excluded_by": []}


@pytest.mark.parametrize(
    ("item_id", "constraints", "reasons"),
    [
        ("mem_restricted", ["sensitivity"], ["sensitivity"]),
        ("mem_future", ["valid_from"], ["validity"]),
        ("mem_support_scope", ["scope"], ["scope"]),
        ("mem_retracted", ["status"], ["status"]),
        ("mem_attached_other", ["attachment"], ["attachment"]),
    ],
)
def test_explain_names_the_constraint_that_keeps_an_item_out_of_the_pushdown(
    seeded: Gateway, item_id: str, constraints: list[str], reasons: list[str]
) -> None:
    body = {"actor": ALICE, "request": {**REQUEST, "entities": [{"id": "ent_jane"}]}, "items": [item_id]}
    answer = explain(seeded, body).json()
    item = items_of(answer)[item_id]
    assert item["status"] == "excluded"
    assert [c["constraint"] for c in item["pushdown"]["excluded_by"]] == constraints
    assert [f["reason"] for f in item["policy"]["denied_by"]] == reasons


def test_an_item_failing_several_constraints_names_each(seeded: Gateway) -> None:
    """Jane's finance note, for an actor outside sales and finance and a request not about Jane: the
    pushdown names both constraints it fails (acl, attachment); the policy names the first it checks."""
    body = {"actor": {**ALICE, "clearance": "public"}, "request": REQUEST, "items": ["mem_confidential_ok"]}
    item = items_of(explain(seeded, body).json())["mem_confidential_ok"]
    assert item["policy"]["reason"] == "sensitivity"
    assert [c["constraint"] for c in item["pushdown"]["excluded_by"]] == ["sensitivity"]
    outsider = {**ALICE, "roles": ["agent", "policy_admin"], "groups": []}  # granted the task by role, not by group
    body = {"actor": outsider, "request": REQUEST, "items": ["mem_acl_ok", "mem_jane_finance"]}
    found = items_of(explain(seeded, body).json())
    assert [f["reason"] for f in found["mem_acl_ok"]["policy"]["denied_by"]] == ["acl"]
    assert [f["reason"] for f in found["mem_jane_finance"]["policy"]["denied_by"]] == ["acl"]
    assert [c["constraint"] for c in found["mem_jane_finance"]["pushdown"]["excluded_by"]] == ["acl", "attachment"]


def test_the_request_entities_are_the_subjects(seeded: Gateway) -> None:
    body = {
        "actor": ALICE,
        "request": {**REQUEST, "entities": [{"email": "jane@globex.example"}]},
        "items": ["mem_attached_jane_ok", "mem_attached_other"],
    }
    answer = explain(seeded, body).json()
    assert answer["in_force"]["subjects"] == ["ent_jane"]
    assert items_of(answer)["mem_attached_jane_ok"]["status"] == "allowed"
    assert items_of(answer)["mem_attached_other"]["status"] == "excluded"


def test_another_tenants_item_is_reported_exactly_as_a_missing_one(seeded: Gateway) -> None:
    answer = explain(seeded, {"actor": ALICE, "request": REQUEST, "items": ["mem_other_tenant", "no_such_item"]}).json()
    other, missing = items_of(answer)["mem_other_tenant"], items_of(answer)["no_such_item"]
    assert other == {**missing, "id": "mem_other_tenant"}
    assert missing == {"id": "no_such_item", "status": "not_found", "envelope": None, "policy": None, "pushdown": None}
    # An id both tenants hold is the caller's tenant's item.
    shared = items_of(explain(seeded, {"actor": ALICE, "request": REQUEST, "items": ["ent_jane"]}).json())["ent_jane"]
    assert shared["envelope"]["tenant"] == "acme" and shared["status"] == "allowed"


def test_the_answer_holds_envelopes_never_text(seeded: Gateway) -> None:
    ids = ["mem_acl", "mem_acl_ok", "mem_attached_jane_ok", "ent_jane", "ent_secret", "mem_secret_note", "mem_other_tenant"]
    response = explain(seeded, {"actor": ALICE, "request": {**REQUEST, "entities": [{"id": "ent_jane"}]}, "items": ids})
    assert response.status_code == 200
    for marker in TEXT_MARKERS:
        assert marker not in response.text
    envelope = items_of(response.json())["ent_jane"]["envelope"]
    # never the slot: free text that responses mask (the decision log leaves it out too)
    assert set(envelope) <= {
        "id",
        "kind",
        "tenant",
        "acl",
        "sensitivity",
        "scope",
        "authority",
        "status",
        "valid_from",
        "valid_to",
        "attached_to",
        "entity",
        "edge_from",
        "edge_to",
    }
    assert all("slot" not in (i["envelope"] or {}) for i in response.json()["in_force"]["items"])
    # A note about an entity alice may not see: the pushdown names the link as well as the attachment.
    note = items_of(response.json())["mem_secret_note"]
    assert note["policy"]["reason"] == "attachment"
    assert [c["constraint"] for c in note["pushdown"]["excluded_by"]] == [
        "attachment",
        "linked_entity:entity",
        "linked_entity:attached_to",
    ]


def test_a_denied_request_explains_its_reasons(seeded: Gateway) -> None:
    body = {"actor": ALICE, "request": {"task": {"type": "compliance_review"}}, "items": ["mem_acl_ok", "mem_other_tenant"]}
    answer = explain(seeded, body).json()
    assert answer["in_force"]["decision"] == {"allow": False, "reasons": ["task_not_granted"], "constraints": None}
    assert items_of(answer)["mem_acl_ok"]["status"] == "request_denied"
    assert items_of(answer)["mem_other_tenant"]["status"] == "not_found"


def test_the_actor_must_be_of_the_callers_tenant(seeded: Gateway) -> None:
    response = explain(seeded, {"actor": {**ALICE, "tenant": "globex"}, "request": REQUEST, "items": ["mem_other_tenant"]})
    assert response.status_code == 403
    assert response.json()["error"]["message"].startswith("actor.tenant")
    assert "mem_other_tenant" not in response.text


def test_only_a_policy_admin_may_explain(seeded: Gateway) -> None:
    agent = seeded.key("alice", groups=("sales",), clearance="confidential")
    response = explain(seeded, {"actor": ALICE, "request": REQUEST}, key=agent)
    assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ([], 400, "body"),
        ({"actor": ALICE, "request": REQUEST, "extra": 1}, 400, "extra"),
        ({"request": REQUEST}, 400, "actor"),
        ({"actor": {**ALICE, "id": "not valid!"}, "request": REQUEST}, 400, "actor.id"),
        ({"actor": {**ALICE, "roles": "agent"}, "request": REQUEST}, 400, "actor.roles"),
        ({"actor": ALICE}, 400, "request"),
        ({"actor": ALICE, "request": {"task": {}}}, 422, "request.task.type"),
        ({"actor": ALICE, "request": {**REQUEST, "tenant": "globex"}}, 400, "request.tenant"),
        ({"actor": ALICE, "request": REQUEST, "items": "mem_acl"}, 400, "items"),
        ({"actor": ALICE, "request": REQUEST, "items": ["x"] * 51}, 400, "items"),
        ({"actor": ALICE, "request": REQUEST, "items": [""]}, 400, "items[0]"),
        ({"actor": ALICE, "request": REQUEST, "policies": {"modules": {}}}, 400, "policies.modules"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(seeded: Gateway, body: Any, status: int, field: str) -> None:
    response = explain(seeded, body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["message"].startswith(field)


def test_a_candidate_that_allows_what_the_policy_in_force_denies_shows_the_difference(seeded: Gateway) -> None:
    def raise_ceiling(config: dict[str, Any]) -> None:
        config["task_types"]["account_followup"]["max_sensitivity"] = "restricted"

    actor = {**ALICE, "clearance": "restricted"}
    body = {
        "actor": actor,
        "request": REQUEST,
        "items": ["mem_restricted", "mem_acl_ok"],
        "policies": project_policies(raise_ceiling),
    }
    response = explain(seeded, body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert items_of(answer)["mem_restricted"]["status"] == "excluded"
    assert items_of(answer, "candidate")["mem_restricted"]["status"] == "allowed"
    assert answer["candidate"]["revision"] != answer["in_force"]["revision"]
    assert answer["differences"] == {
        "decision": False,
        "items": [{"id": "mem_restricted", "in_force": "excluded", "candidate": "allowed"}],
    }
    lineage = seeded.trace(response.headers["x-trace-id"])["lineage"]
    assert lineage["policy_explain"] == {
        "actor": "user:alice",
        "task": "account_followup",
        "items": 2,
        "in_force": answer["in_force"]["revision"],
        "candidate": answer["candidate"]["revision"],
    }


def test_a_candidate_without_the_failures_document_names_the_first_denying_check(seeded: Gateway) -> None:
    policies = project_policies()
    items = policies["modules"]["gateway/items/items.rego"]
    policies["modules"]["gateway/items/items.rego"] = items.replace("failures", "failed_checks")
    body = {"actor": ALICE, "request": REQUEST, "items": ["mem_acl"], "policies": policies}
    answer = explain(seeded, body).json()
    assert answer["candidate"]["failures_document"] is False
    denied_by = items_of(answer, "candidate")["mem_acl"]["policy"]["denied_by"]
    assert [(f["rule"], f["reason"]) for f in denied_by] == [("data.gateway.items.denied", "acl")]


def test_a_broken_candidate_is_a_422_with_its_file_and_line(seeded: Gateway) -> None:
    policies = project_policies()
    policies["modules"]["gateway/broken.rego"] = "package gateway.broken\n\nallow if {\n"
    response = explain(seeded, {"actor": ALICE, "request": REQUEST, "policies": policies})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert error["message"].startswith("policies: ") and "broken.rego:" in error["message"]


def test_a_candidate_that_fails_at_evaluation_is_a_400_naming_the_failure(seeded: Gateway) -> None:
    """As impact answers it (issue 30): the candidate's failure, not the service's, so never a 503."""
    policies = project_policies()  # it passes the start-up self-check (no items), and fails on real ones
    policies["modules"]["gateway/items/items.rego"] = (
        "package gateway.items\n\nallowed := [] if count(input.items) == 0\n"
        'allowed := "broken" if count(input.items) > 0\n\ndenied := []\n'
    )
    response = explain(seeded, {"actor": ALICE, "request": REQUEST, "items": ["mem_acl_ok"], "policies": policies})
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert message.startswith("policies: the candidate failed at evaluation (it would answer 503): "), message


@pytest.fixture
def cli_store(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'gateway.db'}"
    for gateway in make_gateway(url, tmp_path):
        seed(gateway)
    yield url


def explain_cli(store: str, actor: dict[str, Any], request: str, items: list[str], *options: str) -> Result:
    """`gateway policy explain` on `store`, of `items` (each given with --item), with more `options`."""
    arguments = ["policy", "explain", "--database-url", store, "--actor", json.dumps(actor), "--request", request]
    arguments += [part for item in items for part in ("--item", item)]
    return CliRunner().invoke(main, [*arguments, *options])


def test_cli_explains_on_the_local_store(cli_store: str, tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_text(json.dumps(REQUEST))
    result = explain_cli(cli_store, ALICE, str(request), ["mem_acl", "mem_acl_ok", "mem_other_tenant"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    found = items_of(answer)
    assert found["mem_acl"]["policy"]["reason"] == "acl"
    assert found["mem_acl_ok"]["status"] == "allowed"
    assert found["mem_other_tenant"]["status"] == "not_found"
    for marker in TEXT_MARKERS:
        assert marker not in result.output


def test_cli_explains_against_a_candidate_directory(cli_store: str, tmp_path: Path, policy_copy: Path) -> None:
    config = policy_copy / "gateway" / "config" / "data.json"
    document = json.loads(config.read_text())
    document["task_types"]["account_followup"]["max_sensitivity"] = "restricted"
    config.write_text(json.dumps(document))
    actor = {**ALICE, "clearance": "restricted"}
    result = explain_cli(cli_store, actor, json.dumps(REQUEST), ["mem_restricted"], "--candidate", str(policy_copy))
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert answer["differences"]["items"] == [{"id": "mem_restricted", "in_force": "excluded", "candidate": "allowed"}]


def test_cli_refuses_a_bad_actor(cli_store: str) -> None:
    result = CliRunner().invoke(
        main, ["policy", "explain", "--database-url", cli_store, "--actor", "{}", "--request", json.dumps(REQUEST)]
    )
    assert result.exit_code != 0 and "actor" in result.output


def test_a_slot_holding_personal_data_is_never_shown(seeded: Gateway) -> None:
    """Responses mask a slot (it is free text); explain, which shows envelopes, leaves it out."""
    seeded.ingest(
        "acme",
        [
            {
                "id": "mem_slotted",
                "kind": "memory",
                "text": "note",
                "acl": ["*"],
                "scope": ["sales"],
                "slot": "contact:marta.quell@northwind.example",
            }
        ],
    )
    for body in (
        {"actor": ALICE, "request": REQUEST, "items": ["mem_slotted"]},
        {"actor": ALICE, "request": {"task": {"type": "no_such_task"}}, "items": ["mem_slotted"]},
    ):
        response = explain(seeded, body)
        assert response.status_code == 200, response.text
        assert "marta.quell" not in response.text and "northwind" not in response.text
        assert items_of(response.json())["mem_slotted"]["envelope"]["id"] == "mem_slotted"
