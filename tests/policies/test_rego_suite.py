"""The Rego tests beside the policies pass on the embedded engine and on `opa test`, `opa check --strict`
accepts them, and the runner reports failures."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.policy_tools.rego_tests import run_rego_tests
from gateway.settings import PROJECT_POLICIES
from tests.engines import opa_command


def test_project_rego_tests_all_pass() -> None:
    results = run_rego_tests(PROJECT_POLICIES)
    failures = [f"{r.package}.{r.name}: {r.error}" for r in results if not r.passed]
    assert failures == []
    packages = {r.package for r in results}
    assert {"gateway.request_test", "gateway.items_test"} <= packages
    assert len(results) >= 40


def test_runner_reports_a_failing_and_an_erroring_test(policy_copy: Path) -> None:
    (policy_copy / "gateway/extra_test.rego").write_text(
        'package gateway.extra_test\n\ntest_fails if { false }\n\ntest_errors if { time.parse_rfc3339_ns("nope") > 0 }\n\ntest_passes if { true }\n'
    )
    outcome = {r.name: r.passed for r in run_rego_tests(policy_copy) if r.package == "gateway.extra_test"}
    assert outcome == {"test_fails": False, "test_errors": False, "test_passes": True}


# ---------------------------------------------------------------- a platform team's own tools agree


def test_opa_test_runs_the_same_tests_and_passes_them_all() -> None:
    """`opa test policies/` on the real binary: every test the gateway's runner finds, each passing."""
    result = opa_command("test", PROJECT_POLICIES, "--format", "json")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    theirs = {(r["package"].removeprefix("data."), r["name"]) for r in json.loads(result.stdout) if not r.get("fail")}
    ours = {(r.package, r.name) for r in run_rego_tests(PROJECT_POLICIES) if r.passed}
    assert theirs == ours and len(ours) >= 40


def test_opa_check_strict_accepts_the_policies_and_refuses_a_broken_one(policy_copy: Path) -> None:
    result = opa_command("check", "--strict", PROJECT_POLICIES)
    assert result.returncode == 0, result.stdout + result.stderr
    # strict mode is really on: an unused local variable, which only strict mode refuses, fails it
    (policy_copy / "gateway/extra.rego").write_text("package gateway.extra\n\nx if {\n\tunused := 1\n\ttrue\n}\n")
    failed = opa_command("check", "--strict", policy_copy)
    assert failed.returncode != 0 and "extra.rego" in failed.stdout + failed.stderr
