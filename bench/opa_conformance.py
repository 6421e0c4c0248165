"""OPA's own Rego conformance cases on the embedded engine (regorus, as the gateway calls it, on
its interpreter and on its compiled path) and on the `opa` binary (the reference), with a report
of what each passes.

OPA ships ~2,400 evaluation cases in its Go module, under v1/test/cases/testdata/v1 (YAML: modules,
data, input, a query and the result or error it must give). This script:

1. fetches them at the OPA version ./scripts/engines pins (`go mod download` into a module cache
   outside the checkout, ~/.cache/governed-gateway/gomod; a second run reuses it);
2. decodes the YAML with the `opa` binary itself (`yaml.unmarshal`, the decoder OPA's own runner
   uses: YAML 1.2, numbers kept exactly), and each `input_term` (a Rego term) likewise; the decoded
   cases are cached beside the module (~/.cache/governed-gateway/opa-conformance/);
3. runs every case on the embedded engine exactly as the gateway does: `build_engine` of
   gateway/policy/embedded.py (regorus.Engine with the gateway's options, add_policy per module,
   add_data_json of the data as read_bundle parses it), then `set_input_json` and
   `eval_query_as_json`, in policy processes of its own (a case that crashes or runs past the
   gateway's EVAL_TIMEOUT_S fails alone), two at a time;
4. runs the cases that ask for one document (`x = data.a.b`) on the compiled path, as
   gateway/policy/compiled.py runs data.gateway.items (Program.compile_from_modules, Rvm); a case
   that does not compile is skipped there, as the gateway would use the interpreter;
5. runs every case on `opa eval` (one process per case, two at a time, with
   --strict-builtin-errors where the case asks for it: the one switch OPA's runner sets per case;
   about 35 s in all on 2 cores; one long-running `opa run --server` is faster but its query API
   has no strict mode: see bench/README.md);
6. judges each answer as OPA's runner does (v1/topdown/exported_test.go): want_error must be in the
   error's text, want_error_code must be its code, want_result is compared as a set of bindings
   (numbers by value; with sort_bindings each binding's array sorted first; `[]` is undefined), and
   any error where none is wanted fails (on the embedded engine, which has no error codes, any
   evaluation error passes where one is wanted: see `judge`);
7. writes a report: pass/fail/error/skip by directory for each engine, and every case that did not
   pass, with a one-line reason; for the embedded engine the known difference of
   gateway/policy_tools/differences.py that explains it (or UNEXPLAINED).

Statuses: pass; fail (an answer, but not the wanted one, or no error where one is wanted);
error (an error where a result is wanted, or the wrong error); skip (a case the harness cannot put
to that engine as the gateway would: a Rego-only input such as a set, a builtin only OPA's Go test
suite registers; listed in SKIPS with the reason).

Usage (from the project root, with the project's venv):
    .venv/bin/python bench/opa_conformance.py                  # all three engines, report on stdout
    .venv/bin/python bench/opa_conformance.py --report bench/opa-conformance.md --json /tmp/c.json
    .venv/bin/python bench/opa_conformance.py --engines embedded --only time/ --verbose
Needs Go (the module proxy) and the `opa` binary ./scripts/engines builds (or --opa PATH).
tests/policies/test_opa_conformance.py runs it with --json and holds the outcome to differences.py.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from functools import cmp_to_key
from pathlib import Path
from typing import Any

from gateway.policy.embedded import EVAL_TIMEOUT_S

ROOT = Path(__file__).resolve().parent.parent
MODULE = "github.com/open-policy-agent/opa"
CASES_DIR = "v1/test/cases/testdata/v1"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "governed-gateway"
ENGINES_DIR = Path(os.environ.get("GATEWAY_ENGINES_DIR") or CACHE / "bin")
# A case still running after this is ended and counted an error: on the embedded engine the
# gateway's own limit (EVAL_TIMEOUT_S of gateway/policy/embedded.py, 5 s: past it the policy process
# is ended and the call is a 503), on opa a generous one (an `opa eval` process starts in ~20 ms).
OPA_TIMEOUT_S = 30.0
STATUSES = ("pass", "fail", "error", "skip")

# Cases the harness cannot put to an engine as the gateway (or an OPA deployment) would: case ->
# (the engines it is skipped on, why).
BOTH = ("embedded", "opa")
SKIPS: dict[str, tuple[tuple[str, ...], str]] = {
    "time/time caching": (BOTH, "calls test.sleep, a builtin only OPA's Go test suite registers"),
    "baseandvirtualdocs/enumerate virtual errors": (
        BOTH,
        "wants both an error and the results OPA's evaluator produced before it; an engine answers one or the other",
    ),
    "baseandvirtualdocs/base/virtual: conflicts": (
        ("opa",),
        "data and a rule at the same path: OPA's Go runner skips the path-conflict check that opa eval, "
        "opa run and bundles apply (rego_compile_error)",
    ),
    "withkeyword/builtin-builtin: arity 0": (
        ("opa",),
        "reads opa.runtime(), {} in OPA's Go runner and the process's environment in opa eval",
    ),
}
SET_INPUT = "its input_term is not JSON (a set, or an object with non-string keys): the gateway sends JSON input"


def pinned_opa_version() -> str:
    """OPA_VERSION of ./scripts/engines: the one version the project builds and tests against."""
    match = re.search(r"^OPA_VERSION=(\S+)", (ROOT / "scripts" / "engines").read_text(), re.M)
    if match is None:
        raise SystemExit("scripts/engines names no OPA_VERSION")
    return match.group(1)


def regorus_version() -> str:
    from importlib.metadata import version

    return f"gordon-to-regorus {version('gordon-to-regorus')}"


# ------------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    name: str  # the case's note, with " #N" when N cases share it (OPA's notes are not all unique)
    file: str  # relative to testdata/v1: "aggregates/test-aggregates-0001.yaml"
    query: str
    modules: tuple[str, ...]
    data_json: str | None  # exactly as OPA decoded it (numbers as written)
    input_json: str | None
    want_result: list[dict[str, Any]] | None
    want_error: str | None
    want_error_code: str | None
    strict_error: bool
    sort_bindings: bool
    ignore_generated_vars: bool
    skip: dict[str, str] = field(default_factory=dict)  # engine -> why the harness cannot express it there

    @property
    def directory(self) -> str:
        return self.file.split("/", 1)[0]


def module_dir(version: str) -> Path:
    """OPA's module at `version`, downloaded (checksum-verified) into the project's module cache."""
    if shutil.which("go") is None:
        raise SystemExit("Go is not installed: the cases come from OPA's Go module (install Go 1.26)")
    env = {**os.environ, "GOMODCACHE": str(CACHE / "gomod"), "GOFLAGS": "-mod=mod"}
    done = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{version}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    if done.returncode != 0:
        raise SystemExit(f"go mod download {MODULE}@{version} failed: {done.stdout}{done.stderr}")
    return Path(json.loads(done.stdout)["Dir"])


def opa_binary(version: str, given: str | None = None) -> str:
    """--opa, else GATEWAY_TEST_OPA_BIN, else the opa-<version> ./scripts/engines built."""
    for candidate in (given, os.environ.get("GATEWAY_TEST_OPA_BIN"), str(ENGINES_DIR / f"opa-{version}")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit(f"no opa {version}: build it with ./scripts/engines, or pass --opa PATH")


DECODE = """package conformance_decode

cases := [c |
	some path, text in input.files
	document := yaml.unmarshal(text)
	some i, tc in document.cases
	c := object.union(tc, object.union({"file": path, "index": i}, encoded(tc)))
]

encoded(tc) := {k: json.marshal(v) |
	some name in ["data", "input"]
	v := tc[name]
	k := concat("_", [name, "json"])
}
"""
TERMS = """package conformance_terms_out

terms[name] := describe(term) if {
	some name, term in data.conformance_terms
}

describe(term) := {"json": json.marshal(term)} if plain(term)

describe(term) := {"json": null} if not plain(term)

plain(term) if count([x | walk(term, [_, x]); not_json(x)]) == 0

not_json(x) if is_set(x)

not_json(x) if {
	is_object(x)
	some k, _ in x
	not is_string(k)
}
"""


def opa_eval_json(opa: str, directory: Path, args: list[str], query: str, timeout: float = 600) -> Any:
    done = subprocess.run(
        [opa, "eval", "--format", "json", *args, query], capture_output=True, text=True, cwd=directory, timeout=timeout
    )
    if done.returncode != 0:
        raise SystemExit(f"opa eval {query} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return json.loads(done.stdout, parse_float=Decimal)["result"][0]["expressions"][0]["value"]


def load_cases(version: str, opa: str, *, refresh: bool = False) -> list[Case]:
    """Every case of testdata/v1, decoded by OPA (cached per version and decoder)."""
    decoder = hashlib.sha256((DECODE + TERMS).encode()).hexdigest()[:8]
    cached = CACHE / "opa-conformance" / f"cases-{version}-{decoder}.json"
    if refresh or not cached.exists():
        root = module_dir(version) / CASES_DIR
        files = {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*.yaml"))}
        with tempfile.TemporaryDirectory(prefix="opa-conformance-") as tmp:
            work = Path(tmp)
            (work / "input.json").write_text(json.dumps({"files": files}))
            (work / "decode.rego").write_text(DECODE)
            raw = opa_eval_json(opa, work, ["-d", "decode.rego", "-i", "input.json"], "data.conformance_decode.cases")
            terms = [c["input_term"] for c in raw if "input_term" in c]
            described: dict[str, Any] = {}
            if terms:
                module = "package conformance_terms\n\n" + "".join(f"t{i} := {t}\n\n" for i, t in enumerate(terms))
                (work / "terms.rego").write_text(module)
                (work / "terms_out.rego").write_text(TERMS)
                described = opa_eval_json(
                    opa, work, ["-d", "terms.rego", "-d", "terms_out.rego"], "data.conformance_terms_out.terms"
                )
        term_json = iter([described[f"t{i}"]["json"] for i in range(len(terms))])
        for c in raw:
            if "input_term" in c:
                c["input_json"] = next(term_json)
                c["input_term_not_json"] = c["input_json"] is None
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(dumps_exact(raw))
        partial.replace(cached)  # whole or not at all, for a run beside this one
    raw = sorted(json.loads(cached.read_text(), parse_float=Decimal), key=lambda c: (c["file"], c["index"]))
    notes = Counter(c["note"] for c in raw)
    seen: Counter[str] = Counter()
    cases = []
    for c in raw:
        seen[c["note"]] += 1
        name = c["note"] if notes[c["note"]] == 1 else f"{c['note']} #{seen[c['note']]}"
        engines, why = SKIPS.get(name) or ((BOTH, SET_INPUT) if c.get("input_term_not_json") else ((), ""))
        skip = dict.fromkeys(engines, why)
        cases.append(
            Case(
                name=name,
                file=c["file"],
                query=c["query"],
                modules=tuple(c.get("modules") or ()),
                data_json=None if c.get("data_json") == "null" else c.get("data_json"),  # `data:` left empty
                input_json=None if "input_term" not in c and c.get("input_json") == "null" else c.get("input_json"),
                want_result=c.get("want_result"),
                want_error=c.get("want_error"),
                want_error_code=c.get("want_error_code"),
                strict_error=bool(c.get("strict_error")),
                sort_bindings=bool(c.get("sort_bindings")),
                ignore_generated_vars=bool(c.get("ignore_generated_vars")),
                skip=skip,
            )
        )
    return cases


def dumps_exact(value: Any) -> str:
    """JSON with Decimals written as their own literal (json.dumps would make them floats)."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ",".join(dumps_exact(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(k) + ":" + dumps_exact(v) for k, v in value.items()) + "}"
    raise TypeError(type(value))


# ------------------------------------------------------------------------------- judging


@dataclass
class Answer:
    """What an engine said: its result set (list of bindings) or its error (text, code when known)."""

    results: list[dict[str, Any]] | None = None
    error: str | None = None
    code: str | None = None
    skip: str | None = None  # the engine cannot take this case (the compiled path: not a document, no program)
    seconds: float = 0.0


@dataclass
class Outcome:
    name: str
    directory: str
    status: str
    reason: str = ""
    seconds: float = 0.0


def type_rank(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool):
        return 1
    if isinstance(value, (int, Decimal, float)):
        return 2
    if isinstance(value, str):
        return 3
    if isinstance(value, list):
        return 4
    return 5


def compare(a: Any, b: Any) -> int:
    """OPA's util.Compare: null < booleans < numbers < strings < arrays < objects."""
    ra, rb = type_rank(a), type_rank(b)
    if ra != rb:
        return -1 if ra < rb else 1
    if ra == 0:
        return 0
    if ra in (1, 2):
        x, y = (Decimal(a) if ra == 2 else a), (Decimal(b) if ra == 2 else b)
        return int(x > y) - int(x < y)
    if ra == 3:
        return int(a > b) - int(a < b)
    if ra == 4:
        for x, y in zip(a, b):
            c = compare(x, y)
            if c:
                return c
        return (len(a) > len(b)) - (len(a) < len(b))
    ka, kb = sorted(a), sorted(b)
    for x, y in zip(ka, kb):
        if x != y:
            return -1 if x < y else 1
        c = compare(a[x], b[y])
        if c:
            return c
    return (len(ka) > len(kb)) - (len(ka) < len(kb))


def canonical(value: Any) -> Any:
    """A hashable form in which numbers compare by value and true is not 1."""
    if isinstance(value, bool) or value is None:
        return ("b", value)
    if isinstance(value, (int, float, Decimal)):
        return ("n", Decimal(value).normalize() if not isinstance(value, float) else Decimal(repr(value)).normalize())
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("a", tuple(canonical(v) for v in value))
    return ("o", frozenset((k, canonical(v)) for k, v in value.items()))


def result_set(bindings: Iterable[dict[str, Any]], *, sort: bool = False, ignore_generated: bool = False) -> frozenset[Any]:
    out = set()
    for b in bindings:
        row = {}
        for name, value in b.items():
            if ignore_generated and name.startswith("__localq"):
                continue
            if sort and isinstance(value, list):
                value = sorted(value, key=cmp_to_key(compare))
            row[name] = value
        out.add(canonical(row))
    return frozenset(out)


def short(value: Any, limit: int = 160) -> str:
    text = dumps_exact(value) if not isinstance(value, str) else value
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# regorus's errors that stop a policy before it is evaluated: a module that does not load, a function
# it does not have, a variable its analysis finds unsafe. The errors OPA's cases want are evaluation
# errors (eval_type_error, eval_builtin_error, eval_conflict_error): these are not one of them.
NOT_EVALUATED = re.compile(r"^load: |could not find function|is unsafe|undefined rule")


def judge(case: Case, answer: Answer, *, error_text: bool = True) -> tuple[str, str]:
    """(status, reason) as OPA's runner would decide, reason empty on a pass. Without error_text
    (the embedded engine: regorus has messages of its own and no error codes, and the gateway reads
    neither, any error being a 503) an evaluation error where one is wanted passes whatever it says."""
    if case.want_error is not None or case.want_error_code is not None:
        if answer.error is None:
            wanted = " ".join(w for w in (case.want_error_code, case.want_error) if w)
            return "fail", f"wanted error {wanted}, got " + (short(answer.results) if answer.results else "undefined")
        if not error_text and NOT_EVALUATED.search(answer.error):
            return "error", f"wanted an evaluation error, got: {short(answer.error)}"
        if error_text and case.want_error is not None and case.want_error not in answer.error:
            return "error", f"wanted error text {case.want_error!r}, got: {short(answer.error)}"
        if error_text and case.want_error_code is not None and answer.code != case.want_error_code:
            return "error", f"wanted error code {case.want_error_code}, got {answer.code}: {short(answer.error)}"
    elif answer.error is not None:
        return "error", f"unexpected error: {short(answer.error)}"
    if case.want_result is not None:
        got = result_set(answer.results or [], sort=case.sort_bindings, ignore_generated=case.ignore_generated_vars)
        want = result_set(case.want_result)
        if got != want:
            if not answer.results:
                return "fail", f"undefined, wanted {short(case.want_result)}"
            if not case.want_result:
                return "fail", f"wanted undefined, got {short(answer.results)}"
            return "fail", f"got {short(answer.results)}, wanted {short(case.want_result)}"
    return "pass", ""


# ------------------------------------------------------------------------------- the embedded engine


def worker() -> None:
    """A policy process of the harness: one case a line in (JSON), one answer a line out.

    The engine is built as the gateway's policy process builds it (build_engine), the input set and
    the query evaluated as it evaluates an entry point (set_input_json, eval_query_as_json); the
    bindings of every result are the answer (the gateway reads the first expression's value).
    """
    from core.errors import ConfigurationError
    from gateway.policy.bundle import PolicyBundle
    from gateway.policy.embedded import build_engine

    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # stray writes (print) land on stderr, never in an answer
    for line in sys.stdin:
        case = json.loads(line)
        started = time.perf_counter()
        modules = tuple((f"test-{i}.rego", m) for i, m in enumerate(case["modules"]))
        data = json.loads(case["data_json"]) if case["data_json"] is not None else {}
        try:
            if case["mode"] == COMPILED:
                out = compiled(modules, data, case["input_json"], case["query"])
            else:
                engine = build_engine(PolicyBundle(Path("."), modules, (), data, ""))
                if case["input_json"] is not None:
                    engine.set_input_json(case["input_json"])
                raw = json.loads(engine.eval_query_as_json(case["query"]))
                out = {"results": [r.get("bindings", {}) for r in raw.get("result", [])]}
        except ConfigurationError as exc:  # a module that does not load (build_engine: "policy error: ...")
            out = {"error": "load: " + compact(exc.message)}
        except BaseException as exc:  # regorus raises plain exceptions carrying file:line:col; the VM may panic
            out = {"error": compact(str(exc)) or type(exc).__name__}
        out["seconds"] = time.perf_counter() - started
        answers.write(json.dumps(out) + "\n")
        answers.flush()


# The compiled path (gateway/policy/compiled.py: regorus's Program and Rvm) answers one document, so
# it takes the cases that ask for one: `x = data.a.b` or `data.a.b = x`.
COMPILED = "embedded-compiled"
DOCUMENT_QUERY = re.compile(
    r"^\s*(?:(?P<v1>[A-Za-z_]\w*)\s*=\s*(?P<d1>data(?:\.[A-Za-z_]\w*)+)|(?P<d2>data(?:\.[A-Za-z_]\w*)+)\s*=\s*(?P<v2>[A-Za-z_]\w*))\s*$"
)


def compiled(modules: tuple[tuple[str, str], ...], data: Any, input_json: str | None, query: str) -> dict[str, Any]:
    """A document query on the compiled path as gateway/policy/compiled.py runs one: the modules and
    data compiled to a program with the document as its entry point, run by an Rvm."""
    import regorus

    match = DOCUMENT_QUERY.match(query)
    if match is None:
        return {"skip": "not a document query (x = data.a.b): the compiled path answers documents"}
    var, document = match.group("v1") or match.group("v2"), match.group("d1") or match.group("d2")
    data_json = json.dumps(data)
    try:
        program = regorus.Program.compile_from_modules(data_json, list(modules), [document])
    except BaseException as exc:  # the gateway then evaluates the bundle with the interpreter
        return {"skip": f"does not compile to a program (the gateway uses the interpreter): {compact(str(exc))[:80]}"}
    vm = regorus.Rvm()
    vm.load_program(program)
    vm.set_data_json(data_json)
    if input_json is not None:
        vm.set_input_json(input_json)
    value = json.loads(vm.execute_entry_point(document))
    return {"results": [] if value == "<undefined>" else [{var: value}]}


def compact(text: str) -> str:
    """regorus's error ("--> file:line:col", the line, a caret, "error: message") on one line."""
    from gateway.policy_tools.check import engine_error

    finding = engine_error(Exception(text), "")
    where = f"{finding.file}:{finding.line}:{finding.col}: " if finding.line is not None else ""
    return where + finding.message


class EmbeddedProcess:
    """One harness policy process; replaced when a case crashes it or runs past EVAL_TIMEOUT_S."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.process: subprocess.Popen[str] | None = None

    def ask(self, case: Case) -> Answer:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                cwd=ROOT,
            )
        assert self.process.stdin is not None and self.process.stdout is not None
        message = {
            "mode": self.mode,
            "modules": case.modules,
            "data_json": case.data_json,
            "input_json": case.input_json,
            "query": case.query,
        }
        started = time.perf_counter()
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
            ready, _, _ = select.select([self.process.stdout], [], [], EVAL_TIMEOUT_S)
            line = self.process.stdout.readline() if ready else ""
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            timed_out = self.process.poll() is None
            self.stop()
            what = (
                f"ran past {EVAL_TIMEOUT_S:.0f} s (the gateway ends its policy process there: 503)"
                if timed_out
                else "the policy process died"
            )
            return Answer(error=what, seconds=time.perf_counter() - started)
        out = json.loads(line, parse_float=Decimal)
        return Answer(results=out.get("results"), error=out.get("error"), skip=out.get("skip"), seconds=float(out["seconds"]))

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.wait()


def run_embedded(cases: list[Case], jobs: int, mode: str = "embedded") -> Iterator[tuple[Case, Answer]]:
    processes = [EmbeddedProcess(mode) for _ in range(jobs)]
    idle = list(processes)

    def one(case: Case) -> tuple[Case, Answer]:
        process = idle.pop()
        try:
            return case, process.ask(case)
        finally:
            idle.append(process)

    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            yield from pool.map(one, cases)
    finally:
        for process in processes:
            process.stop()


# ------------------------------------------------------------------------------- the opa binary


def opa_case(opa: str, case: Case) -> Answer:
    """One `opa eval` with the case's modules (test-N.rego, as OPA's runner names them), data and input."""
    with tempfile.TemporaryDirectory(prefix="opa-case-") as tmp:
        work = Path(tmp)
        args = ["--strict-builtin-errors"] if case.strict_error else []
        for i, module in enumerate(case.modules):
            (work / f"test-{i}.rego").write_text(module)
            args += ["-d", f"test-{i}.rego"]
        if case.data_json is not None:
            (work / "data.json").write_text(case.data_json)
            args += ["-d", "data.json"]
        if case.input_json is not None:
            (work / "input.json").write_text(case.input_json)
            args += ["-i", "input.json"]
        started = time.perf_counter()
        try:
            done = subprocess.run(
                [opa, "eval", "--format", "json", *args, case.query],
                capture_output=True,
                text=True,
                cwd=work,
                timeout=OPA_TIMEOUT_S,
                env={**os.environ, "OPA_TELEMETRY": "false"},
            )
        except subprocess.TimeoutExpired:
            return Answer(error=f"ran past {OPA_TIMEOUT_S:.0f} s", seconds=time.perf_counter() - started)
        seconds = time.perf_counter() - started
    try:
        out = json.loads(done.stdout, parse_float=Decimal)
    except ValueError:
        return Answer(error=f"exit {done.returncode}: {done.stdout[-500:]}{done.stderr[-500:]}", seconds=seconds)
    if out.get("errors"):
        first = out["errors"][0]
        return Answer(error="; ".join(map(error_text, out["errors"])), code=first.get("code"), seconds=seconds)
    return Answer(results=[r.get("bindings", {}) for r in out.get("result", [])], seconds=seconds)


def error_text(error: dict[str, Any]) -> str:
    """An error of `opa eval --format json` as OPA's Go error prints it: "file:row: code: message"."""
    where = error.get("location") or {}
    at = f"{where['file']}:{where.get('row', 0)}" if where.get("file") else f"{where.get('row', 0)}:{where.get('col', 0)}"
    return f"{at + ': ' if where else ''}{error.get('code', '')}: {error.get('message', '')}"


def run_opa(cases: list[Case], opa: str, jobs: int) -> Iterator[tuple[Case, Answer]]:
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        yield from pool.map(lambda c: (c, opa_case(opa, c)), cases)


# ------------------------------------------------------------------------------- the run and its report


@dataclass
class EngineRun:
    engine: str
    seconds: float = 0.0
    outcomes: list[Outcome] = field(default_factory=list)

    def counts(self) -> dict[str, dict[str, int]]:
        by: dict[str, Counter[str]] = defaultdict(Counter)
        for o in self.outcomes:
            by[o.directory][o.status] += 1
        return {d: {s: by[d][s] for s in STATUSES} for d in sorted(by)}

    def totals(self) -> dict[str, int]:
        c = Counter(o.status for o in self.outcomes)
        return {s: c[s] for s in STATUSES}


def run(engine: str, cases: list[Case], opa: str, jobs: int, verbose: bool) -> EngineRun:
    harness = "embedded" if engine == COMPILED else engine  # the harness skips alike on both embedded paths
    runnable = [c for c in cases if harness not in c.skip]
    result = EngineRun(engine)
    result.outcomes = [Outcome(c.name, c.directory, "skip", c.skip[harness]) for c in cases if harness in c.skip]
    started = time.perf_counter()
    answers = run_opa(runnable, opa, jobs) if engine == "opa" else run_embedded(runnable, jobs, engine)
    for n, (case, answer) in enumerate(answers, 1):
        if answer.skip is not None:
            result.outcomes.append(Outcome(case.name, case.directory, "skip", answer.skip, answer.seconds))
            continue
        status, reason = judge(case, answer, error_text=engine == "opa")
        result.outcomes.append(Outcome(case.name, case.directory, status, reason, answer.seconds))
        if verbose and status != "pass":
            print(f"{engine} {status}: {case.name}: {reason}", file=sys.stderr)
        if n % 500 == 0:
            print(f"{engine}: {n}/{len(runnable)} cases in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    result.seconds = time.perf_counter() - started
    result.outcomes.sort(key=lambda o: (o.directory, o.name))
    return result


def explain(name: str) -> str:
    """The known difference (gateway/policy_tools/differences.py) a failing embedded case is filed under."""
    from gateway.policy_tools.differences import difference_of

    found = difference_of(name)
    return f"`{found.code}`" if found is not None else "UNEXPLAINED"


TITLES = {"embedded": "embedded (interpreter)", COMPILED: "embedded, compiled path", "opa": "opa"}


def markdown(version: str, runs: list[EngineRun], cases: list[Case], date: str) -> str:
    from gateway.policy_tools.differences import DIFFERENCES

    by_engine = {r.engine: r for r in runs}
    directories = sorted({c.directory for c in cases})
    lines = [
        "[Manual](../docs/index.md) › [Benchmarks](README.md) › OPA conformance",
        "",
        "# OPA's Rego conformance cases on the embedded engine and on OPA",
        "",
        f"Generated by `bench/opa_conformance.py` on {date}: the {len(cases)} cases of OPA {version} "
        f"(`{MODULE}@{version}`, `{CASES_DIR}`, {len(directories)} directories), run on the embedded engine "
        f"({regorus_version()}) as the gateway calls it, on its compiled path (what the gateway runs "
        f"`data.gateway.items` on) where a case can go there, and on `opa` {version}, the reference. How the "
        "cases are run and judged: [bench/README.md](README.md#opas-conformance-cases-benchopa_conformancepy); "
        "what the embedded engine's failures mean for a policy: "
        "[Writing policies](../docs/writing-policies.md#known-differences-from-opas-own-test-cases).",
        "",
        "## Totals",
        "",
        "| engine | cases | pass | fail | error | skip | run time (2 at a time) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        t = r.totals()
        lines.append(
            f"| {TITLES[r.engine]} | {len(r.outcomes)} | {t['pass']} | {t['fail']} | {t['error']} | {t['skip']} | {r.seconds:.0f} s |"
        )
    names = [r.engine for r in runs]
    lines += [
        "",
        "## By directory",
        "",
        "pass / fail / error / skip; in bold where a case fails or errs.",
        "",
        "| directory | cases | " + " | ".join(TITLES[n] for n in names) + " |",
        "|---|---:|" + "---|" * len(names),
    ]
    counts = {r.engine: r.counts() for r in runs}
    for d in directories:
        cells = []
        for n in names:
            c = counts[n].get(d, dict.fromkeys(STATUSES, 0))
            text = f"{c['pass']} / {c['fail']} / {c['error']} / {c['skip']}"
            cells.append(f"**{text}**" if c["fail"] or c["error"] else text)
        total = sum(counts[names[0]].get(d, {}).values())
        lines.append(f"| {d} | {total} | " + " | ".join(cells) + " |")
    embedded = by_engine.get("embedded")
    if embedded is not None:
        failing = [o for o in embedded.outcomes if o.status in ("fail", "error")]
        per = Counter(explain(o.name) for o in failing)
        lines += [
            "",
            f"## The embedded engine's failures by known difference ({len(failing)})",
            "",
            "Each construct, its example and what the check says: "
            "[Writing policies](../docs/writing-policies.md#known-differences-from-opas-own-test-cases).",
            "",
            "| group | known difference | construct | cases |",
            "|---|---|---|---:|",
        ]
        groups: Counter[str] = Counter()
        for known in DIFFERENCES:
            groups[known.group] += per[f"`{known.code}`"]
            lines.append(f"| {known.group} | `{known.code}` | {cell(known.construct)} | {per.pop(f'`{known.code}`', 0)} |")
        lines += [f"| | {k} | | {v} |" for k, v in per.items()]
        lines += ["", "By group: " + "; ".join(f"{g.lower()} {n}" for g, n in groups.items()) + "."]
        lines += ["", f"## Cases that do not pass on the embedded engine ({len(failing)})", ""]
        lines += ["| case | status | known difference | reason |", "|---|---|---|---|"]
        lines += [f"| {code(o.name)} | {o.status} | {explain(o.name)} | {cell(o.reason)} |" for o in failing]
    compiled_run = by_engine.get(COMPILED)
    if compiled_run is not None:
        taken = [o for o in compiled_run.outcomes if o.status != "skip"]
        interpreter = {o.name: o.status for o in embedded.outcomes} if embedded is not None else {}
        worse = [o for o in taken if o.status in ("fail", "error") and interpreter.get(o.name) == "pass"]
        both = [o for o in taken if o.status in ("fail", "error") and interpreter.get(o.name) in ("fail", "error")]
        better = [o for o in taken if o.status == "pass" and interpreter.get(o.name) in ("fail", "error")]
        lines += [
            "",
            f"## The compiled path: cases that pass on the interpreter and not there ({len(worse)})",
            "",
            f"The compiled path takes a case that asks for one document (`x = data.a.b`) and compiles to a program: "
            f"{len(taken)} of {len(compiled_run.outcomes)}. Of those it passes {sum(o.status == 'pass' for o in taken)}; "
            f"{len(both)} fail on the interpreter as well (the known differences above), {len(better)} pass here and "
            f"not on the interpreter, and these {len(worse)} pass on the interpreter and not here: "
            "gateway/policy_tools/compiled_differences.toml lists them, and tests/policies/test_opa_conformance.py holds "
            "the compiled path to that list.",
            "",
            "| case | status | reason |",
            "|---|---|---|",
        ]
        lines += [f"| {code(o.name)} | {o.status} | {cell(o.reason)} |" for o in worse]
    opa_run = by_engine.get("opa")
    if opa_run is not None:
        failing = [o for o in opa_run.outcomes if o.status in ("fail", "error")]
        lines += ["", f"## Cases that do not pass on opa ({len(failing)})", ""]
        if not failing:
            lines.append("None.")
        else:
            lines += ["| case | status | reason |", "|---|---|---|"]
            lines += [f"| {code(o.name)} | {o.status} | {cell(o.reason)} |" for o in failing]
    skipped: dict[str, tuple[list[str], str]] = {}
    for case in cases:
        for engine, why in case.skip.items():
            skipped.setdefault(case.name, ([], why))[0].append(engine)
    lines += [
        "",
        f"## Cases the harness cannot put to an engine ({len(skipped)})",
        "",
        "| case | engines | why |",
        "|---|---|---|",
    ]
    lines += [f"| {code(n)} | {', '.join(e)} | {cell(why)} |" for n, (e, why) in skipped.items()]
    return "\n".join(lines) + "\n"


def code(text: str) -> str:
    """A case name as inline code (names hold backticks and pipes)."""
    return f"`` {cell(text)} ``"


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--engines",
        default=f"embedded,{COMPILED},opa",
        help=f"a comma-separated choice of embedded, {COMPILED} and opa (default: all three)",
    )
    parser.add_argument("--opa", help="the opa binary (default: GATEWAY_TEST_OPA_BIN, else the one ./scripts/engines built)")
    parser.add_argument("--only", action="append", default=[], help="run only the cases whose file or note starts with this")
    parser.add_argument("--jobs", type=int, default=2, help="cases run side by side on each engine (default 2)")
    parser.add_argument("--report", type=Path, help="write the Markdown report here (default: stdout)")
    parser.add_argument("--json", type=Path, help="write every outcome as JSON here (for tests/policies/test_opa_conformance.py)")
    parser.add_argument("--date", default=time.strftime("%Y-%m-%d"), help="the date the report names")
    parser.add_argument("--refresh", action="store_true", help="decode the cases again instead of reading the cache")
    parser.add_argument("--verbose", action="store_true", help="print every case that does not pass as it is judged")
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    version = pinned_opa_version()
    opa = opa_binary(version, args.opa)
    started = time.perf_counter()
    cases = load_cases(version, opa, refresh=args.refresh)
    if args.only:
        cases = [c for c in cases if c.file.startswith(tuple(args.only)) or c.name.startswith(tuple(args.only))]
    print(f"{len(cases)} cases of OPA {version} loaded in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    runs = [run(e.strip(), cases, opa, args.jobs, args.verbose) for e in args.engines.split(",") if e.strip()]
    for r in runs:
        print(f"{r.engine}: {r.totals()} in {r.seconds:.0f} s", file=sys.stderr)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "opa_version": version,
                    "regorus": regorus_version(),
                    "cases": len(cases),
                    "runs": {r.engine: {"seconds": r.seconds, "outcomes": [asdict(o) for o in r.outcomes]} for r in runs},
                },
                indent=1,
            )
        )
    text = markdown(version, runs, cases, args.date)
    if args.report:
        args.report.write_text(text)
    elif not args.json:
        print(text)


if __name__ == "__main__":
    main()
