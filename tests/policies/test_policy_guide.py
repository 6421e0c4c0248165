"""The "Writing policies" guide stays true: its example bundles pass their Rego tests on top of the
shipped policies, every Rego block it shows is taken from a tested file, and the two examples that
add behaviour (time-bound access, break-glass) work through the HTTP API."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from opa_bindings import OpaEngine

from gateway.policy.bundle import read_bundle
from gateway.policy.embedded import build_engine, first_value
from gateway.policy_tools.rego_tests import run_rego_tests
from gateway.settings import PROJECT_POLICIES
from tests.conftest import open_gateway

ROOT = PROJECT_POLICIES.parent
GUIDE = ROOT / "docs" / "writing-policies.md"
EXAMPLES = ROOT / "docs" / "examples" / "policies"
EXAMPLE_DIRS = sorted(p for p in EXAMPLES.iterdir() if p.is_dir())
REGO_BLOCK = re.compile(r"```rego\n(.*?)```", re.S)
JSON_BLOCK = re.compile(r"```json\n(.*?)```", re.S)


def with_example(example: Path, target: Path) -> Path:
    """The shipped policies with an example's files laid over them, as the guide says to install it."""
    shutil.copytree(PROJECT_POLICIES, target)
    shutil.copytree(example, target, dirs_exist_ok=True)
    return target


def squeezed(text: str) -> str:
    return " ".join(text.split())


def test_there_are_examples() -> None:
    assert {p.name for p in EXAMPLE_DIRS} >= {"break_glass", "contractor_expiry"}


@pytest.mark.parametrize("example", EXAMPLE_DIRS, ids=lambda p: p.name)
def test_an_example_passes_its_own_and_the_shipped_rego_tests(example: Path, tmp_path: Path) -> None:
    results = run_rego_tests(with_example(example, tmp_path / "policies"))
    assert [f"{r.package}.{r.name}: {r.error}" for r in results if not r.passed] == []
    own = {r.package for r in results} - {r.package for r in run_rego_tests(PROJECT_POLICIES)}
    assert own, f"{example.name} has no Rego tests of its own"
    assert {"gateway.request_test", "gateway.items_test"} <= {r.package for r in results}


ACTOR = {"id": "ann", "tenant": "acme", "groups": ["support", "incident-responders"], "roles": ["agent"], "clearance": "internal"}
NOW = "2026-06-01T00:00:00Z"
# Inputs each example is about, nulls and refusals included (a task type the policy does not know is
# left out: the shipped policy's reasons for it differ between the engines, its allow does not).
PARITY_CASES: dict[str, list[tuple[dict[str, Any], dict[str, Any], str | None]]] = {
    "break_glass": [
        (ACTOR, {"type": "break_glass", "scope": "INC-4711"}, NOW),
        (ACTOR, {"type": "break_glass", "scope": None}, NOW),
        (ACTOR, {"type": "break_glass", "scope": "sales"}, NOW),
        ({**ACTOR, "groups": ["support"]}, {"type": "break_glass", "scope": "INC-1"}, NOW),
        (ACTOR, {"type": "support_ticket", "scope": "INC-4711"}, NOW),
        (ACTOR, {"type": "support_ticket", "scope": None}, NOW),
    ],
    "contractor_expiry": [
        (ACTOR, {"type": "support_ticket", "scope": None}, NOW),
        (ACTOR, {"type": "support_ticket", "scope": None}, "2027-06-01T00:00:00Z"),
        ({**ACTOR, "id": "carl", "groups": ["vendor-northwind"]}, {"type": "research"}, "2026-07-01T00:00:00Z"),
        ({**ACTOR, "id": "bob"}, {"type": "support_ticket"}, "2027-06-01T00:00:00Z"),
        (ACTOR, {"type": "support_ticket"}, None),
    ],
}


@pytest.mark.parametrize("example", EXAMPLE_DIRS, ids=lambda p: p.name)
def test_an_example_decides_alike_on_both_engines(example: Path, tmp_path: Path) -> None:
    bundle = read_bundle(with_example(example, tmp_path / "policies"))
    embedded = build_engine(bundle)
    opa = OpaEngine()
    try:
        opa.add_data(bundle.data)
        for path, source in bundle.modules:
            opa.add_policy(path, source)
        for actor, task, now in PARITY_CASES[example.name]:
            policy_input = {"actor": actor, "task": task, "request": {}, "now": now}
            embedded.set_input_json(json.dumps(policy_input))
            on_embedded = first_value(embedded.eval_query_as_json("data.gateway.request"))
            on_opa = opa.eval_document("gateway.request", policy_input)
            for key in ("allow", "reasons", "constraints"):
                assert _canonical(on_embedded.get(key)) == _canonical(on_opa.get(key)), (task, now, key)
    finally:
        opa.close()


def _canonical(value: object) -> str:
    """JSON with sets (which arrive as lists in either order) sorted."""
    if isinstance(value, list):
        return json.dumps(sorted(json.dumps(v, sort_keys=True) for v in value))
    return json.dumps(value, sort_keys=True)


# The lines of the shipped request.rego that the break-glass copy changes on purpose.
BREAK_GLASS_CHANGES = {
    "# title: Request decision",
    "#   every connector pushes down into its own query.",
    "count(reasons) == 0",
    "else := set()",
    "# The sensitivity ceiling is the lower of the actor's clearance and the task's maximum.",
    "ceiling_rank := min({",
    "scopes := [input.task.scope] if {",
}


def test_the_break_glass_copy_keeps_every_other_line_of_the_shipped_request_policy() -> None:
    """A change to the shipped request.rego fails here until the copy in the example follows it."""
    shipped = {line.strip() for line in (PROJECT_POLICIES / "gateway/request/request.rego").read_text().splitlines()}
    copy = {line.strip() for line in (EXAMPLES / "break_glass/gateway/request/request.rego").read_text().splitlines()}
    assert shipped - copy == BREAK_GLASS_CHANGES


def test_every_rego_block_in_the_guide_is_taken_from_a_tested_file() -> None:
    sources = [squeezed(p.read_text()) for root in (PROJECT_POLICIES, EXAMPLES) for p in root.rglob("*.rego")]
    blocks = REGO_BLOCK.findall(GUIDE.read_text())
    assert len(blocks) >= 7
    drifted = [block for block in blocks if not any(squeezed(block) in source for source in sources)]
    assert drifted == []


def test_every_json_block_in_the_guide_parses() -> None:
    blocks = JSON_BLOCK.findall(GUIDE.read_text())
    assert blocks
    for block in blocks:
        json.loads(block)


def test_the_readme_links_the_guide() -> None:
    assert "docs/writing-policies.md" in (ROOT / "README.md").read_text()


def memory(item_id: str, text: str, **envelope: object) -> dict[str, object]:
    return {"id": item_id, "kind": "memory", "text": text, "acl": ["*"], **envelope}


def test_break_glass_is_granted_audited_with_its_ticket_and_widens_nothing_else(tmp_path: Path) -> None:
    policies = with_example(EXAMPLES / "break_glass", tmp_path / "policies")
    with open_gateway(f"sqlite:///{tmp_path / 'gateway.db'}", tmp_path, policies_dir=policies) as gateway:
        gateway.ingest(
            "acme",
            [
                memory("mem_legal_hold", "quokkaglass legal hold memo", scope=["legal"], sensitivity="restricted"),
                memory("mem_ticket_note", "quokkaglass support ticket note", scope=["support"]),
            ],
        )
        gateway.ingest("globex", [memory("mem_globex_hold", "quokkaglass globex memo", sensitivity="restricted")])
        responder = gateway.key("rita", groups=("support", "incident-responders"), clearance="internal")
        agent = gateway.key("sam", groups=("support",), clearance="internal")
        emergency = {"type": "break_glass", "scope": "INC-4711"}

        usual = gateway.retrieve(responder, {"task": {"type": "support_ticket"}, "query": "quokkaglass"})
        assert usual.status_code == 200
        assert [i["id"] for i in usual.json()["items"]] == ["mem_ticket_note"]
        assert gateway.trace(usual.json()["trace_id"])["lineage"]["decision"]["reasons"] == []

        glass = gateway.retrieve(responder, {"task": emergency, "query": "quokkaglass"})
        assert glass.status_code == 200
        assert sorted(i["id"] for i in glass.json()["items"]) == ["mem_legal_hold", "mem_ticket_note"]
        row = gateway.trace(glass.json()["trace_id"])
        assert (row["decision"], row["actor"]) == ("allow", "user:rita")
        assert row["lineage"]["decision"]["reasons"] == ["break_glass:INC-4711"]

        for key, task, reason in [
            (agent, emergency, "task_not_granted"),
            (responder, {"type": "break_glass"}, "break_glass_without_ticket"),
            (responder, {"type": "support_ticket", "scope": "INC-4711"}, "scope_not_allowed_for_task"),
        ]:
            refused = gateway.retrieve(key, {"task": task, "query": "quokkaglass"})
            assert refused.status_code == 403
            assert refused.json()["error"]["reasons"] == [reason]
            assert "mem_legal_hold" not in refused.text and "quokkaglass" not in refused.text
            assert gateway.trace(refused.headers["x-trace-id"])["lineage"]["decision"]["reasons"] == [reason]


def test_a_contractor_is_refused_once_the_contract_ends(tmp_path: Path) -> None:
    policies = with_example(EXAMPLES / "contractor_expiry", tmp_path / "policies")
    contracts = {"user:ann": {"until": "2001-01-01T00:00:00Z"}, "user:bea": {"until": "2100-01-01T00:00:00Z"}}
    (policies / "gateway" / "contractors" / "data.json").write_text(json.dumps(contracts))
    with open_gateway(f"sqlite:///{tmp_path / 'gateway.db'}", tmp_path, policies_dir=policies) as gateway:
        gateway.ingest("acme", [memory("mem_runbook", "quokkarunbook restart steps", scope=["support"])])
        body = {"task": {"type": "support_ticket"}, "query": "quokkarunbook"}
        ended = gateway.retrieve(gateway.key("ann", groups=("support",)), body)
        assert ended.status_code == 403
        assert ended.json()["error"]["reasons"] == ["access_expired"]
        assert "quokkarunbook" not in ended.text
        current = gateway.retrieve(gateway.key("bea", groups=("support",)), body)
        assert current.status_code == 200
        assert [i["id"] for i in current.json()["items"]] == ["mem_runbook"]
