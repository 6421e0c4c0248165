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
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from audit.chain import anchor_of, audit_facet, audit_rollup, audit_trace, chain_of, utc_instant
from audit.review.answers import (
    ActorCalls,
    ActorItems,
    Bar,
    Before,
    Calls,
    ChainState,
    Denials,
    Figures,
    LastCheck,
    Masking,
    Overview,
    Period,
    ReasonCalls,
    Returned,
    Revision,
    TaskCalls,
    TypeCalls,
)
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


def _ranked(counts: Counter[str], top: int | None = None) -> list[tuple[str, int]]:
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ordered[:top] if top else ordered


def _rate(denied: int, decided: int) -> float | None:
    return round(denied / decided, 4) if decided else None


@dataclass(slots=True)
class _InForce:
    """A revision's calls over the period, as the counts are read."""

    revision: str | None
    first_hour: int
    calls: int = 0
    denied: int = 0
    decided: int = 0

    def rate(self) -> float | None:
        return _rate(self.denied, self.decided)


def figures_of(tally: Tally, since: datetime, until: datetime) -> Figures:
    """The overview's figures from the (hour, measure, key) counts of the period's rows."""
    since, until = _aware(since), _aware(until)
    width = bucket_hours(since, until)
    first = hour_of(since)
    bars = max(1, -(-(hour_of(until - timedelta(microseconds=1)) - first + 1) // width))
    by_bar: list[dict[str, int]] = [dict.fromkeys(OUTCOMES, 0) for _ in range(bars)]
    by_outcome: Counter[str] = Counter()
    revisions: dict[str, _InForce] = {}
    for (hour, measure, key), n in sorted(tally.items()):
        if measure != CALLS:
            continue
        result, _, revision = key.partition("|")
        by_outcome[result] += n
        slot = min(max((hour - first) // width, 0), bars - 1)
        by_bar[slot][result] = by_bar[slot].get(result, 0) + n
        entry = revisions.setdefault(revision, _InForce(revision or None, hour))
        entry.first_hour = min(entry.first_hour, hour)
        entry.calls += n
        if result in ("allow", "deny"):
            entry.decided += n
            entry.denied += n if result == "deny" else 0
    in_force = sorted(revisions.values(), key=lambda r: (r.first_hour, r.revision or ""))
    returned = _sum(tally, "returned")
    placeholders = _sum(tally, "placeholders")
    return Figures(
        period=Period(since=_instant(since), until=_instant(until), bucket_hours=width),
        calls=Calls(total=sum(by_outcome.values()), by_outcome={o: by_outcome.get(o, 0) for o in OUTCOMES}),
        timeline=[
            Bar(
                start=_instant(max(since, _at(first + i * width))),
                end=_instant(min(until, _at(first + (i + 1) * width))),
                by_outcome=counts,
            )
            for i, counts in enumerate(by_bar)
        ],
        denials=Denials(
            total=by_outcome.get("deny", 0),
            by_reason=[ReasonCalls(reason=k, calls=n) for k, n in _ranked(_sum(tally, "denied_reason"))],
            by_task=[TaskCalls(task=k, calls=n) for k, n in _ranked(_sum(tally, "denied_task"))],
        ),
        returned=Returned(
            items=sum(returned.values()),
            by_sensitivity=dict(sorted(returned.items())),
            restricted_by_actor=[ActorItems(actor=k, items=n) for k, n in _ranked(_sum(tally, "restricted_by"), TOP)],
        ),
        masking=Masking(
            items_masked=sum(_sum(tally, "masked_items").values()),
            placeholders=sum(placeholders.values()),
            placeholders_by_type=dict(sorted(placeholders.items())),
            reveals_by_type=[TypeCalls(type=k, calls=n) for k, n in _ranked(_sum(tally, "revealed"))],
            reveals_by_actor=[ActorCalls(actor=k, calls=n) for k, n in _ranked(_sum(tally, "revealed_by"), TOP)],
        ),
        revisions=[
            Revision(
                revision=entry.revision,
                first_seen=_instant(max(since, _at(entry.first_hour))),
                calls=entry.calls,
                denied=entry.denied,
                denial_rate=entry.rate(),
                before=None if i == 0 else Before(revision=in_force[i - 1].revision, denial_rate=in_force[i - 1].rate()),
            )
            for i, entry in enumerate(in_force)
        ],
        endpoints=dict(sorted(_sum(tally, "endpoint").items())),
    )


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


def figures(engine: Engine, tenant: str, since: datetime, until: datetime) -> Figures:
    """The overview's figures of the tenant's chain over [since, until)."""
    return figures_of(period_tally(engine, tenant, since, until), since, until)


def chain_state(engine: Engine, tenant: str, signer: Mapping[str, Any] | None) -> ChainState:
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
    last_check = (
        None
        if checked is None
        else LastCheck(
            trace_id=checked.trace_id, at=utc_instant(checked.created_at), by=checked.actor, intact=checked.value == "ok"
        )
    )
    rows = int(head) - oldest + 1 if head else 0
    if signer is None:
        return ChainState(rows=rows, head=int(head or 0), last_check=last_check, signed=False)
    not_yet = max(0, int(head or 0) - int(signer["signed_size"]))
    return ChainState(rows=rows, head=int(head or 0), last_check=last_check, signed=True, **signer, not_yet_checkpointed=not_yet)


def period_overview(engine: Engine, tenant: str, since: datetime, until: datetime, signer: Mapping[str, Any] | None) -> Overview:
    """The overview of the tenant's chain over [since, until): the figures and the chain's state."""
    return Overview(figures(engine, tenant, since, until), chain_state(engine, tenant, signer))
