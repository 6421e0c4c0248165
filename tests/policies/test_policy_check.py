"""`gateway policy check`: compile errors at file:line:col, data-document violations at their JSON
pointer, engine-divergence warnings on planted snippets (and none on their guarded twins, nor on the
shipped policies), exit codes with and without --strict, and the JSON report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import regorus
from click.testing import CliRunner, Result
from opa_bindings import OpaEngine, OpaError

from gateway.cli import main
from gateway.policy_tools.check import check_policies, lint_module


def check(*args: str | Path, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(main, ["policy", "check", *map(str, args)], env={"GATEWAY_POLICIES_DIR": None, **(env or {})})


def plant(policies: Path, name: str, source: str) -> Path:
    path = policies / "gateway" / "planted" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(source)
    return path


def test_the_shipped_policies_pass_even_strictly() -> None:
    result = check("--strict")
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == "0 errors, 0 warnings: passed"


def test_a_syntax_error_is_reported_at_file_line_col(policy_copy: Path) -> None:
    path = plant(policy_copy, "broken.rego", "package gateway.planted\n\nallow if {\n\tinput.a ==\n}\n")
    result = check(policy_copy)
    assert result.exit_code == 1
    assert f"{path}:5:1: error compile: expecting expression" in result.output


def test_errors_found_only_by_evaluation_are_reported_at_file_line_col(policy_copy: Path) -> None:
    path = plant(policy_copy, "conflict.rego", "package gateway.planted\n\np := 1\n\np := 2\n")
    result = check(policy_copy)
    assert result.exit_code == 1
    assert f"{path}:5:1: error compile: rule conflicts with rule at" in result.output
    path.write_text("package gateway.planted\n\nallow if {\n\tno_such_function(input.x)\n}\n")
    assert f"{path}:4:" in check(policy_copy).output and "could not find function no_such_function" in check(policy_copy).output


def test_an_entry_point_that_fails_the_start_up_probe_is_an_error(policy_copy: Path) -> None:
    request = policy_copy / "gateway" / "request" / "request.rego"
    request.write_text(request.read_text().replace("default allow := false", 'default allow := "no"'))
    result = check(policy_copy)
    assert result.exit_code == 1
    assert "error entrypoint: data.gateway.request does not answer the start-up probe with a boolean allow" in result.output


def test_an_invalid_data_document_is_reported_with_json_pointers(policy_copy: Path) -> None:
    data = policy_copy / "gateway" / "config" / "data.json"
    config = json.loads(data.read_text())
    config["task_types"]["research"]["graph"]["max_depth"] = "2"
    config["task_types"]["research"]["max_sensitivity"] = "secret"
    data.write_text(json.dumps(config))
    result = check(policy_copy)
    assert result.exit_code == 1
    assert f"{data}#/task_types/research/graph/max_depth: error data/schema: '2' is not of type 'integer'" in result.output
    assert f"{data}#/task_types/research/max_sensitivity: error data/unknown-sensitivity" in result.output


def test_data_that_is_not_json_is_reported_with_its_line(policy_copy: Path) -> None:
    data = policy_copy / "gateway" / "config" / "data.json"
    data.write_text('{\n  "sensitivity_levels": [,]\n}\n')
    result = check(policy_copy)
    assert result.exit_code == 1
    assert f"{data}:2:1: error bundle: invalid JSON" in result.output


UNGUARDED = {
    "engine-divergence/parse-null": "p if {\n\ttime.parse_rfc3339_ns(input.request.as_of) > 0\n}\n",
    "engine-divergence/membership": "p if {\n\tsome item in input.items\n\tnot item.kind in input.constraints.kinds\n}\n",
    "unguarded-input": 'p if {\n\tnot startswith(input.task.scope, "s")\n}\n',
}
GUARDED = [
    "p if {\n\tis_string(input.request.as_of)\n\ttime.parse_rfc3339_ns(input.request.as_of) > 0\n}\n",
    'p if {\n\tlib.is_time(input.request.as_of)\n\ttime.parse_ns("2006-01-02", input.request.as_of) > 0\n}\n',
    "p := time.parse_rfc3339_ns(input.now) if is_string(input.now)\n",
    'p if {\n\tsome item in input.items\n\tnot item.kind in object.get(input.constraints, "kinds", [])\n}\n',
    'p if {\n\tis_array(input.constraints.kinds)\n\tnot "memory" in input.constraints.kinds\n}\n',
    "p := [i | some i in input.items; is_string(i)]\n",
    'p if {\n\tnot input.task.scope == "sales"\n}\n',
    'p if {\n\tnot startswith(object.get(input.task, "scope", ""), "s")\n}\n',
    '# not x in input.constraints.kinds, in a comment\np := "not time.parse_ns(1, input.x)"\n',
]


@pytest.mark.parametrize("code", sorted(UNGUARDED))
def test_an_unguarded_construct_is_warned_at_its_position(code: str) -> None:
    findings = lint_module("x.rego", "package x\n\n" + UNGUARDED[code])
    assert [(f.code, f.severity, f.line) for f in findings] == [(code, "warning", 5 if "some" in UNGUARDED[code] else 4)]
    assert findings[0].col is not None and findings[0].col > 1


@pytest.mark.parametrize("source", GUARDED)
def test_a_guarded_construct_is_not_warned(source: str) -> None:
    assert lint_module("x.rego", "package x\n\nimport data.gateway.lib\n\n" + source) == []


def decide(source: str, policy_input: dict[str, Any]) -> tuple[Any, Any]:
    """The value of data.x.p on the embedded engine and on OPA: "error" when an engine fails."""
    module = "package x\n\n" + source
    embedded = regorus.Engine()
    embedded.add_policy("x.rego", module)
    embedded.set_input_json(json.dumps(policy_input))
    try:
        ours = json.loads(embedded.eval_query_as_json("data.x"))["result"][0]["expressions"][0]["value"].get("p")
    except Exception:  # the embedded engine fails the whole evaluation
        ours = "error"
    opa = OpaEngine()
    try:
        opa.add_policy("x.rego", module)
        theirs = opa.eval_document("x", policy_input).get("p")
    except OpaError:  # in-process OPA raises built-in errors; OPA's server leaves the call undefined
        theirs = "error"
    finally:
        opa.close()
    return ours, theirs


@pytest.mark.parametrize("code", sorted(UNGUARDED))
def test_what_the_warnings_name_really_diverges_and_the_guarded_forms_agree(code: str) -> None:
    policy_input = {"request": {"as_of": None}, "items": [{"kind": "memory"}], "constraints": {}, "task": {}}
    ours, theirs = decide(UNGUARDED[code], policy_input)
    # OPA's server treats a built-in's bad argument as undefined; only the embedded engine's 503 is checked.
    assert ours == "error" if code == "engine-divergence/parse-null" else ours != theirs
    guarded = {
        "engine-divergence/parse-null": GUARDED[0],
        "engine-divergence/membership": GUARDED[3],
        "unguarded-input": GUARDED[7],
    }[code]
    assert decide(guarded, policy_input)[0] == decide(guarded, policy_input)[1] != "error"


def test_warnings_pass_unless_strict_and_the_json_report_lists_them(policy_copy: Path) -> None:
    path = plant(policy_copy, "planted.rego", "package gateway.planted\n\n" + UNGUARDED["engine-divergence/parse-null"])
    result = check(policy_copy)
    assert result.exit_code == 0
    assert f"{path}:4:2: warning engine-divergence/parse-null: time.parse_rfc3339_ns(input.request.as_of)" in result.output
    assert check(policy_copy, "--strict").exit_code == 1
    strict = check(policy_copy, "--strict", "--format", "json")
    report = json.loads(strict.output)
    assert strict.exit_code == 1 and report["passed"] is False and report["errors"] == 0 and report["warnings"] == 1
    assert report["findings"] == [
        {
            "severity": "warning",
            "code": "engine-divergence/parse-null",
            "file": str(path),
            "line": 4,
            "col": 2,
            "message": report["findings"][0]["message"],
        }
    ]


def test_a_known_difference_is_warned_naming_the_construct_file_and_line(policy_copy: Path) -> None:
    """The constructs of gateway/policy_tools/differences.py (OPA's conformance cases the embedded
    engine fails): a policy that loads on both engines but answers otherwise is warned, not refused."""
    source = (
        'package gateway.planted\n\n# strings.replace_n in a comment is not a use\np := strings.replace_n({"a": "b"}, "ab")\n'
    )
    path = plant(policy_copy, "planted.rego", source)
    result = check(policy_copy)
    assert result.exit_code == 0, result.output
    assert (
        f"{path}:4:6: warning engine-divergence/replace-n: strings.replace_n: replaces one pattern after another" in result.output
    )
    assert "(found `strings.replace_n`)" in result.output and f"{path}:3:" not in result.output
    assert check(policy_copy, "--strict").exit_code == 1


def test_a_module_with_lines_longer_than_regorus_takes_by_default_compiles(policy_copy: Path) -> None:
    """regorus refuses a line over 1,024 columns unless told otherwise (a certificate written into a
    policy); OPA takes it, and so does the gateway now (POLICY_LIMITS in gateway/policy/embedded.py)."""
    certificate = "MIIB" + "A" * 3000
    plant(policy_copy, "planted.rego", f'package gateway.planted\n\ncertificate := "{certificate}"\n')
    result = check(policy_copy, "--strict")
    assert result.exit_code == 0, result.output


def test_the_default_directory_is_the_configured_one(policy_copy: Path) -> None:
    plant(policy_copy, "broken.rego", "package gateway.planted\n\np if {\n")
    assert check(env={"GATEWAY_POLICIES_DIR": str(policy_copy)}).exit_code == 1
    assert check_policies(policy_copy).revision is not None
