"""Measurement, not an integration: the project's policies compiled by `opa build -t wasm` and evaluated
in-process by opa-py-wasm (wasmtime), against regorus, on policy_cost_bench's workload (one
data.gateway.request decision plus the data.gateway.items verify of 200 candidates), and whether the
two decide alike on tests/policies/test_parity.py's cases.

It needs what the project's venv must not get, so run it from a separate venv:

    python3.11 -m venv /tmp/wasm-exp/venv
    /tmp/wasm-exp/venv/bin/pip install -e . opa-py-wasm pytest    # pytest only for --parity
    /tmp/wasm-exp/venv/bin/python bench/wasm_policy_bench.py --parity          # parity, then 200 rounds
    /tmp/wasm-exp/venv/bin/python bench/wasm_policy_bench.py --rounds 400 --json

and an `opa` binary to compile the Wasm (`--opa`, else $GATEWAY_TEST_OPA_BIN, else
~/.cache/governed-gateway/bin/opa-v1.22.3, else `opa` on PATH); it needs no Wasm runtime in opa.

What is compiled is a copy of policies/ in a temporary directory, changed in two ways only, both
forced by `opa build -t wasm` (OPA 1.22.3), neither changing a rule:
- the `# entrypoint: true` METADATA lines are dropped: on package gateway.items it makes the whole
  package an entrypoint, and a package document that holds functions (entity_visible, valid,
  first_failure, kind_readable) cannot be planned to Wasm ("function ... used as reference, not
  called"), whatever -e says;
- one module is added, `wasm_bench.items := {"allowed": data.gateway.items.allowed, "denied":
  data.gateway.items.denied}` (what verdict_from reads), so a verify is one Wasm evaluation, not two.
data.gateway.request is an entrypoint as it is (the whole package document).

The Wasm module calls two built-ins on the host: `sprintf` (opa-py-wasm has it) and
`time.parse_rfc3339_ns` (it does not; `parse_rfc3339_ns` below stands in, Go's RFC 3339 grammar).

Engines, interleaved round by round (the machine is shared and noisy: every figure is read against
baselines measured in the same run):
- `regorus-workers`: EmbeddedEngine.evaluate_sync, as the service runs it (policy processes, a pipe,
  JSON both ways) — the baseline of the ratios;
- `regorus-inproc`: a regorus.Engine in this process (set_input_json + eval_query_as_json);
- `wasm`: OpaWasmPolicy.evaluate in this process (pool of one instance).
The exit status is 1 when the engines' verdicts on the workload (or, with --parity, on the parity
cases) differ.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import types
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from opapywasm import UNDEFINED, OpaWasmPolicy, PolicyConfig  # noqa: E402
from opapywasm.errors import OpaWasmError  # noqa: E402
from policy_cost_bench import ACTOR, NOW, REQUEST, candidates, summary  # noqa: E402

from core.errors import PolicyUnavailable  # noqa: E402
from gateway.policy.base import check_request_result  # noqa: E402
from gateway.policy.bundle import read_bundle  # noqa: E402
from gateway.policy.decide import constraints_from, request_input  # noqa: E402
from gateway.policy.embedded import EmbeddedEngine, build_engine, first_value  # noqa: E402
from gateway.policy.verify import items_input, verdict_from  # noqa: E402
from gateway.settings import PROJECT_POLICIES  # noqa: E402

WRAPPER = 'package wasm_bench\n\nitems := {"allowed": data.gateway.items.allowed, "denied": data.gateway.items.denied}\n'
WASM_ENTRYPOINTS = {"request": "gateway/request", "items": "wasm_bench/items"}
ENGINES = ("regorus-workers", "regorus-inproc", "wasm")


# -- building and loading the Wasm --------------------------------------------------------------


def opa_binary(given: str | None) -> str:
    cached = Path.home() / ".cache/governed-gateway/bin/opa-v1.22.3"
    for candidate in (
        given,
        os.environ.get("GATEWAY_TEST_OPA_BIN"),
        str(cached) if cached.exists() else None,
        shutil.which("opa"),
    ):
        if candidate:
            return candidate
    raise SystemExit("no opa binary: pass --opa PATH")


def build_wasm(policies: Path, opa: str, into: Path) -> tuple[bytes, dict[str, Any]]:
    """(policy.wasm, data.json) of `opa build -t wasm` on a copy of `policies` (see the docstring)."""
    source = into / "policies"
    shutil.copytree(policies, source, ignore=shutil.ignore_patterns("*_test.rego"))
    for module in source.rglob("*.rego"):
        text = module.read_text(encoding="utf-8")
        module.write_text(re.sub(r"(?m)^# entrypoint: true\n", "", text), encoding="utf-8")
    (source / "wasm_bench.rego").write_text(WRAPPER, encoding="utf-8")
    bundle = into / "bundle.tar.gz"
    command = [opa, "build", "-t", "wasm", *(a for e in WASM_ENTRYPOINTS.values() for a in ("-e", e)), ".", "-o", str(bundle)]
    built = subprocess.run(command, cwd=source, capture_output=True, text=True)
    if built.returncode != 0:
        raise SystemExit(f"opa build -t wasm failed:\n{built.stdout}{built.stderr}")
    with tarfile.open(bundle) as archive:
        wasm = archive.extractfile("/policy.wasm").read()  # type: ignore[union-attr]
        data = json.load(archive.extractfile("/data.json"))  # type: ignore[arg-type]
    return wasm, data


RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:[.,]([0-9]+))?"
    r"(Z|([+-])([0-9]{2}):([0-9]{2}))\Z"
)
EPOCH = date(1970, 1, 1)


def parse_rfc3339_ns(value: Any) -> int:
    """time.parse_rfc3339_ns as Go's time.Parse(time.RFC3339, ...) reads it (ASCII digits, 'T' and 'Z'
    upper case, fraction of any length truncated to ns, offset +-hh:mm); raises on anything else, which
    fails the whole Wasm evaluation (opa-py-wasm turns a host built-in's error into OpaBuiltinError)."""
    if not isinstance(value, str):
        raise TypeError("time.parse_rfc3339_ns: operand 1 must be string")
    m = RFC3339.match(value)
    if not m:
        raise ValueError(f"time.parse_rfc3339_ns: cannot parse {value!r}")
    year, month, day, hour, minute, second = (int(g) for g in m.group(1, 2, 3, 4, 5, 6))
    if hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"time.parse_rfc3339_ns: out of range {value!r}")
    days = (date(year, month, day) - EPOCH).days
    offset = 0
    if m.group(8) != "Z":
        oh, om = int(m.group(10)), int(m.group(11))
        if oh > 23 or om > 59:
            raise ValueError(f"time.parse_rfc3339_ns: bad offset {value!r}")
        offset = (oh * 3600 + om * 60) * (1 if m.group(9) == "+" else -1)
    fraction = int(((m.group(7) or "") + "000000000")[:9])
    return (days * 86400 + hour * 3600 + minute * 60 + second - offset) * 1_000_000_000 + fraction


def load_wasm(wasm: bytes, data: dict[str, Any]) -> OpaWasmPolicy:
    policy = OpaWasmPolicy.from_wasm_bytes(wasm, config=PolicyConfig(pool_size=1))
    missing = set(policy.builtins) - {
        "sprintf",
        "json.is_valid",
        "yaml.is_valid",
        "yaml.marshal",
        "yaml.unmarshal",
        "time.parse_rfc3339_ns",
    }
    if missing:
        raise SystemExit(f"the Wasm needs host built-ins nobody provides: {sorted(missing)}")
    policy.register_builtin("time.parse_rfc3339_ns", parse_rfc3339_ns)
    policy.set_data(data)
    return policy


# -- the engines, one signature: (entrypoint, input) -> document, PolicyUnavailable on failure ----


class Engines:
    def __init__(self, opa: str, scratch: Path) -> None:
        bundle = read_bundle(PROJECT_POLICIES)
        self.embedded = EmbeddedEngine(bundle)
        self.regorus = build_engine(bundle)
        wasm, data = build_wasm(PROJECT_POLICIES, opa, scratch)
        self.wasm_bytes, self.data_equal = len(wasm), data == bundle.data
        self.wasm = load_wasm(wasm, data)
        self.host_builtins = sorted(self.wasm.builtins)
        self.by_name: dict[str, Callable[[str, dict[str, Any]], Any]] = {
            "regorus-workers": self.embedded.evaluate_sync,
            "regorus-inproc": self.on_regorus,
            "wasm": self.on_wasm,
        }

    def on_regorus(self, entrypoint: str, policy_input: dict[str, Any]) -> Any:
        try:
            self.regorus.set_input_json(json.dumps(policy_input, separators=(",", ":")))
            raw = self.regorus.eval_query_as_json(f"data.gateway.{entrypoint}")
        except Exception as exc:  # as the policy process answers: the engine's own failure
            raise PolicyUnavailable(f"regorus: {type(exc).__name__}") from exc
        return first_value(raw)

    def on_wasm(self, entrypoint: str, policy_input: dict[str, Any]) -> Any:
        try:
            result = self.wasm.evaluate(policy_input, entrypoint=WASM_ENTRYPOINTS[entrypoint])
        except OpaWasmError as exc:
            raise PolicyUnavailable(f"wasm: {type(exc).__name__}: {exc}") from exc
        if result is UNDEFINED:
            raise PolicyUnavailable("wasm: policy document is undefined")
        return result

    def close(self) -> None:
        asyncio.run(self.embedded.aclose())
        self.wasm.close()


# -- parity on tests/policies/test_parity.py's cases ---------------------------------------------


def parity(engines: Engines, show: int = 5) -> dict[str, Any]:
    """test_parity's 200 random item batches (seed 20261130) and its 15 REQUEST_CASES, regorus (workers)
    against Wasm, compared as that test compares them (listed keys, lists sorted)."""
    if "opa_bindings" not in sys.modules:
        try:
            import opa_bindings  # noqa: F401
        except ImportError:  # only OpaEngine/OpaError are named at import; neither is used here
            stub = types.ModuleType("opa_bindings")
            stub.OpaEngine = stub.OpaError = type("Unused", (Exception,), {})  # type: ignore[attr-defined]
            sys.modules["opa_bindings"] = stub
    import random

    from tests.policies import test_parity as tp

    def ask(name: str, entrypoint: str, policy_input: dict[str, Any], keys: tuple[str, ...]) -> Any:
        try:
            return tp.decision(engines.by_name[name](entrypoint, policy_input), keys)
        except PolicyUnavailable:
            return tp.UNAVAILABLE

    counts = {
        "items_equal": 0,
        "items_different": 0,
        "items_both_unavailable": 0,
        "items_regorus_unavailable_only": 0,
        "items_allowing": 0,
        "request_equal": 0,
        "request_different": 0,
        "request_full_document_equal": 0,
    }
    differences: list[dict[str, Any]] = []
    rng = random.Random(20261130)
    constraints = tp.constraints_for(engines.embedded, {"type": "account_followup", "scope": "sales"})
    for batch in range(200):
        items = [tp.random_item(rng, batch * 10 + i) for i in range(rng.randint(1, 6))]
        policy_input = {
            "actor": tp.ACTOR,
            "task": {"type": "account_followup"},
            "constraints": constraints,
            "subjects": ["ent_jane"],
            "items": items,
        }
        ours = ask("regorus-workers", "items", policy_input, ("allowed", "denied"))
        theirs = ask("wasm", "items", policy_input, ("allowed", "denied"))
        if ours == tp.UNAVAILABLE:  # the test's rule: Wasm must then fail too or allow nothing
            fine = theirs == tp.UNAVAILABLE or theirs["allowed"] == []
            counts["items_both_unavailable" if theirs == tp.UNAVAILABLE else "items_regorus_unavailable_only"] += 1
        else:
            fine = ours == theirs
            counts["items_allowing"] += bool(ours["allowed"])
        counts["items_equal" if fine else "items_different"] += 1
        if not fine and len(differences) < show:
            differences.append({"batch": batch, "items": items, "regorus": ours, "wasm": theirs})
    for case, policy_input in enumerate(tp.REQUEST_CASES):
        keys = ("allow", "reasons", "constraints")
        ours = ask("regorus-workers", "request", policy_input, keys)
        theirs = ask("wasm", "request", policy_input, keys)
        fine = (theirs == tp.UNAVAILABLE or theirs["allow"] is not True) if ours == tp.UNAVAILABLE else ours == theirs
        counts["request_equal" if fine else "request_different"] += 1
        if not fine and len(differences) < show:
            differences.append({"request_case": case, "regorus": ours, "wasm": theirs})
        try:  # beyond the test: the whole package document, every rule in it
            whole = engines.embedded.evaluate_sync("request", policy_input) == engines.on_wasm("request", policy_input)
        except PolicyUnavailable:
            whole = False
        counts["request_full_document_equal"] += whole
    return {"counts": counts, "differences": differences}


# -- the workload -------------------------------------------------------------------------------


def round_trip(
    evaluate: Callable[[str, dict[str, Any]], Any], records: list[Any], entities: list[Any]
) -> tuple[float, float, Any]:
    """(decide ms, verify ms, verdict), exactly as policy_cost_bench.Subject.round_trip."""
    started = time.perf_counter()
    decision = constraints_from(check_request_result(evaluate("request", request_input(ACTOR, REQUEST, NOW))))
    decided = time.perf_counter()
    constraints = decision.with_subjects(("ent_1", "ent_2"))
    policy_input = items_input(ACTOR, REQUEST.task, constraints, {r.id: r for r in records}, entities)
    verdict = verdict_from(evaluate("items", policy_input), {r.id for r in records})
    done = time.perf_counter()
    return (decided - started) * 1000, (done - decided) * 1000, (verdict.allowed_ids, verdict.denied)


def measure(engines: Engines, count: int, rounds: int, warmup: int) -> dict[str, Any]:
    records, entities = candidates(count)
    samples: dict[str, list[float]] = {}
    verdicts: dict[str, set[str]] = {}
    for n in range(warmup + rounds):
        order = ENGINES if n % 2 == 0 else ENGINES[::-1]  # interleaved, alternating order
        for name in order:
            decide_ms, verify_ms, verdict = round_trip(engines.by_name[name], records, entities)
            verdicts.setdefault(name, set()).add(repr(verdict))
            if n >= warmup:
                for part, ms in (("decide", decide_ms), ("verify", verify_ms), ("total", decide_ms + verify_ms)):
                    samples.setdefault(f"{name}.{part}", []).append(ms)
    figures: dict[str, Any] = {key: summary(values) for key, values in samples.items()}
    figures["verdicts_equal"] = len(set().union(*verdicts.values())) == 1
    figures["allowed"] = len(round_trip(engines.on_wasm, records, entities)[2][0])
    return figures


def report(f: dict[str, Any], base: str = "regorus-workers") -> None:
    print(
        f"candidates {f['candidates']} ({f['allowed']} allowed)  rounds {f['rounds']}  wasm {f['wasm_bytes']} bytes  "
        f"host built-ins {f['host_builtins']}  data.json as the gateway's: {f['data_equal']}"
    )
    print(f"{'engine':16} {'part':6} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}   p50/{base}  p95/{base}  p50/regorus-inproc")
    for name in ENGINES:
        for part in ("decide", "verify", "total"):
            s, b, r = f[f"{name}.{part}"], f[f"{base}.{part}"], f[f"regorus-inproc.{part}"]
            print(
                f"{name:16} {part:6} {s['p50']:8.3f} {s['p95']:8.3f} {s['max']:8.3f}   "
                f"{s['p50'] / b['p50']:9.2f}x {s['p95'] / b['p95']:10.2f}x {s['p50'] / r['p50']:12.2f}x"
            )
    print(f"verdicts of the three engines on the workload: {'equal' if f['verdicts_equal'] else 'DIFFERENT'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200, help="measured rounds per engine (after --warmup)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--candidates", type=int, default=200)
    parser.add_argument("--opa", help="the opa binary that compiles the Wasm")
    parser.add_argument("--parity", action="store_true", help="first compare decisions on test_parity's cases")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="wasm-policy-") as scratch:
        engines = Engines(opa_binary(args.opa), Path(scratch))
        try:
            checked = parity(engines) if args.parity else None
            figures = measure(engines, args.candidates, args.rounds, args.warmup)
        finally:
            engines.close()
    figures.update(
        candidates=args.candidates,
        rounds=args.rounds,
        wasm_bytes=engines.wasm_bytes,
        host_builtins=engines.host_builtins,
        data_equal=engines.data_equal,
    )
    if checked is not None:
        figures["parity"] = checked
    if args.json:
        print(json.dumps(figures, indent=2, default=str))
    else:
        if checked is not None:
            print("parity:", json.dumps(checked["counts"]))
            for difference in checked["differences"]:
                print("  differs:", json.dumps(difference, default=str)[:600])
        report(figures)
    differs = checked is not None and checked["counts"]["items_different"] + checked["counts"]["request_different"] > 0
    return 1 if differs or not figures["verdicts_equal"] else 0


if __name__ == "__main__":
    sys.exit(main())
