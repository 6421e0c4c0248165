"""The policy's own Rego tests, run where the gateway evaluates the policy.

The gateway evaluates `data.gateway.items` on regorus's compiled path (gateway/policy/compiled.py),
which answers some Rego differently from the interpreter the tests (`gateway policy test`) and OPA
run on: OPA's conformance cases show where (gateway/policy_tools/compiled_differences.toml). The
compiler does not take `with`, which nearly every test uses, so a test cannot itself be compiled.
Instead the tests run on the interpreter twice: once as written, and once with the items package
answered by the compiled program. For that run the bundle's `gateway.items` modules are loaded
under another package, and a module of the gateway's own takes `package gateway.items`, answering
`allowed` and `denied` by calling the compiled program (a Python extension) with the test's
`input` and `data.gateway.config`, as the service would call it, chunks and fallbacks included.
A test that passes as written and fails there is a policy that does not run where it was tested:
`gateway policy check` reports it as an error, and the service refuses the revision (at start, or
on reload, keeping the one in force), running the tests in a child process with a deadline. With GATEWAY_POLICY_COMPILED=false, or a policy with no
program form, the interpreter serves and the tests as written are the ones that count.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import ConfigurationError
from gateway.policy.bundle import PolicyBundle
from gateway.policy.compiled import CompiledItems
from gateway.policy.embedded import build_engine, new_engine

ITEMS = "gateway.items"
SOURCE = "gateway_internal_source.items"  # where the bundle's items modules go for the compiled run
EXTENSION = "gateway_internal.compiled_items"
SHIM_PATH = "<gateway>/compiled_shim.rego"
SHIM = f"""package {ITEMS}

allowed := {EXTENSION}(input, data.gateway.config).allowed

denied := {EXTENSION}(input, data.gateway.config).denied
"""
PACKAGE = re.compile(r"^package\s+([\w.]+)", re.M)
TEST_RULE = re.compile(r"^(test_\w+)", re.M)


@dataclass(frozen=True, slots=True)
class Diverging:
    """A Rego test that passes on the interpreter and not with the items policy on the compiled path."""

    test: str  # data.<package>.<rule>
    why: str  # what it gave there: false, undefined, or the engine's error


def diverging_tests(bundle: PolicyBundle) -> list[Diverging]:
    """The bundle's Rego tests that pass as written and fail with data.gateway.items answered by its
    compiled program; [] when there are no tests or no program form (the interpreter serves). Runs
    regorus in this process: for `gateway policy check`; the service uses `refuse_diverging`."""
    if not bundle.tests:
        return []
    compiled = CompiledItems.compile(bundle)
    if compiled is None:
        return []
    written = _run(_engine(bundle, None), bundle, moved=False)
    on_compiled = _run(_engine(bundle, compiled), bundle, moved=True)
    return [
        Diverging(test, on_compiled[test])
        for test, outcome in written.items()
        if outcome == "pass" and on_compiled[test] != "pass"
    ]


def refuse_diverging(bundle: PolicyBundle) -> None:
    """ConfigurationError naming the tests that fail where the gateway would evaluate the policy.
    The tests run in a child process under TESTS_DEADLINE_S: regorus keeps the interpreter lock for
    a whole evaluation, so in the service's process a slow test would stop every call (the reason
    the policy itself runs in processes of its own, gateway/policy/embedded.py). The outcome is
    kept per content (modules, tests and data), so building the same policy again runs nothing."""
    if not bundle.tests:
        return
    content = json.dumps([bundle.modules, bundle.tests, bundle.data], sort_keys=True, default=str).encode()
    digest = hashlib.sha256(content).hexdigest()
    with _LOCK:
        diverging = _SEEN.get(digest)
    if diverging is None:
        diverging = _in_child(bundle)
        with _LOCK:
            _SEEN[digest] = diverging
            while len(_SEEN) > SEEN_MOST:
                del _SEEN[next(iter(_SEEN))]
    if diverging:
        named = "; ".join(f"{d.test} ({d.why})" for d in diverging[:5]) + (" and more" if len(diverging) > 5 else "")
        raise ConfigurationError(
            f"the policy's own Rego tests fail where the gateway evaluates data.gateway.items (regorus's compiled path) and "
            f"pass on its interpreter: {named}; change the policy (see `gateway policy check`), or evaluate it on the "
            "interpreter with GATEWAY_POLICY_COMPILED=false"
        )


TESTS_DEADLINE_S = 60.0  # the child running a policy's tests twice is killed after this
SEEN_MOST = 16  # policy contents whose outcome a process keeps
_SEEN: dict[str, tuple[Diverging, ...]] = {}
_LOCK = threading.Lock()


def _in_child(bundle: PolicyBundle) -> tuple[Diverging, ...]:
    """`diverging_tests` in `python -m gateway.policy.tested`, the bundle on its standard input."""
    payload = {"root": str(bundle.root), "modules": bundle.modules, "tests": bundle.tests, "data": bundle.data}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gateway.policy.tested"],
            input=json.dumps({**payload, "revision": bundle.revision}).encode(),
            capture_output=True,
            timeout=TESTS_DEADLINE_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ConfigurationError(
            f"the policy's own Rego tests did not finish within {TESTS_DEADLINE_S:g} s where the gateway evaluates it; refused"
        ) from exc
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        raise ConfigurationError(f"the policy's own Rego tests could not be run where the gateway evaluates it: {why[0][:200]}")
    return tuple(Diverging(test, why) for test, why in json.loads(done.stdout))


def _engine(bundle: PolicyBundle, compiled: CompiledItems | None) -> Any:
    """The interpreter with the bundle and its tests; with `compiled`, the items package answered by it."""
    engine = new_engine()
    for path, source in bundle.modules + bundle.tests:
        package = PACKAGE.search(source)
        if compiled is not None and package is not None and package.group(1) == ITEMS:
            # Moved with the policy: a test written in the items package itself refers to its rules
            # unqualified, so it keeps testing the interpreter's answer there (it is never refused).
            source = PACKAGE.sub(f"package {SOURCE}", source, count=1)
        engine.add_policy(str(bundle.root / path), source)
    if compiled is not None:
        engine.add_policy(SHIM_PATH, SHIM)
        engine.add_extension(EXTENSION, 2, _answer(bundle, compiled))
    engine.add_data_json(json.dumps(bundle.data))
    return engine


def _answer(bundle: PolicyBundle, compiled: CompiledItems) -> Any:
    """The extension: the compiled program's documents for `input`, with the data the test set."""
    fallback = build_engine(bundle)

    def answer(policy_input: Any, config: Any) -> dict[str, Any]:
        data = {**bundle.data, "gateway": {**bundle.data.get("gateway", {}), "config": config}}
        compiled.vm.set_data_json(json.dumps(data))
        fallback.clear_data()
        fallback.add_data_json(json.dumps(data))

        def interpreter(chunk_input: dict[str, Any]) -> dict[str, Any]:
            fallback.set_input_json(json.dumps(chunk_input))
            result = json.loads(fallback.eval_query_as_json(f"data.{ITEMS}")).get("result") or []
            value = result[0]["expressions"][0]["value"] if result else {}
            return value if isinstance(value, dict) else {}

        return compiled.evaluate(policy_input if isinstance(policy_input, dict) else {}, interpreter)

    return answer


def _run(engine: Any, bundle: PolicyBundle, moved: bool) -> dict[str, str]:
    """Each test's outcome, by its name as written: "pass", "false", "undefined" or the engine's
    error (its first line). `moved`: the items package's own modules are under SOURCE."""
    outcomes: dict[str, str] = {}
    for _path, source in bundle.tests:
        package = PACKAGE.search(source)
        if package is None:
            continue
        where = SOURCE if moved and package.group(1) == ITEMS else package.group(1)
        for name in sorted(set(TEST_RULE.findall(source))):
            test = f"data.{package.group(1)}.{name}"
            try:
                result = json.loads(engine.eval_query_as_json(f"data.{where}.{name}")).get("result") or []
                value = result[0]["expressions"][0]["value"] if result else None
                outcomes[test] = "pass" if value is True else "undefined" if not result else json.dumps(value)[:80]
            except Exception as exc:  # an evaluation error: the test fails, with the error's first line
                lines = [line.strip() for line in str(exc).splitlines() if line.strip().startswith("error:")]
                outcomes[test] = lines[0][:160] if lines else type(exc).__name__
    return outcomes


def main() -> None:
    """The child of `refuse_diverging`: a bundle as JSON on standard input, the diverging tests out."""
    given = json.loads(sys.stdin.buffer.read())
    bundle = PolicyBundle(
        Path(given["root"]),
        tuple((path, source) for path, source in given["modules"]),
        tuple((path, source) for path, source in given["tests"]),
        given["data"],
        given["revision"],
    )
    sys.stdout.write(json.dumps([[d.test, d.why] for d in diverging_tests(bundle)]))


if __name__ == "__main__":
    main()
