"""The compliance overview of one tenant over a period: calls by outcome over time, denials by
reason and task, items returned by sensitivity and who read the restricted ones, masking and
reveals, the policy revisions in force with the denial rate under each, and the chain's state.

Counted from the hourly rollup (core.audit_facts, kept by the append) for the whole hours of the
period, and from the rows themselves for the partial hours at its edges, so a period of any length
reads a few thousand rows at most. Nothing here reads item text: the figures are counts of ids,
types and columns the trail already holds.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from audit.chain import anchor_of, audit_facet, audit_rollup, audit_trace, chain_of, utc_instant
from core.audit_facts import HOUR_S, OUTCOMES, hour_of, tally_rows

BUCKET_HOURS = (1, 3, 6, 12, 24, 48, 168)  # the chart's bar width: the first that gives at most MAX_BARS
MAX_BARS = 60
TOP = 10
CALLS = "calls"  # the one measure kept by hour (core.audit_facts tallies a retrieval call under it)
Tally = Counter[tuple[int, str, str]]


def _at(hour: int) -> datetime:
    return datetime.fromtimestamp(hour * HOUR_S, timezone.utc)


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def _instant(value: datetime) -> str:
    """RFC 3339 in UTC, to the microsecond when it has any: a bar's end is where the next starts."""
    return value.isoformat(timespec="microseconds" if value.microsecond else "seconds").replace("+00:00", "Z")


def bucket_hours(since: datetime, until: datetime) -> int:
    hours = max(1, -(-int((until - since).total_seconds()) // HOUR_S))
    return next((w for w in BUCKET_HOURS if -(-hours // w) <= MAX_BARS), BUCKET_HOURS[-1])


def _sum(tally: Tally, measure: str) -> Counter[str]:
    total: Counter[str] = Counter()
    for (_, m, key), n in tally.items():
        if m == measure:
            total[key] += n
    return total


def _ranked(counts: Counter[str], name: str, value: str, top: int | None = None) -> list[dict[str, Any]]:
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [{name: key, value: n} for key, n in (ordered[:top] if top else ordered)]


def _rate(denied: int, decided: int) -> float | None:
    return round(denied / decided, 4) if decided else None


def figures_of(tally: Tally, since: datetime, until: datetime) -> dict[str, Any]:
    """The overview's figures from the (hour, measure, key) counts of the period's rows."""
    since, until = _aware(since), _aware(until)
    width = bucket_hours(since, until)
    first = hour_of(since)
    bars = max(1, -(-(hour_of(until - timedelta(microseconds=1)) - first + 1) // width))
    timeline: list[dict[str, Any]] = [
        {
            "start": _instant(max(since, _at(first + i * width))),
            "end": _instant(min(until, _at(first + (i + 1) * width))),
            "by_outcome": dict.fromkeys(OUTCOMES, 0),
        }
        for i in range(bars)
    ]
    by_outcome: Counter[str] = Counter()
    revisions: dict[str, dict[str, Any]] = {}
    for (hour, measure, key), n in sorted(tally.items()):
        if measure != CALLS:
            continue
        result, _, revision = key.partition("|")
        by_outcome[result] += n
        slot = min(max((hour - first) // width, 0), bars - 1)
        timeline[slot]["by_outcome"][result] = timeline[slot]["by_outcome"].get(result, 0) + n
        entry = revisions.setdefault(
            revision, {"revision": revision or None, "first_hour": hour, "calls": 0, "denied": 0, "decided": 0}
        )
        entry["first_hour"] = min(entry["first_hour"], hour)
        entry["calls"] += n
        if result in ("allow", "deny"):
            entry["decided"] += n
            entry["denied"] += n if result == "deny" else 0
    in_force = sorted(revisions.values(), key=lambda r: (r["first_hour"], r["revision"] or ""))
    revision_list = []
    for i, entry in enumerate(in_force):
        before = in_force[i - 1] if i else None
        revision_list.append(
            {
                "revision": entry["revision"],
                "first_seen": _instant(max(since, _at(entry["first_hour"]))),
                "calls": entry["calls"],
                "denied": entry["denied"],
                "denial_rate": _rate(entry["denied"], entry["decided"]),
                "before": None
                if before is None
                else {"revision": before["revision"], "denial_rate": _rate(before["denied"], before["decided"])},
            }
        )
    returned = _sum(tally, "returned")
    placeholders = _sum(tally, "placeholders")
    return {
        "period": {"since": _instant(since), "until": _instant(until), "bucket_hours": width},
        "calls": {"total": sum(by_outcome.values()), "by_outcome": {o: by_outcome.get(o, 0) for o in OUTCOMES}},
        "timeline": timeline,
        "denials": {
            "total": by_outcome.get("deny", 0),
            "by_reason": _ranked(_sum(tally, "denied_reason"), "reason", "calls"),
            "by_task": _ranked(_sum(tally, "denied_task"), "task", "calls"),
        },
        "returned": {
            "items": sum(returned.values()),
            "by_sensitivity": dict(sorted(returned.items())),
            "restricted_by_actor": _ranked(_sum(tally, "restricted_by"), "actor", "items", TOP),
        },
        "masking": {
            "items_masked": sum(_sum(tally, "masked_items").values()),
            "placeholders": sum(placeholders.values()),
            "placeholders_by_type": dict(sorted(placeholders.items())),
            "reveals_by_type": _ranked(_sum(tally, "revealed"), "type", "calls"),
            "reveals_by_actor": _ranked(_sum(tally, "revealed_by"), "actor", "calls", TOP),
        },
        "revisions": revision_list,
        "endpoints": dict(sorted(_sum(tally, "endpoint").items())),
    }


def period_tally(engine: Engine, tenant: str, since: datetime, until: datetime) -> Tally:
    """The period's counts: the rollup for its whole hours, the rows for the partial ones.

    Only the `calls` measure is kept by hour (the timeline and when each revision was first seen
    come from it); every other measure is summed over the whole hours by the database and handed
    back once, at the first whole hour: figures_of adds those up whatever their hour, and a year
    is then some 50,000 rows from the store instead of every (hour, measure, key) of it."""
    chain = chain_of(tenant)
    since, until = _aware(since), _aware(until)
    full_from = -(-int(since.timestamp()) // HOUR_S)  # the first whole hour
    full_to = int(until.timestamp()) // HOUR_S  # the hour after the last whole one
    tally: Tally = Counter()
    edges: list[tuple[datetime, datetime]] = []
    with engine.connect() as conn:
        if full_from < full_to:
            hours = (audit_rollup.c.chain == chain, audit_rollup.c.hour >= full_from, audit_rollup.c.hour < full_to)
            by_hour = select(audit_rollup.c.hour, audit_rollup.c.key, audit_rollup.c.n).where(
                *hours, audit_rollup.c.measure == CALLS
            )
            for hour, key, n in conn.execute(by_hour):
                tally[hour, CALLS, key] += int(n)
            summed = (
                select(audit_rollup.c.measure, audit_rollup.c.key, func.sum(audit_rollup.c.n))
                .where(*hours, audit_rollup.c.measure != CALLS)
                .group_by(audit_rollup.c.measure, audit_rollup.c.key)
            )
            for measure, key, n in conn.execute(summed):
                tally[full_from, measure, key] += int(n)
            edges = [(since, _at(full_from)), (_at(full_to), until)]
        else:
            edges = [(since, until)]
        for start, end in edges:
            if start >= end:
                continue
            rows = conn.execute(
                select(audit_trace).where(
                    audit_trace.c.chain == chain, audit_trace.c.created_at >= start, audit_trace.c.created_at < end
                )
            )
            tally.update(tally_rows(r._mapping for r in rows))
    return tally


def figures(engine: Engine, tenant: str, since: datetime, until: datetime) -> dict[str, Any]:
    """The overview's figures of the tenant's chain over [since, until)."""
    return figures_of(period_tally(engine, tenant, since, until), since, until)


def chain_state(engine: Engine, tenant: str, signer: dict[str, object] | None) -> dict[str, Any]:
    """The chain at a glance: its rows, the last full check of it recorded in the trail (a verify
    call's own row), and what the signer knows (`Checkpointer.state`, None without a signing key)."""
    chain = chain_of(tenant)
    with engine.connect() as conn:
        head = conn.execute(select(func.max(audit_trace.c.seq)).where(audit_trace.c.chain == chain)).scalar_one()
        checked = (
            conn.execute(
                select(audit_trace.c.trace_id, audit_trace.c.created_at, audit_trace.c.actor, audit_facet.c.value)
                .join(audit_facet, audit_facet.c.trace_pk == audit_trace.c.pk)
                .where(audit_facet.c.facet == "checked", audit_trace.c.chain == chain)
                .order_by(audit_trace.c.seq.desc())
                .limit(1)
            ).first()
            if head
            else None
        )
        oldest = anchor_of(conn, chain)
    rows = int(head) - oldest + 1 if head else 0
    state: dict[str, Any] = {
        "rows": rows,
        "head": int(head or 0),
        "last_check": None
        if checked is None
        else {
            "trace_id": checked.trace_id,
            "at": utc_instant(checked.created_at),
            "by": checked.actor,
            "intact": checked.value == "ok",
        },
        "signed": signer is not None,
    }
    if signer is not None:
        signed_size = int(signer["signed_size"])  # type: ignore[call-overload]
        state.update(signer)
        state["not_yet_checkpointed"] = max(0, int(head or 0) - signed_size)
    return state
