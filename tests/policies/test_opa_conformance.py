"""OPA's own Rego conformance cases (~2,400, at the OPA version scripts/engines pins) on the embedded
engine as the gateway calls it and on the `opa` binary: bench/opa_conformance.py runs them all (about
a minute on 2 cores, so the whole set runs here, not a subset), and this holds the outcome to
gateway/policy_tools/differences.py:

- opa passes every case but the few the harness cannot express (listed in the runner, with why);
- the embedded engine fails exactly the cases the known differences list: a regression (a new
  failure) or a case that now passes (a stale entry) fails the test, naming the cases;
- `gateway policy check` warns on every case the embedded engine fails, under its difference;
- every difference is written up in docs/writing-policies.md with its example, and the check
  warns on that example.

The run needs Go (the cases come from OPA's Go module) and the opa binary ./scripts/engines builds;
without them it skips saying so (under CI, GATEWAY_TEST_REQUIRE_ENGINES=1, it fails instead).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gateway.policy.bundle import PolicyBundle
from gateway.policy.embedded import build_engine, first_value
from gateway.policy_tools.check import known_differences, lint_module
from gateway.policy_tools.differences import COMPILED, DIFFERENCES, GROUPS, difference_of
from tests.engines import binary, unavailable

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "bench" / "opa_conformance.py"
GUIDE = ROOT / "docs" / "writing-policies.md"


def runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("opa_conformance", RUNNER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["opa_conformance"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def conformance(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of every case on both engines (the runner's --json), plus the cases themselves."""
    if shutil.which("go") is None:
        unavailable("Go is not installed: OPA's conformance cases come from its Go module (install Go 1.26)")
    opa = binary("opa", "GATEWAY_TEST_OPA_BIN")
    out = tmp_path_factory.mktemp("conformance") / "outcomes.json"
    done = subprocess.run(
        [sys.executable, str(RUNNER), "--opa", opa, "--json", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=1200
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text())
    module = runner()
    result["sources"] = {c.name: "\n".join(c.modules) + "\n" + c.query for c in module.load_cases(result["opa_version"], opa)}
    result["skips"] = module.SKIPS
    return result


def outcomes(conformance: dict[str, Any], engine: str) -> dict[str, dict[str, Any]]:
    return {o["name"]: o for o in conformance["runs"][engine]["outcomes"]}


def test_the_cases_are_opas_own_at_the_pinned_version(conformance: dict[str, Any]) -> None:
    assert conformance["opa_version"] == runner().pinned_opa_version()
    assert conformance["cases"] > 2000
    for engine in ("embedded", "opa"):
        assert len(outcomes(conformance, engine)) == conformance["cases"]


def test_opa_passes_its_own_cases_but_those_the_harness_cannot_express(conformance: dict[str, Any]) -> None:
    found = outcomes(conformance, "opa")
    assert {n: o["reason"] for n, o in found.items() if o["status"] in ("fail", "error")} == {}
    skipped = {n for n, o in found.items() if o["status"] == "skip"}
    listed = {n for n, (engines, _) in conformance["skips"].items() if "opa" in engines}
    not_json = {n for n, o in found.items() if o["status"] == "skip" and "input_term is not JSON" in o["reason"]}
    assert skipped == listed | not_json
    assert len(not_json) <= 10  # a set or a non-string key as input: the gateway sends JSON


def test_the_embedded_engine_fails_exactly_the_known_differences(conformance: dict[str, Any]) -> None:
    found = outcomes(conformance, "embedded")
    failing = {n for n, o in found.items() if o["status"] in ("fail", "error")}
    listed = {n for n in found if difference_of(n) is not None}
    regressions = {n: found[n]["reason"] for n in sorted(failing - listed)}
    now_passing = {n: found[n]["status"] for n in sorted(listed - failing)}
    assert regressions == {}, "cases the embedded engine now fails, under no known difference"
    assert now_passing == {}, "cases a known difference lists that no longer fail: drop them from differences.py"
    for difference in DIFFERENCES:
        assert any(difference.finds(n) for n in failing), f"{difference.code} lists no failing case"


def test_the_compiled_path_fails_exactly_its_listed_cases(conformance: dict[str, Any]) -> None:
    """Where the gateway evaluates data.gateway.items (regorus's compiled path), held to a list as the
    interpreter is: the cases that pass on the interpreter and fail there are exactly those of
    gateway/policy_tools/compiled_differences.toml (issue 55: 161 such cases, and no test held them)."""
    interpreter = outcomes(conformance, "embedded")
    compiled = outcomes(conformance, "embedded-compiled")
    worse = {n for n, o in compiled.items() if o["status"] in ("fail", "error") and interpreter[n]["status"] == "pass"}
    listed = set().union(*(d.cases for d in COMPILED))
    regressions = {n: compiled[n]["reason"] for n in sorted(worse - listed)}
    now_passing = {n: compiled[n]["status"] for n in sorted(listed - worse)}
    assert regressions == {}, "cases the compiled path now fails, listed nowhere"
    assert now_passing == {}, "listed cases that no longer fail on the compiled path: drop them from the table"
    undefined = next(d for d in COMPILED if d.key == "error_is_undefined")
    assert all("got undefined" in (compiled[n]["reason"] or "") for n in undefined.cases)


def test_the_check_warns_on_every_case_the_embedded_engine_fails(conformance: dict[str, Any]) -> None:
    found = outcomes(conformance, "embedded")
    unwarned = {}
    for name, outcome in found.items():
        difference = difference_of(name)
        if outcome["status"] not in ("fail", "error") or difference is None or name in difference.unseen:
            continue
        codes = {d.code for _, d, _ in known_differences(conformance["sources"][name])}
        if difference.code not in codes:
            unwarned[name] = (difference.code, sorted(codes))
    assert unwarned == {}


# ------------------------------------------------------------------- no engine needed


@pytest.mark.parametrize("difference", DIFFERENCES, ids=lambda d: d.code)
def test_each_difference_is_warned_on_its_example_and_written_up(difference: Any) -> None:
    findings = lint_module("x.rego", "package x\n\n" + difference.example + "\n")
    mine = [f for f in findings if f.code == f"engine-divergence/{difference.code}"]
    assert mine and mine[0].severity == "warning" and mine[0].line == 3 and mine[0].file == "x.rego"
    assert mine[0].message.startswith(difference.construct)
    guide = GUIDE.read_text()
    assert difference.group in GROUPS and f"\n### {difference.group}\n" in guide
    section = guide.split(f"\n### {difference.group}\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    row = next((line for line in section.splitlines() if f"`engine-divergence/{difference.code}`" in line), None)
    assert row is not None, f"{difference.code} is not in docs/writing-policies.md under {difference.group}"
    assert difference.example.replace("|", "\\|") in row


def test_a_long_line_a_long_module_load_on_the_engine_the_policy_processes_build() -> None:
    """The one difference that was in how the gateway called regorus: modules over 1,024 columns,
    20,000 lines or 1 MiB did not load (OPA's jwt and x509 cases hold 3,000-column lines)."""
    source = 'package x\n\nkey := "' + "k" * 5000 + '"\n\n' + "".join(f"r{i} := {i}\n" for i in range(25_000))
    assert len(source) > 1024 * 1024 // 4 and source.count("\n") > 20_000
    engine = build_engine(PolicyBundle(Path("."), (("x.rego", source),), (), {}, ""))
    assert first_value(engine.eval_query_as_json("data.x.r24999")) == 24999
    assert len(first_value(engine.eval_query_as_json("data.x.key"))) == 5000


def test_the_unseen_cases_are_few_and_listed_in_the_guide() -> None:
    unseen = [n for d in DIFFERENCES for n in d.unseen]
    assert len(unseen) <= 3 and all(difference_of(n) is not None for n in unseen)
    for name in unseen:
        assert name in GUIDE.read_text()
