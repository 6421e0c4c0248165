"""The policy runs where it was tested (issue 55): the gateway evaluates data.gateway.items on
regorus's compiled path, which answers some Rego differently from the interpreter the policy's Rego
tests run on. A revision whose own tests pass on the interpreter and fail with the items policy on
the compiled path is an error of `gateway policy check` and is refused by the service, at start and
on reload (the revision in force keeps serving); on the interpreter (GATEWAY_POLICY_COMPILED=false)
it serves.

The construct: a `default` rule whose value is a comprehension, next to a rule of the same name
that never holds. OPA and the interpreter answer the comprehension; the compiled path answers an
empty set (OPA's conformance case `defaultkeyword/set comprehension`, listed in
gateway/policy_tools/compiled_differences.toml)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from core.errors import ConfigurationError
from gateway.cli import main
from gateway.policy.bundle import read_bundle
from gateway.policy.tested import diverging_tests
from tests.conftest import open_gateway
from tests.gateway.fixtures import SALES_TASK, seed

ITEMS = Path("gateway/items/items.rego")
TESTS = Path("gateway/items/items_test.rego")
HELD = """
# Items an operator holds back, by id (data.gateway.config.held).
default held := {id | some id in object.get(data.gateway.config, "held", [])}

held := set() if false
"""
HELD_TEST = """
test_held_items_are_not_allowed if {
	items.allowed == [] with input as batch([base_item]) with data.gateway.config.held as [base_item.id]
}
"""


def hold_items(policies: Path) -> None:
    """The policy change: `allowed` leaves out the held ids; its test says so."""
    rego = policies / ITEMS
    source = rego.read_text()
    assert "not item.id in failed_ids]" in source
    rego.write_text(source.replace("not item.id in failed_ids]", "not item.id in failed_ids; not item.id in held]") + HELD)
    (policies / TESTS).write_text((policies / TESTS).read_text() + HELD_TEST)


def test_the_shipped_policy_passes_its_tests_on_the_compiled_path() -> None:
    assert diverging_tests(read_bundle(Path(__file__).resolve().parents[2] / "policies")) == []


def test_a_test_that_fails_only_on_the_compiled_path_is_found_and_refused(policy_copy: Path) -> None:
    hold_items(policy_copy)
    passed = CliRunner().invoke(main, ["policy", "test", str(policy_copy)])
    assert passed.exit_code == 0, passed.output  # on the interpreter, as written, every test passes
    (diverging,) = diverging_tests(read_bundle(policy_copy))
    assert diverging.test == "data.gateway.items_test.test_held_items_are_not_allowed"
    checked = CliRunner().invoke(main, ["policy", "check", str(policy_copy)])
    assert checked.exit_code == 1 and "compiled-path" in checked.output, checked.output
    assert "test_held_items_are_not_allowed passes on the interpreter and fails where the gateway" in checked.output


def test_the_service_refuses_it_at_start_and_on_reload_and_keeps_the_revision_in_force(
    sqlite_url: str, tmp_path: Path, policy_copy: Path
) -> None:
    with open_gateway(sqlite_url, tmp_path, policies_dir=policy_copy) as gateway:
        alice = seed(gateway)
        admin = gateway.key("pat", tenant="platform", roles=("policy_admin",))
        before = gateway.client.get("/v1/policy", headers=gateway.auth(admin)).json()["revision"]
        hold_items(policy_copy)
        answer = gateway.client.post("/v1/policy/reload", headers=gateway.auth(admin))
        assert answer.status_code == 422, answer.text
        assert any("test_held_items_are_not_allowed" in e for e in answer.json()["reload"]["errors"]), answer.json()
        assert gateway.client.get("/v1/policy", headers=gateway.auth(admin)).json()["revision"] == before
        assert gateway.retrieve(alice, {"task": SALES_TASK, "query": "renewal"}).status_code == 200
    with pytest.raises(ConfigurationError, match="test_held_items_are_not_allowed"):
        with open_gateway(sqlite_url, tmp_path / "again", policies_dir=policy_copy):
            pass
    with open_gateway(sqlite_url, tmp_path / "interpreter", policies_dir=policy_copy, policy_compiled=False) as gateway:
        assert gateway.client.get("/healthz").status_code == 200  # evaluated where it was tested, it serves


def test_tests_written_in_the_items_package_itself_are_never_falsely_refused(policy_copy: Path) -> None:
    """OPA's convention allows a test in the package it tests (`package gateway.items`), naming its
    rules unqualified: such a test moves with the policy and tests the interpreter's answer there, so
    it is never reported (nor refused) for a difference it cannot see."""
    (policy_copy / "gateway/items/same_package_test.rego").write_text(
        "package gateway.items\n\ntest_nothing_is_allowed_without_items if {\n\tallowed == [] with input as {}\n}\n"
    )
    assert CliRunner().invoke(main, ["policy", "test", str(policy_copy)]).exit_code == 0
    assert diverging_tests(read_bundle(policy_copy)) == []


def test_the_service_runs_the_tests_in_a_child_with_a_deadline(policy_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """regorus keeps the interpreter lock for a whole evaluation, so the service runs a policy's tests
    in a child process (as it runs the policy): a child past its deadline refuses the revision."""
    from gateway.policy import tested

    hold_items(policy_copy)
    bundle = read_bundle(policy_copy)
    with pytest.raises(ConfigurationError, match="test_held_items_are_not_allowed"):
        tested.refuse_diverging(bundle)  # the child's answer, as the in-process run's
    (policy_copy / TESTS).write_text((policy_copy / TESTS).read_text() + "\ntest_another_one if true\n")
    monkeypatch.setattr(tested, "TESTS_DEADLINE_S", 0.01)
    with pytest.raises(ConfigurationError, match="did not finish within 0.01 s"):
        tested.refuse_diverging(read_bundle(policy_copy))
