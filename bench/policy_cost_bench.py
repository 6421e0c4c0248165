"""Policy cost benchmark: one decision (data.gateway.request) plus the batch verify
(data.gateway.items) of 200 candidates on the embedded engine, the way a retrieve pays for them.

Run from the project root with the project's venv:

    .venv/bin/python bench/policy_cost_bench.py                # 400 rounds, this tree's policies vs HEAD's
    .venv/bin/python bench/policy_cost_bench.py --rounds 100 --json

Every figure is measured in the same run as its baselines (these machines are noisy):
- `floor`: a trivial query (`1`, empty input) through the same policy process: the pipe round trip;
- `transfer`: the same trivial query sent the verify's whole input: the pipe plus JSON both ways
  (encoding here, parsing in regorus) — so `verify - transfer` is the cost of evaluating the Rego;
- `json`: json.dumps + json.loads of the verify's input in this process.
With `--before DIR` (default: HEAD's `policies/`, read with `git show`), the same rounds run on those
policies too, interleaved, and their verdicts must equal this tree's; so do this tree's policies on
regorus's interpreter path (`interpreter`, GATEWAY_POLICY_COMPILED=false) against the compiled
path (`after`). See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.actor import Actor  # noqa: E402
from core.records import Record  # noqa: E402
from core.request import RetrieveRequest  # noqa: E402
from gateway.policy.base import check_request_result  # noqa: E402
from gateway.policy.bundle import read_bundle  # noqa: E402
from gateway.policy.decide import constraints_from, request_input  # noqa: E402
from gateway.policy.embedded import EmbeddedEngine, _Worker  # noqa: E402
from gateway.policy.verify import items_input, verdict_from  # noqa: E402

TARGET_P95_MS = 3.0
ACTOR = Actor(id="alice", tenant="acme", roles=("agent",), groups=("sales",), clearance="confidential")
REQUEST = RetrieveRequest.model_validate(
    {
        "task": {"type": "account_followup", "scope": "sales"},
        "query": "pricing renewal",
        "entities": [{"email": "jane@globex.example"}],
    }
)
NOW = datetime(2026, 3, 1, tzinfo=timezone.utc)


def candidates(count: int, seed: int = 7) -> tuple[list[Record], list[Record]]:
    """`count` realistic candidates (most pass, about one in six fails one check) and the entities they name."""
    rng = random.Random(seed)
    entities = [
        Record(
            id=f"ent_{i}",
            kind="entity",
            tenant="acme",
            text="",
            acl=("*",) if i % 7 else ("group:executives",),
            sensitivity="internal",
            scope=(),
            authority="approved",
            status="active",
            entity_type="contact",
        )
        for i in range(12)
    ]
    records = []
    for i in range(count):
        kind = rng.choices(["memory", "document", "property", "edge", "entity"], [45, 30, 10, 10, 5])[0]
        entity = f"ent_{rng.randrange(12)}" if kind != "document" or rng.random() < 0.3 else None
        ended = rng.random() < 0.05
        record = Record(
            id=f"{kind}_{i}",
            kind=kind,
            tenant="acme" if rng.random() > 0.02 else "globex",
            text="",
            acl=tuple(rng.sample(["*", "group:sales", "group:support", "group:finance", "user:alice"], rng.randint(1, 2))),
            sensitivity=rng.choices(["public", "internal", "confidential", "restricted"], [10, 70, 15, 5])[0],
            scope=tuple(rng.choice([(), ("sales",), ("support",), ("sales", "support")])),
            authority=rng.choice(["approved", "reviewed", "unreviewed"]),
            status=rng.choices(["active", "superseded", "disputed", "retracted"], [85, 6, 6, 3])[0],
            valid_from=NOW - timedelta(days=rng.randint(1, 900)),
            valid_to=(NOW - timedelta(days=1))
            if ended
            else (NOW + timedelta(days=rng.randint(1, 400)) if rng.random() < 0.3 else None),
            recorded_at=NOW - timedelta(days=rng.randint(1, 900)),
            entity=entity,
            attached_to=entity if entity and rng.random() < 0.5 else None,
            slot=f"{entity}#plan" if entity and kind == "property" else None,
            edge_from=entity if kind == "edge" else None,
            edge_to=f"ent_{rng.randrange(12)}" if kind == "edge" else None,
        )
        if rng.random() < 0.85:  # past the pushdown, most candidates hold every check
            subject = rng.choice(["ent_1", "ent_2"])
            record = replace(
                record,
                tenant="acme",
                acl=("group:sales",),
                sensitivity="internal",
                scope=("sales",),
                status="active",
                valid_to=None,
                entity=subject if record.entity else None,
                attached_to=subject if record.attached_to else None,
                edge_from=subject if kind == "edge" else None,
                edge_to="ent_2" if kind == "edge" else None,
            )
        records.append(record)
    return records, entities


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": statistics.median(values), "p95": percentile(values, 95), "max": max(values)}


class Subject:
    """One policy set loaded in an engine (for decide + verify) and in a bare policy process (baselines)."""

    def __init__(self, label: str, policies: Path, compiled: bool = True) -> None:
        self.label = label
        bundle = read_bundle(policies)
        self.engine = EmbeddedEngine(bundle, compiled=compiled)
        self.worker = _Worker(bundle, 5.0)
        self.worker.start()

    def round_trip(self, records: list[Record], entities: list[Record]) -> tuple[float, float, Any]:
        """(decide ms, verify ms, verdict) through the engine, as a retrieve calls it."""
        started = time.perf_counter()
        decision = constraints_from(
            check_request_result(self.engine.evaluate_sync("request", request_input(ACTOR, REQUEST, NOW)))
        )
        decided = time.perf_counter()
        constraints = decision.with_subjects(("ent_1", "ent_2"))
        policy_input = items_input(ACTOR, REQUEST.task, constraints, {r.id: r for r in records}, entities)
        verdict = verdict_from(self.engine.evaluate_sync("items", policy_input), {r.id for r in records})
        done = time.perf_counter()
        return (decided - started) * 1000, (done - decided) * 1000, (verdict.allowed_ids, verdict.denied)

    def close(self) -> None:
        self.engine._close()
        self.worker.stop()


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def before_policies(ref: str, into: Path) -> Path:
    """`policies/` as committed at `ref`, written under `into`."""
    names = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", ref, "policies"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    for name in names:
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(subprocess.run(["git", "show", f"{ref}:{name}"], cwd=ROOT, check=True, capture_output=True).stdout)
    return into / "policies"


def code_revision() -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "gateway/policy", "policies"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return commit + ("+" if dirty else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=400, help="measured rounds (after --warmup)")
    parser.add_argument("--warmup", type=int, default=40)
    parser.add_argument("--candidates", type=int, default=200)
    parser.add_argument("--policies", type=Path, default=ROOT / "policies", help="the policies measured ('after')")
    parser.add_argument(
        "--before", default="HEAD", help="a git ref whose policies/ run as the 'before' in the same run, a directory, or 'none'"
    )
    parser.add_argument(
        "--compiled-only",
        action="store_true",
        help="leave out the 'interpreter' subject (this tree's policies with GATEWAY_POLICY_COMPILED=false)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()

    records, entities = candidates(args.candidates)
    with tempfile.TemporaryDirectory(prefix="policy-cost-") as scratch:
        subjects = [Subject("after", args.policies)]
        if not args.compiled_only:  # the same policies on regorus's interpreter path, in the same run
            subjects.insert(0, Subject("interpreter", args.policies, compiled=False))
        if args.before != "none":
            before = Path(args.before) if Path(args.before).is_dir() else before_policies(args.before, Path(scratch))
            subjects.insert(0, Subject("before", before))
        try:
            figures = measure(subjects, records, entities, args.rounds, args.warmup)
        finally:
            for subject in subjects:
                subject.close()
    figures["code"] = code_revision()
    figures["candidates"] = args.candidates
    figures["rounds"] = args.rounds
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        report(figures)
    return 0 if figures["verdicts_equal"] else 1


def measure(subjects: list[Subject], records: list[Record], entities: list[Record], rounds: int, warmup: int) -> dict[str, Any]:
    decision = constraints_from(
        check_request_result(subjects[-1].engine.evaluate_sync("request", request_input(ACTOR, REQUEST, NOW)))
    )
    policy_input = items_input(
        ACTOR, REQUEST.task, decision.with_subjects(("ent_1", "ent_2")), {r.id: r for r in records}, entities
    )
    encoded = json.dumps(policy_input)
    samples: dict[str, list[float]] = {}
    verdicts: dict[str, Any] = {}
    for n in range(warmup + rounds):
        for subject in subjects:  # interleaved, so drift on the machine lands on both alike
            decide_ms, verify_ms, verdict = subject.round_trip(records, entities)
            verdicts[subject.label] = verdict
            if n < warmup:
                continue
            samples.setdefault(f"{subject.label}.decide", []).append(decide_ms)
            samples.setdefault(f"{subject.label}.verify", []).append(verify_ms)
            samples.setdefault(f"{subject.label}.total", []).append(decide_ms + verify_ms)
        worker = subjects[-1].worker
        floor = timed(lambda: worker.evaluate("1", b"{}"))
        transfer = timed(lambda: worker.evaluate("1", json.dumps(policy_input).encode()))
        codec = timed(lambda: json.loads(json.dumps(policy_input)))
        if n >= warmup:
            samples.setdefault("floor", []).append(floor)
            samples.setdefault("transfer", []).append(transfer)
            samples.setdefault("json", []).append(codec)
    figures: dict[str, Any] = {name: summary(values) for name, values in samples.items()}
    figures["input_bytes"] = len(encoded)
    figures["allowed"] = len(verdicts["after"][0])
    figures["verdicts_equal"] = len({repr(v) for v in verdicts.values()}) == 1
    return figures


def report(f: dict[str, Any]) -> None:
    floor = f["floor"]["p50"]
    print(
        f"code {f['code']}  candidates {f['candidates']} ({f['allowed']} allowed)  input {f['input_bytes']} bytes  "
        f"rounds {f['rounds']}"
    )
    print(
        f"baselines  floor (pipe round trip) p50 {floor:.3f} ms   transfer (pipe + JSON of the verify input) "
        f"p50 {f['transfer']['p50']:.3f} ms   json in-process p50 {f['json']['p50']:.3f} ms"
    )
    for label in ("before", "interpreter", "after"):
        if f"{label}.total" not in f:
            continue
        for part in ("decide", "verify", "total"):
            s = f[f"{label}.{part}"]
            print(
                f"{label:6} {part:6}  p50 {s['p50']:6.3f}  p95 {s['p95']:6.3f}  max {s['max']:7.3f} ms   "
                f"p50 = {s['p50'] / floor:5.1f}x floor"
            )
        rego = f[f"{label}.verify"]["p50"] - f["transfer"]["p50"]
        print(f"{label:6} verify split: pipe + JSON {f['transfer']['p50']:.3f} ms, Rego evaluation {rego:.3f} ms (p50)")
    total = f["after.total"]["p95"]
    print(
        f"target: decide + verify p95 under {TARGET_P95_MS} ms: {'met' if total < TARGET_P95_MS else 'NOT met'} ({total:.3f} ms)"
    )
    if "before.total" in f:
        print(f"after/before total p50: {f['after.total']['p50'] / f['before.total']['p50']:.2f}")
    if "interpreter.total" in f:
        print(
            f"compiled/interpreter verify p50: {f['after.verify']['p50'] / f['interpreter.verify']['p50']:.2f}, "
            f"p95: {f['after.verify']['p95'] / f['interpreter.verify']['p95']:.2f}"
        )
    if not f["verdicts_equal"]:
        print("!!! the verdicts of the subjects differ: the figures must not be used")


if __name__ == "__main__":
    sys.exit(main())
