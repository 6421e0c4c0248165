"""`gateway policy check`: compile every module, validate the data document, warn on engine divergence.

Needs no server and no database. Errors fail the check; warnings fail it only with --strict.
The divergence warnings are text heuristics over each rule (see docs/policies.md, "Checking policies"),
and one per construct of gateway/policy_tools/differences.py (OPA's conformance cases the embedded
engine fails) that a module uses.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import regorus

from core.errors import ConfigurationError
from gateway.policy.base import ENTRYPOINTS, PROBE_ACTOR
from gateway.policy.bundle import PolicyBundle, read_bundle
from gateway.policy.embedded import new_engine
from gateway.policy.schema import validate
from gateway.policy.tested import diverging_tests
from gateway.policy_tools.differences import DIFFERENCES, Difference

Severity = Literal["error", "warning"]

DATA_FILE = "gateway/config/data.json"
PROBES = {
    "request": {"actor": PROBE_ACTOR, "task": {"type": "startup_probe"}, "request": {}, "now": "2026-01-01T00:00:00Z"},
    "items": {"actor": PROBE_ACTOR, "task": {"type": "startup_probe"}, "constraints": {}, "subjects": [], "items": []},
}
# Built-ins that parse a string and, on the embedded engine, fail the whole evaluation on anything else;
# the value is the index of the parsed argument (-1: the last).
PARSERS = {"parse_rfc3339_ns": 0, "parse_ns": -1, "parse_duration_ns": 0}
# Calls that hold only when their argument is a string, so a parse after them is safe.
STRING_GUARDS = ("is_string", "is_time", "lib.is_time")


@dataclass(frozen=True, slots=True)
class Finding:
    severity: Severity
    code: str
    file: str
    message: str
    line: int | None = None
    col: int | None = None
    pointer: str | None = None  # where in a JSON document

    def __str__(self) -> str:
        where = self.file + (f":{self.line}:{self.col}" if self.line is not None else "")
        where += f"#{self.pointer}" if self.pointer is not None else ""
        return f"{where}: {self.severity} {self.code}: {self.message}"


@dataclass(frozen=True, slots=True)
class CheckReport:
    root: str
    revision: str | None
    findings: tuple[Finding, ...]

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "warning")

    def passed(self, strict: bool = False) -> bool:
        return not self.errors and not (strict and self.warnings)

    def as_json(self, strict: bool = False) -> dict[str, Any]:
        return {
            "root": self.root,
            "revision": self.revision,
            "passed": self.passed(strict),
            "strict": strict,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "findings": [{k: v for k, v in asdict(f).items() if v is not None} for f in self.findings],
        }


def check_policies(root: Path, compiled: bool = True) -> CheckReport:
    """Every error and warning of the policies under root. With `compiled` (GATEWAY_POLICY_COMPILED,
    where the gateway evaluates data.gateway.items), a Rego test that passes on the interpreter and
    fails there is an error: the service would refuse the revision (gateway/policy/tested.py)."""
    try:
        bundle = read_bundle(root)
    except ConfigurationError as exc:
        return CheckReport(str(root), None, (_bundle_error(root, exc.message),))
    findings = compile_modules(bundle) + check_data(bundle)
    for path, source in bundle.modules:
        findings += lint_module(str(bundle.root / path), source)
    if compiled and not any(f.severity == "error" for f in findings):
        findings += [
            Finding(
                "error",
                "compiled-path",
                str(bundle.root),
                f"{d.test} passes on the interpreter and fails where the gateway evaluates data.gateway.items "
                f"(regorus's compiled path: {d.why}); the service refuses this revision; change the policy, or "
                "evaluate it on the interpreter with GATEWAY_POLICY_COMPILED=false",
            )
            for d in diverging_tests(bundle)
        ]
    return CheckReport(str(root), bundle.revision, tuple(findings))


# --- compiling -------------------------------------------------------------------------------

REGORUS_WHERE = re.compile(r"-->\s*(?P<file>.+?):(?P<line>\d+):(?P<col>\d+)")
REGORUS_WHAT = re.compile(r"^error:\s*(?P<message>.+)$", re.M)


def engine_error(exc: Exception, fallback_file: str, code: str = "compile") -> Finding:
    """A regorus failure as a finding at file:line:col (its message carries the location)."""
    text = str(exc).split("Stack backtrace:")[0]
    where, what = REGORUS_WHERE.search(text), REGORUS_WHAT.search(text)
    message = what.group("message").strip() if what else (text.strip().splitlines() or ["failed"])[-1]
    if where is None:
        return Finding("error", code, fallback_file, message)
    return Finding("error", code, where.group("file"), message, int(where.group("line")), int(where.group("col")))


def compile_modules(bundle: PolicyBundle) -> list[Finding]:
    """Parse each module on its own (every syntax error, not only the first), then analyse and
    evaluate the whole bundle as the service would at start-up, probes included."""
    findings = []
    for path, source in bundle.modules + bundle.tests:
        try:
            new_engine().add_policy(str(bundle.root / path), source)
        except Exception as exc:  # regorus raises plain exceptions carrying file:line:col
            findings.append(engine_error(exc, str(bundle.root / path)))
    if findings:
        return findings
    engine = new_engine()
    try:
        for path, source in bundle.modules + bundle.tests:
            engine.add_policy(str(bundle.root / path), source)
        engine.add_data_json(json.dumps(bundle.data))
        engine.eval_query_as_json("1")  # the analysis of every rule: unsafe variables and the like
        for package in sorted(_packages(bundle)):
            engine.eval_query_as_json(f"data.{package}")  # conflicts and unknown functions in rules
        for entrypoint, probe in PROBES.items():
            findings += _probe(engine, entrypoint, probe, str(bundle.root))
    except Exception as exc:  # an evaluation error: reported where regorus located it
        findings.append(engine_error(exc, str(bundle.root)))
    return findings


def _packages(bundle: PolicyBundle) -> set[str]:
    packages = set()
    for _path, source in bundle.modules:
        match = re.search(r"^package\s+([\w.]+)", source, re.M)
        if match:
            packages.add(match.group(1))
    return packages


def _probe(engine: regorus.Engine, entrypoint: str, probe: dict[str, Any], root: str) -> list[Finding]:
    """The start-up self check: each entry point answers a probe with the expected shape."""
    query = "data." + ENTRYPOINTS[entrypoint].replace("/", ".")
    engine.set_input_json(json.dumps(probe))
    result = json.loads(engine.eval_query_as_json(query)).get("result") or []
    value = result[0]["expressions"][0]["value"] if result and result[0].get("expressions") else None
    key = "allow" if entrypoint == "request" else "allowed"
    wanted = bool if entrypoint == "request" else list
    if not isinstance(value, dict) or not isinstance(value.get(key), wanted):
        return [
            Finding(
                "error",
                "entrypoint",
                root,
                f"{query} does not answer the start-up probe with {'a boolean allow' if key == 'allow' else 'an allowed list'}",
            )
        ]
    return []


# --- the data document -------------------------------------------------------------------------


def check_data(bundle: PolicyBundle) -> list[Finding]:
    """data.gateway.config against gateway/policy/contract/data.schema.json, plus what a schema cannot say."""
    file = str(bundle.root / DATA_FILE)
    config = bundle.data.get("gateway", {}).get("config")
    if config is None:
        return [Finding("error", "data/missing", file, "no data document at data.gateway.config")]
    findings = []
    for violation in validate(config, "data"):
        pointer, _, message = violation.partition(": ")
        findings.append(Finding("error", "data/schema", file, message, pointer=pointer))
    levels = config.get("sensitivity_levels")
    tasks = config.get("task_types")
    if isinstance(levels, list) and isinstance(tasks, dict):
        for name, task in tasks.items():
            ceiling = task.get("max_sensitivity") if isinstance(task, dict) else None
            if isinstance(ceiling, str) and ceiling not in levels:
                findings.append(
                    Finding(
                        "error",
                        "data/unknown-sensitivity",
                        file,
                        f"{ceiling!r} is not one of sensitivity_levels",
                        pointer=f"/task_types/{name}/max_sensitivity",
                    )
                )
    return findings


# --- divergence heuristics ------------------------------------------------------------------------

INPUT_REF = re.compile(r"\binput(?:\.[A-Za-z_]\w*)+")
MEMBERSHIP = re.compile(r"\bin\s+(input(?:\.[A-Za-z_]\w*)+)(?![\w.\[])")
PARSE_CALL = re.compile(r"\btime\.(" + "|".join(PARSERS) + r")\s*\(")
NEGATION = re.compile(r"\bnot\s+([^;\n]+)")


def lint_module(file: str, source: str) -> list[Finding]:
    """Warnings for constructs the embedded engine and OPA evaluate differently: the heuristics
    below, and every construct of gateway/policy_tools/differences.py the module uses."""
    masked = mask(source)
    findings: list[Finding] = []
    for start, rule in rules(masked):
        for offset, code, message in _parse_null(rule) + _membership(rule) + _negated_input(rule):
            line, col = _position(source, start + offset)
            findings.append(Finding("warning", code, file, message, line, col))
    for offset, difference, used in known_differences(source, masked):
        line, col = _position(source, offset)
        findings.append(Finding("warning", f"engine-divergence/{difference.code}", file, difference.warning(used), line, col))
    return sorted(findings, key=lambda f: (f.line or 0, f.col or 0, f.code))


def known_differences(source: str, masked: str | None = None) -> list[tuple[int, Difference, str]]:
    """(offset, difference, the text found) for each use of a construct of DIFFERENCES in a module
    (or a query): the first on each line, per construct."""
    masked_text = mask(source) if masked is None else masked
    texts = {False: masked_text, True: mask(source, strings=False)}
    found = []
    for difference in DIFFERENCES:
        lines: set[int] = set()
        for match in difference.pattern.finditer(texts[difference.strings]):
            line = source.count("\n", 0, match.start())
            if match.groupdict().get("ok") is not None or line in lines or _defines(masked_text, match.groupdict().get("name")):
                continue
            lines.add(line)
            found.append((match.start(), difference, source[match.start() : match.end()]))
    return found


def _defines(masked: str, name: str | None) -> bool:
    """Whether the module defines `name`: a rule or function head, an import, a local variable."""
    if name is None:
        return False
    forms = (
        rf"^(?:default\s+)?{name}\b",  # a rule or function head, at column 0
        rf"^import\s+(?:\S+\s+as\s+{name}|[\w.]*\.{name})\s*$",
        rf"\b{name}\s*:?=(?!=)",  # assigned or unified
        rf"\b(?:some|every)\s+(?:\w+\s*,\s*)?{name}\b",
    )
    return any(re.search(form, masked, re.M) for form in forms)


def mask(source: str, *, strings: bool = True) -> str:
    """The source with comments (and, with strings, string contents) blanked, offsets unchanged."""
    out = list(source)
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if c == "#":
            while i < n and source[i] != "\n":
                out[i] = " "
                i += 1
        elif c in '"`':
            i += 1
            while i < n and source[i] != c and not (c == '"' and source[i] == "\n"):
                if c == '"' and source[i] == "\\" and i + 1 < n:
                    if strings:
                        out[i] = " "
                    i += 1
                if strings:
                    out[i] = " " if source[i] != "\n" else "\n"
                i += 1
            i += 1
        else:
            i += 1
    return "".join(out)


def rules(masked: str) -> list[tuple[int, str]]:
    """Each rule as (offset, text): from a line that starts at column 0 outside any bracket to the
    next; `else` branches stay with their rule; package and import lines are skipped."""
    found: list[tuple[int, str]] = []
    depth, offset, start = 0, 0, None
    for line in masked.splitlines(keepends=True):
        head = line.strip()
        at_top = depth == 0 and line[:1] not in ("", " ", "\t", "\n", "}", ")", "]")
        if at_top and head and not head.startswith("else"):
            if start is not None:
                found.append((start, masked[start:offset]))
            start = None if re.match(r"(package|import)\b", head) else offset
        depth = max(0, depth + sum(line.count(c) for c in "{[(") - sum(line.count(c) for c in "}])"))
        offset += len(line)
    if start is not None:
        found.append((start, masked[start:]))
    return found


def _guarded(rule: str, ref: str, guards: str = r"(?:lib\.)?is_\w+") -> bool:
    return re.search(guards + r"\(\s*" + re.escape(ref) + r"\s*\)", rule) is not None


def _parse_null(rule: str) -> list[tuple[int, str, str]]:
    found = []
    for match in PARSE_CALL.finditer(rule):
        args = _arguments(rule, match.end())
        if not args:
            continue
        value = args[PARSERS[match.group(1)]].strip()
        if value.startswith(('"', "`")) or _guarded(rule, value, "(?:" + "|".join(map(re.escape, STRING_GUARDS)) + ")"):
            continue
        found.append(
            (
                match.start(),
                "engine-divergence/parse-null",
                f"time.{match.group(1)}({value}) without is_string({value}) in the same rule: the embedded "
                "engine fails the whole evaluation (503) on null or a non-string, where OPA treats the call "
                "as undefined",
            )
        )
    return found


def _arguments(text: str, start: int) -> list[str]:
    """The top-level arguments of a call whose opening parenthesis ends just before start."""
    depth, current = 0, start
    args: list[str] = []
    for i in range(start, len(text)):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return args + [text[current:i]]
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[current:i])
            current = i + 1
    return []


def _membership(rule: str) -> list[tuple[int, str, str]]:
    found = []
    for match in MEMBERSHIP.finditer(rule):
        ref = match.group(1)
        statement = re.split(r"[;|{\n]", rule[: match.start()])[-1]
        if re.match(r"\s*some\b", statement) or _guarded(rule, ref):
            continue  # iteration (`some x in input.items`), or a type guard on the same reference
        effect = (
            "OPA leaves the rule undefined while the embedded engine makes `not ... in` true"
            if re.match(r"\s*not\b", statement)
            else "the test is undefined, and a caller that negates this rule sees it fail on both engines"
        )
        found.append(
            (
                match.start(1),
                "engine-divergence/membership",
                f"membership test on {ref} without a guard: when it is absent, {effect}; read it with "
                f"object.get(..., default) or guard it with is_array({ref})",
            )
        )
    return found


def _negated_input(rule: str) -> list[tuple[int, str, str]]:
    found = []
    for negation in NEGATION.finditer(rule):
        expression = negation.group(1)
        for ref in INPUT_REF.finditer(expression):
            name = ref.group(0)
            after = expression[ref.end() :]
            if name.count(".") < 2 or _guarded(rule, name) or after.startswith((".", "[")):
                continue  # input.<key> is always sent (gateway/policy/contract/); deeper fields may be absent
            if re.match(r"\s*==", after) or re.search(r"==\s*$", expression[: ref.start()]):
                continue  # a plain comparison is undefined, and so negated, on both engines alike
            if re.search(r"\bin\s+$", expression[: ref.start()]):
                continue  # reported as a membership test
            found.append(
                (
                    negation.start(1) + ref.start(),
                    "unguarded-input",
                    f"{name} inside `not` without a guard: when it is absent, OPA leaves the rule "
                    "undefined while the embedded engine makes the negation true; read it with "
                    "object.get(..., default) or guard it (is_string, is_array, ...)",
                )
            )
    return found


def _position(source: str, offset: int) -> tuple[int, int]:
    line = source.count("\n", 0, offset) + 1
    return line, offset - (source.rfind("\n", 0, offset) + 1) + 1


def _bundle_error(root: Path, message: str) -> Finding:
    """read_bundle's error ("path:line: message" or a sentence) as a finding."""
    match = re.match(r"^(?P<file>[^\s:]+\.(?:json|rego)):(?P<line>\d+): (?P<message>.*)$", message)
    if match:
        return Finding("error", "bundle", str(root / match.group("file")), match.group("message"), int(match.group("line")), 1)
    return Finding("error", "bundle", str(root), message)
