"""Runs the Rego tests (`test_` rules) beside the policies with the embedded engine."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from gateway.policy.bundle import read_bundle
from gateway.policy.embedded import build_engine

PACKAGE = re.compile(r"^package\s+([\w.]+)", re.M)
TEST_RULE = re.compile(r"^(test_\w+)", re.M)


@dataclass(frozen=True, slots=True)
class RegoTestResult:
    package: str
    name: str
    passed: bool
    error: str | None = None


def run_rego_tests(root: Path) -> list[RegoTestResult]:
    bundle = read_bundle(root)
    engine = build_engine(bundle, with_tests=True)
    results = []
    for _path, source in bundle.tests:
        package_match = PACKAGE.search(source)
        if not package_match:
            continue
        package = package_match.group(1)
        for name in sorted(set(TEST_RULE.findall(source))):
            try:
                raw = json.loads(engine.eval_query_as_json(f"data.{package}.{name}"))
                result = raw.get("result") or []
                passed = bool(result) and result[0]["expressions"][0]["value"] is True
                results.append(RegoTestResult(package, name, passed))
            except Exception as exc:  # an evaluation error is a failing test, reported with its message
                results.append(RegoTestResult(package, name, False, str(exc)))
    return results
