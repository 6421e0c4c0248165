"""The Rego tests beside the policies pass on the embedded engine, and the runner reports failures."""

from __future__ import annotations

from pathlib import Path

from gateway.policy.rego_tests import run_rego_tests
from gateway.settings import PROJECT_POLICIES


def test_project_rego_tests_all_pass() -> None:
    results = run_rego_tests(PROJECT_POLICIES)
    failures = [f"{r.package}.{r.name}: {r.error}" for r in results if not r.passed]
    assert failures == []
    packages = {r.package for r in results}
    assert {"gateway.request_test", "gateway.items_test"} <= packages
    assert len(results) >= 40


def test_runner_reports_a_failing_and_an_erroring_test(policy_copy: Path) -> None:
    (policy_copy / "gateway/extra_test.rego").write_text(
        "package gateway.extra_test\n\ntest_fails if { false }\n\ntest_errors if { time.parse_rfc3339_ns(\"nope\") > 0 }\n\ntest_passes if { true }\n"
    )
    outcome = {r.name: r.passed for r in run_rego_tests(policy_copy) if r.package == "gateway.extra_test"}
    assert outcome == {"test_fails": False, "test_errors": False, "test_passes": True}
