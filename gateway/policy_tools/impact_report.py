"""The impact report (gateway/policy_tools/impact.py replays the calls): what was replayed, and
both policies' answers on each call, as a report of counts, task types, roles and trace ids only,
never a query fingerprint or any text, and its summary for people."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core.actor import Actor
from core.instants import rfc3339
from core.records import Record
from core.request import Task

DEFAULT_LIMIT = 1000
TRACES_PER_GROUP = 100  # trace ids listed per flip group (the count is exact)
# The reasons a report may name. A candidate's own reason strings are reported as `other`: a reason is
# the candidate's text, and a candidate could otherwise spell out envelope fields in it.
REASONS = frozenset(
    {"tenant", "acl", "sensitivity", "validity", "scope", "kind", "status", "attachment", "linked_entity", "not_allowed"}
)


@dataclass(frozen=True, slots=True)
class Window:
    """Which recorded calls to replay: a tenant's (every tenant's when None), since an instant, newest first."""

    tenant: str | None = None
    since: datetime | None = None
    limit: int = DEFAULT_LIMIT


@dataclass(frozen=True, slots=True)
class Replay:
    """One recorded call, ready to be decided again."""

    trace_id: str
    tenant: str
    at: datetime
    recorded_allow: bool
    actor: Actor
    task: Task
    request_input: dict[str, Any]
    subjects: tuple[str, ...]
    recorded_items: tuple[str, ...]
    assumed: tuple[str, ...]

    @property
    def role(self) -> str:
        return "+".join(sorted(self.actor.roles)) or "-"


@dataclass(frozen=True, slots=True)
class Outcome:
    """Both policies' answers on one call; `failed` names the engine that could not answer."""

    replay: Replay
    current: bool | None
    candidate: bool | None
    newly_allowed: tuple[tuple[Record, str], ...] = ()
    newly_denied: tuple[tuple[Record, str], ...] = ()
    failed: str | None = None


@dataclass(slots=True)
class Prepared:
    replays: list[Replay] = field(default_factory=list)
    unreplayable: Counter[str] = field(default_factory=Counter)
    read: int = 0


def report(prepared: Prepared, outcomes: list[Outcome], window: Window, current: str, candidate: str) -> dict[str, Any]:
    """The machine-readable report: stable keys, counts, task types, roles and trace ids only."""
    decided = [o for o in outcomes if o.failed is None]
    times = [o.replay.at for o in outcomes]
    return {
        "current_revision": current,
        "candidate_revision": candidate,
        "window": {
            "tenant": window.tenant,
            "since": rfc3339(window.since),
            "limit": window.limit,
            "first_call": rfc3339(min(times)) if times else None,
            "last_call": rfc3339(max(times)) if times else None,
        },
        "calls": prepared.read,
        "replayed": len(decided),
        "unreplayable": {"count": sum(prepared.unreplayable.values()), "by_reason": dict(sorted(prepared.unreplayable.items()))},
        "assumed": dict(sorted(Counter(a for o in outcomes for a in o.replay.assumed).items())),
        "failed": {side: _traces([o for o in outcomes if o.failed == side]) for side in ("current", "candidate")},
        "recorded_differs": sum(1 for o in decided if o.current != o.replay.recorded_allow),
        "flips": {
            "allow_to_deny": _flips([o for o in decided if o.current and not o.candidate]),
            "deny_to_allow": _flips([o for o in decided if not o.current and o.candidate]),
        },
        "items": {
            "newly_allowed": _items(pair for o in decided for pair in o.newly_allowed),
            "newly_denied": _items(pair for o in decided for pair in o.newly_denied),
        },
    }


def _traces(outcomes: list[Outcome]) -> dict[str, Any]:
    return {"count": len(outcomes), "traces": [o.replay.trace_id for o in outcomes[:TRACES_PER_GROUP]]}


def _flips(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        groups[(outcome.replay.task.type, outcome.replay.role)].append(outcome)
    return [{"task_type": task, "role": role, **_traces(group)} for (task, role), group in sorted(groups.items())]


def _items(pairs: Iterable[tuple[Record, str]]) -> dict[str, Any]:
    """Distinct items, counted by sensitivity, reason (the policy's denial on the other side) and kind."""
    seen: dict[str, tuple[Record, str]] = {}
    for record, reason in pairs:
        seen.setdefault(record.id, (record, reason if reason in REASONS else "other"))
    counted = seen.values()
    return {
        "count": len(seen),
        "by_sensitivity": dict(sorted(Counter(r.sensitivity for r, _ in counted).items())),
        "by_reason": dict(sorted(Counter(reason for _, reason in counted).items())),
        "by_kind": dict(sorted(Counter(r.kind for r, _ in counted).items())),
    }


def summary(report: dict[str, Any]) -> str:
    """The report for people, a few lines."""
    window, unreplayable = report["window"], report["unreplayable"]
    lines = [
        f"policy impact: {report['current_revision']} -> {report['candidate_revision']}",
        f"calls: {report['calls']} read, {report['replayed']} replayed, {unreplayable['count']} unreplayable"
        + (f" ({_counts(unreplayable['by_reason'])})" if unreplayable["count"] else "")
        + (f", {window['first_call']} to {window['last_call']}" if window["first_call"] else ""),
    ]
    if report["assumed"]:
        lines.append(f"replayed with assumptions: {_counts(report['assumed'])}")
    for side in ("current", "candidate"):
        if report["failed"][side]["count"]:
            lines.append(f"{side} policy failed on {report['failed'][side]['count']} calls (they would answer 503)")
    if report["recorded_differs"]:
        lines.append(f"{report['recorded_differs']} calls are decided otherwise now than when they were made")
    for direction, label in (("allow_to_deny", "allow -> deny"), ("deny_to_allow", "deny -> allow")):
        groups = report["flips"][direction]
        lines.append(f"{label}: {sum(g['count'] for g in groups)} calls")
        lines += [f"  {g['task_type']} as {g['role']}: {g['count']}" for g in groups]
    for direction, label in (("newly_allowed", "items newly allowed"), ("newly_denied", "items newly denied")):
        counted = report["items"][direction]
        lines.append(f"{label}: {counted['count']}")
        if counted["count"]:
            lines.append(f"  by sensitivity: {_counts(counted['by_sensitivity'])}; by reason: {_counts(counted['by_reason'])}")
    return "\n".join(lines)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in counts.items())
