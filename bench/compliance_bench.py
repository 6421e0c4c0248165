"""Compliance benchmark: the compliance overview (audit.overview.figures, chain_state) and the subject
report (audit.subjects.subject_report) over a year of audit traffic, at 100,000 and 1,000,000 traces,
and what the facets and the hourly rollup add to every append.

Run from the project root with the project's venv:

    .venv/bin/python bench/compliance_bench.py --sizes 100000          # one size (~3 min)
    .venv/bin/python bench/compliance_bench.py                         # 100,000 then 1,000,000
    .venv/bin/python bench/compliance_bench.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test

Targets (the issue): the overview for 30 days over 1,000,000 traces within 2 s on 2 cores, the subject
report within 1 s. Each figure is printed as p50/p95 and as a ratio to its target and to a baseline
measured in the same run (a plain indexed count, and the trace list's first page): these machines are
shared and noisy. See bench/history/compliance_bench.md for the method.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import os
import random
import secrets
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any

from harness import bench_dir, code_revision, interrupted
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import Engine

from audit.chain import Rollup, add_to_rollup, append, audit_facet, audit_item, audit_rollup, audit_trace
from audit.review import Filters, chain_state, figures, list_traces, subject_report
from core.audit_facts import SUBJECT, Facts, facts_of
from core.store import migrate_store, open_store, writer

TENANTS = (("acme", 0.85), ("globex", 0.10), ("initech", 0.05))  # the measured tenant first
TENANT = TENANTS[0][0]
OVERVIEW_TARGET_S = 2.0
SUBJECT_TARGET_S = 1.0
DAYS = 365
ENTITIES = 50_000
ITEMS = 200_000
ACTORS = 300
BATCH = 5_000  # rows per seeding transaction
RUNS = 7  # measured runs per figure, after one warm-up
SEED = 20261203
TASKS = ("account_followup", "support", "compliance", "sales", "research", "onboarding")
REASONS = (
    "task_not_allowed_for_role",
    "clearance_below_requested",
    "tenant_mismatch",
    "purpose_not_declared",
    "outside_business_hours",
)
SENSITIVITIES = (("public", 0.35), ("internal", 0.45), ("confidential", 0.15), ("restricted", 0.05))
PII_KINDS = ("EMAIL", "PHONE", "PERSON", "IBAN", "ADDRESS")
# (share of retrieve rows, status, decision, error_code): what gateway/http/traced.py writes for each
OUTCOME_MIX: tuple[tuple[float, int, str, str | None], ...] = (
    (0.85, 200, "allow", None),
    (0.08, 403, "deny", "policy_denied"),
    (0.03, 429, "none", "rate_limited"),
    (0.015, 500, "error", "internal_error"),
    (0.025, 400, "none", "invalid_request"),
)
REVISION_DAYS = (0, 70, 160, 250, 330)  # a policy revision starts on each of these days of the year


@dataclass(frozen=True, slots=True)
class Zipf:
    """Draws 0..n-1 with weight 1/(rank+1)^s."""

    n: int
    s: float
    cum: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cum.extend(itertools.accumulate(1 / (r + 1) ** self.s for r in range(self.n)))

    def draw(self, rng: random.Random) -> int:
        return bisect.bisect(self.cum, rng.random() * self.cum[-1])


@dataclass
class World:
    """The generator's state: who is hot, what each tenant's last calls returned (for usage rows),
    and how many calls of the measured chain are about each entity (the subject report's size)."""

    rng: random.Random
    entities: Zipf = field(default_factory=lambda: Zipf(ENTITIES, 1.0))
    items: Zipf = field(default_factory=lambda: Zipf(ITEMS, 0.8))
    actors: Zipf = field(default_factory=lambda: Zipf(ACTORS, 0.9))
    recent: dict[str, list[tuple[str, list[str], dict[str, list[str]], str]]] = field(default_factory=dict)
    about: Counter[str] = field(default_factory=Counter)  # entity -> calls of TENANT's chain
    rows: Counter[str] = field(default_factory=Counter)  # endpoint -> rows of TENANT's chain


def fingerprint(rng: random.Random) -> dict[str, Any]:
    return {"hmac": "%032x" % rng.getrandbits(128), "length": rng.randint(8, 120)}


def revision_at(day: int) -> str:
    return "rev-" + str(sum(1 for d in REVISION_DAYS if d <= day))


def retrieve_lineage(world: World, status: int, decision: str) -> dict[str, Any]:
    """The shape gateway/pipeline/pipeline.py and returned.py write (no text: ids, hashes, counts)."""
    rng = world.rng
    task = rng.choice(TASKS)
    subjects = sorted({f"ent_{world.entities.draw(rng)}" for _ in range(rng.choice((0, 0, 1, 1, 1, 2)))})
    lineage: dict[str, Any] = {
        "version": 2,
        "request": {
            "task": {"type": task, "purpose": task},
            "mode": "standard",
            "depth": "standard",
            "budget_bytes": 16_000,
            "query": fingerprint(rng),
            "entities": [{"id": fingerprint(rng)} for _ in subjects],
            "sources": {"lexical": True, "semantic": True},
        },
        "actor": {"roles": ["agent"], "groups": [rng.choice(("sales", "support", "legal"))], "clearance": "internal"},
    }
    if status in (400, 429):
        return lineage  # refused before the policy: the request's shape only
    allow = decision != "deny"
    reasons = sorted(set(rng.choices(REASONS, weights=(5, 3, 1, 2, 1), k=rng.choice((1, 1, 2))))) if not allow else []
    lineage["decision"] = {"allow": allow, "reasons": reasons, "ms": round(rng.uniform(0.5, 4), 3)}
    if subjects:
        lineage["subjects"] = subjects
    if not allow:
        return lineage
    lineage["constraints"] = {"max_sensitivity": "confidential", "reveal": []}
    retrieved = sorted({f"it_{world.items.draw(rng)}" for _ in range(rng.randint(10, 30))})
    lineage["retrieved"] = {"lexical": retrieved[::2], "semantic": retrieved[1::2]}
    lineage["timings"] = {"decide": 2.1, "verify": 10.4, "lexical": 18.0, "total": 50.2}
    if status >= 500:
        return lineage  # failed after the policy: nothing delivered
    packed = rng.sample(retrieved, min(len(retrieved), rng.randint(3, 12)))
    named: dict[str, list[str]] = {}
    for entity in {*subjects, *(f"ent_{world.entities.draw(rng)}" for _ in range(rng.randint(0, 3)))}:
        pool = packed if rng.random() < 0.8 else retrieved
        named[entity] = sorted(rng.sample(pool, min(len(pool), rng.randint(1, 3))))
    sensitivity = Counter(rng.choices([s for s, _ in SENSITIVITIES], weights=[w for _, w in SENSITIVITIES], k=len(packed)))
    masked = Counter(rng.choices(PII_KINDS, k=rng.choice((0, 0, 1, 2, 4)))) if rng.random() < 0.4 else Counter()
    revealed = ["EMAIL"] if masked and rng.random() < 0.05 else []
    lineage.update(
        {
            "packed": packed,
            "dropped_for_budget": [i for i in retrieved if i not in packed][:5],
            "pii": {"masked": dict(masked), "analysed_at_request": 0},
            "returned": {
                "sensitivity": dict(sensitivity),
                "masked_items": min(len(packed), sum(masked.values())),
                "revealed": revealed,
            },
            "named_entities": {e: ids for e, ids in sorted(named.items())},
            "cursor_issued": rng.random() < 0.1,
        }
    )
    return lineage


def row_values(world: World, tenant: str, at: datetime, day: int) -> dict[str, Any]:
    """One row as AuditStore.write_sync hands it to append: a retrieve (90%), a usage report on an
    earlier retrieve of the tenant (10%)."""
    rng = world.rng
    actor = f"{'agent' if rng.random() < 0.6 else 'user'}:p{world.actors.draw(rng)}"
    recent = world.recent.setdefault(tenant, [])
    base: dict[str, Any] = {
        "trace_id": "t_" + "%024x" % rng.getrandbits(96),
        "created_at": at,
        "tenant": tenant,
        "actor": actor,
        "policy_engine": "regorus",
        "policy_revision": revision_at(day),
    }
    if recent and rng.random() < 0.10:
        about, packed, named, who = recent[rng.randrange(len(recent))]
        used = sorted(rng.sample(packed, rng.randint(1, len(packed))))
        used_about = sorted(e for e, ids in named.items() if set(ids) & set(used))
        lineage: dict[str, Any] = {"version": 2, "about": about, "used": used, "not_returned_by_that_call": 0}
        if used_about:
            lineage["used_about"] = used_about
        if tenant == TENANT:
            world.rows["usage"] += 1
            world.about.update(used_about)
        return {
            **base,
            "actor": who,
            "endpoint": "usage",
            "status_code": 200,
            "decision": "write",
            "error_code": None,
            "lineage": lineage,
        }
    pick = rng.random()
    share, status, decision, error = OUTCOME_MIX[-1]
    for share, status, decision, error in OUTCOME_MIX:
        if pick < share:
            break
        pick -= share
    lineage = retrieve_lineage(world, status, decision)
    if "packed" in lineage:
        recent.append((base["trace_id"], lineage["packed"], lineage["named_entities"], actor))
        if len(recent) > 200:
            recent.pop(0)
    if tenant == TENANT:
        world.rows["retrieve"] += 1
        world.about.update({*lineage.get("subjects", ()), *lineage.get("named_entities", {})})
    return {**base, "endpoint": "retrieve", "status_code": status, "decision": decision, "error_code": error, "lineage": lineage}


def verify_values(tenant: str, at: datetime, rows: int) -> dict[str, Any]:
    return {
        "trace_id": "v_" + secrets.token_hex(12),
        "created_at": at,
        "tenant": tenant,
        "actor": "user:auditor",
        "endpoint": "audit_verify",
        "status_code": 200,
        "decision": "read",
        "policy_engine": None,
        "policy_revision": None,
        "error_code": None,
        "lineage": {"version": 2, "audit_verify": {"ok": True, "rows": rows}},
    }


def instants(rng: random.Random, n: int, end: datetime) -> list[datetime]:
    """n sorted instants over the DAYS before `end`: traffic grows over the year (1x -> 2x), weekdays
    carry 3x a weekend day, office hours (07-19 UTC) 4x the night."""
    start = end - timedelta(days=DAYS)
    hour_weights = [4 if 7 <= h < 19 else 1 for h in range(24)]
    day_weights = [(1 + d / DAYS) * (1 if (start + timedelta(days=d)).weekday() >= 5 else 3) for d in range(DAYS)]
    days = rng.choices(range(DAYS), weights=day_weights, k=n)
    hours = rng.choices(range(24), weights=hour_weights, k=n)
    seconds = sorted(d * 86400 + h * 3600 + rng.random() * 3600 for d, h in zip(days, hours, strict=True))
    return [start + timedelta(seconds=s) for s in seconds]


def seed(engine: Engine, total: int, end: datetime) -> tuple[World, float]:
    """`total` rows over a year for all tenants, appended with the store's own append (facets and
    rollup as the service writes them), BATCH rows per transaction; returns the world and rows/s."""
    world = World(random.Random(SEED + total))
    rng = world.rng
    names, weights = [name for name, _ in TENANTS], [weight for _, weight in TENANTS]
    start = end - timedelta(days=DAYS)
    started = time.perf_counter()
    last_verify: dict[str, int] = {}
    seqs: Counter[str] = Counter()
    done = 0
    stream = instants(rng, total, end)
    for first in range(0, total, BATCH):
        rollup: Rollup = Counter()
        with writer(engine).begin() as conn:
            for at in stream[first : first + BATCH]:
                tenant = rng.choices(names, weights=weights)[0]
                day = int((at - start).total_seconds() // 86400)
                if last_verify.get(tenant) != day and at.hour >= 6:  # an auditor's verify, once a day
                    last_verify[tenant] = day
                    append(conn, verify_values(tenant, at, seqs[tenant]), seal_key=None, rollup=rollup)
                    seqs[tenant] += 1
                    if tenant == TENANT:
                        world.rows["audit_verify"] += 1
                append(conn, row_values(world, tenant, at, day), seal_key=None, rollup=rollup)
                seqs[tenant] += 1
            add_to_rollup(conn, rollup)
        done = min(total, first + BATCH)
        if done % 100_000 == 0 or done == total:
            print(f"  seeded {done:>9,}/{total:,} rows  ({done / (time.perf_counter() - started):,.0f} rows/s)", flush=True)
    analyze(engine)
    return world, total / (time.perf_counter() - started)


def analyze(engine: Engine) -> None:
    """Planner statistics, as autovacuum (PostgreSQL) or the service's own maintenance would keep them."""
    with engine.begin() as conn:
        conn.execute(text("ANALYZE"))


# ---------------------------------------------------------------- measuring


@dataclass(frozen=True, slots=True)
class Timing:
    label: str
    seconds: list[float]
    note: str = ""

    def p(self, q: float) -> float:
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def timed(label: str, call: Callable[[], Any], runs: int = RUNS, note: str = "") -> tuple[Timing, Any]:
    result = call()  # warm-up
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - started)
    return Timing(label, seconds, note), result


def count_between(engine: Engine, since: datetime, until: datetime) -> int:
    """The baseline: a plain count of the period's rows of the chain through (chain, created_at)."""
    statement = select(func.count()).where(
        audit_trace.c.chain == TENANT, audit_trace.c.created_at >= since, audit_trace.c.created_at < until
    )
    with engine.connect() as conn:
        return int(conn.execute(statement).scalar_one())


def retrieve_rows(engine: Engine) -> int:
    statement = select(func.count()).where(audit_trace.c.chain == TENANT, audit_trace.c.endpoint == "retrieve")
    with engine.connect() as conn:
        return int(conn.execute(statement).scalar_one())


def subject_calls(engine: Engine, entity: str) -> int:
    """Distinct calls of the measured chain with any subject facet of the entity (what the report
    pages over; the other tenants' calls about the same id are not counted)."""
    statement = (
        select(func.count(func.distinct(audit_facet.c.trace_pk)))
        .join(audit_trace, audit_trace.c.pk == audit_facet.c.trace_pk)
        .where(audit_facet.c.facet.like(SUBJECT + "%"), audit_facet.c.value == entity, audit_trace.c.chain == TENANT)
    )
    with engine.connect() as conn:
        return int(conn.execute(statement).scalar_one())


def pick_subjects(world: World) -> dict[str, str]:
    """A typical entity (the median of the entities the chain has calls about), a hot one (the
    99.9th percentile) and the hottest (the tenant's biggest customer: what a report on it costs is
    the figure its compliance team sees)."""
    ranked = sorted(world.about.items(), key=lambda kv: (kv[1], kv[0]))
    return {
        "typical": ranked[len(ranked) // 2][0],
        "hot": ranked[min(len(ranked) - 1, int(len(ranked) * 0.999))][0],
        "hottest": ranked[-1][0],
    }


def plans(engine: Engine, end: datetime, entity: str) -> dict[str, list[str]]:
    """EXPLAIN QUERY PLAN (SQLite) / EXPLAIN (PostgreSQL) of the statements the read functions run."""
    since = end - timedelta(days=30)
    subject = (  # one of the index ranges audit.review.subjects walks for a page, newest first, cut at the page
        select(audit_facet.c.trace_pk)
        .where(audit_facet.c.facet == SUBJECT + "retrieved", audit_facet.c.value == entity)
        .order_by(audit_facet.c.trace_pk.desc())
        .limit(101)
    )
    rollup = (
        select(audit_rollup.c.hour, audit_rollup.c.measure, audit_rollup.c.key, func.sum(audit_rollup.c.n))
        .where(audit_rollup.c.chain == TENANT, audit_rollup.c.hour >= int(since.timestamp()) // 3600 + 1)
        .group_by(audit_rollup.c.hour, audit_rollup.c.measure, audit_rollup.c.key)
    )
    edge = select(audit_trace).where(audit_trace.c.chain == TENANT, audit_trace.c.created_at >= since)
    verify_check = (
        select(audit_trace.c.trace_id)
        .join(audit_facet, audit_facet.c.trace_pk == audit_trace.c.pk)
        .where(audit_facet.c.facet == "checked", audit_trace.c.chain == TENANT)
        .order_by(audit_trace.c.seq.desc())
        .limit(1)
    )
    out: dict[str, list[str]] = {}
    prefix = "EXPLAIN QUERY PLAN " if engine.dialect.name == "sqlite" else "EXPLAIN "
    with engine.connect() as conn:
        for name, statement in (("rollup", rollup), ("edge rows", edge), ("subject page", subject), ("last check", verify_check)):
            compiled = statement.compile(engine, compile_kwargs={"literal_binds": True})
            out[name] = [" ".join(str(c) for c in row) for row in conn.execute(text(prefix + str(compiled)))]
    return out


@dataclass
class SizeResult:
    size: int
    seed_rate: float
    seed_s: float
    rows: Counter[str]
    tenant_rows: int
    calls: dict[str, int]
    timings: list[Timing]
    baselines: dict[str, Timing]
    sanity: tuple[int, int]
    counts: dict[str, int]
    plans: dict[str, list[str]]
    db_mb: float


def measure(
    engine: Engine, size: int, world: World, end: datetime, seed_rate: float, seed_s: float, db: Path | None
) -> SizeResult:
    day = timedelta(days=1)
    ragged_since = end - 12 * day - timedelta(minutes=37, seconds=11)
    ragged_until = end - 2 * day - timedelta(minutes=13, seconds=5)
    periods = (
        ("overview 30 d", end - 30 * day, end),
        ("overview 7 d", end - 7 * day, end),
        ("overview 24 h", end - day, end),
        ("overview 10 d ragged", ragged_since, ragged_until),
        ("overview year", end - (DAYS + 1) * day, end),
    )
    baselines: dict[str, Timing] = {}
    baselines["count(*) 30 d"], _ = timed(
        "count(*) 30 d", lambda: count_between(engine, end - 30 * day, end), note="(chain, created_at) index"
    )
    baselines["trace list page"], _ = timed(
        "trace list page", lambda: list_traces(engine, TENANT, Filters(), None, 100), note="list_traces, 100 rows"
    )
    timings: list[Timing] = []
    year_total = 0
    for label, since, until in periods:
        timing, result = timed(label, partial(figures, engine, TENANT, since, until))
        timings.append(Timing(label, timing.seconds, f"{result.calls.total:,} calls"))
        if label == "overview year":
            year_total = int(result.calls.total)
    timing, state = timed("chain_state", lambda: chain_state(engine, TENANT, None))
    timings.append(
        Timing("chain_state", timing.seconds, f"{state.rows:,} rows, last check {'yes' if state.last_check else 'none'}")
    )
    subjects = pick_subjects(world)
    calls = {kind: subject_calls(engine, entity) for kind, entity in subjects.items()}
    for kind, entity in subjects.items():
        timing, report = timed(f"subject {kind} page 1", partial(subject_report, engine, TENANT, entity))
        timings.append(Timing(timing.label, timing.seconds, f"{entity}: {calls[kind]:,} calls, {len(report.calls)} on page"))
        if report.cursor:
            after = int(report.cursor[2:])
            timing, page = timed(f"subject {kind} page 2", partial(subject_report, engine, TENANT, entity, after))
            timings.append(Timing(timing.label, timing.seconds, f"{len(page.calls)} on page (cursor)"))
    with engine.connect() as conn:
        counts = {
            name: int(conn.execute(select(func.count()).select_from(table)).scalar_one())
            for name, table in (
                ("audit_trace", audit_trace),
                ("audit_item", audit_item),
                ("audit_facet", audit_facet),
                ("audit_rollup", audit_rollup),
            )
        }
    return SizeResult(
        size,
        seed_rate,
        seed_s,
        world.rows,
        count_between(engine, end - (DAYS + 1) * day, end + day),
        {**{f"{k} entity": v for k, v in calls.items()}, **{f"{k} id": int(subjects[k][4:]) for k in subjects}},
        timings,
        baselines,
        (year_total, retrieve_rows(engine)),
        counts,
        plans(engine, end, subjects["hottest"]),
        (db.stat().st_size / 1e6) if db and db.exists() else float("nan"),
    )


# ---------------------------------------------------------------- the write side


def write_cost(url: str, rows: int) -> dict[str, float]:
    """rows/s of append: as the service does it (facets and rollup), the same rows with facts_of
    patched to nothing, and rows with an empty lineage; interleaved in rounds on a fresh store, each
    variant on its own chain."""
    engine = open_store(url)
    world = World(random.Random(SEED))
    end = datetime.now(timezone.utc)
    stream = instants(world.rng, rows * 3, end)
    real = facts_of

    def none_of(row: Any) -> Facts:
        return Facts(hour=0, tallies=(), facets=frozenset())

    variants = ("facets + rollup", "no facts", "empty lineage")
    spent = dict.fromkeys(variants, 0.0)
    done: Counter[str] = Counter()
    rounds = 5
    per = rows // rounds
    try:
        for r in range(rounds):
            for v, name in enumerate(variants):
                chunk = stream[(v * rounds + r) * per : (v * rounds + r + 1) * per]
                values = [row_values(world, f"w{v}", at, 300) for at in chunk]
                if name == "empty lineage":
                    values = [{**x, "lineage": {}} for x in values]
                # The name append looks up, patched on append's own module (whichever it is): the one
                # place the bench touches the chain room's inside, to price the facets.
                append.__globals__["facts_of"] = none_of if name == "no facts" else real
                started = time.perf_counter()
                for first in range(0, len(values), 1000):
                    rollup: Rollup = Counter()
                    with writer(engine).begin() as conn:
                        for x in values[first : first + 1000]:
                            append(conn, x, seal_key=None, rollup=rollup)
                        add_to_rollup(conn, rollup)
                spent[name] += time.perf_counter() - started
                done[name] += len(values)
    finally:
        append.__globals__["facts_of"] = real
        engine.dispose()
    return {name: done[name] / spent[name] for name in variants}


# ---------------------------------------------------------------- reporting


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f}"


def report(result: SizeResult, backend: str) -> bool:
    print(
        f"\n=== compliance benchmark, {backend}: {result.size:,} traces over {DAYS} days, {os.cpu_count()} CPUs, "
        f"code {code_revision()} ==="
    )
    print(
        f"seed: {result.size:,} rows in {result.seed_s:,.0f} s = {result.seed_rate:,.0f} rows/s "
        f"(append + audit_item + facets + rollup, {BATCH:,} rows a transaction); store {result.db_mb:,.0f} MB"
    )
    rows = result.rows
    print(
        f"{TENANT} chain: {result.tenant_rows:,} rows (retrieve {rows['retrieve']:,}, usage {rows['usage']:,}, "
        f"audit_verify {rows['audit_verify']:,}); tables: " + ", ".join(f"{name} {n:,}" for name, n in result.counts.items())
    )
    print(
        f"subjects: typical ent_{result.calls['typical id']} has {result.calls['typical entity']:,} calls (median of the "
        f"entities with any), hot ent_{result.calls['hot id']} {result.calls['hot entity']:,} (99.9th percentile), "
        f"hottest ent_{result.calls['hottest id']} {result.calls['hottest entity']:,}"
    )
    print("baselines, same run (the headline ratio is over their p50):")
    for timing in result.baselines.values():
        print(f"  {timing.label:<24} p50 {ms(timing.p(50)):>9} ms  p95 {ms(timing.p(95)):>9} ms   {timing.note}")
    base_count = result.baselines["count(*) 30 d"].p(50)
    base_list = result.baselines["trace list page"].p(50)
    print(f"{'':2}{'figure':<24} {'p50 ms':>9} {'p95 ms':>9} {'target':>7} {'p95/target':>10} {'vs baseline':>14}  note")
    ok = True
    for timing in result.timings:
        subject = timing.label.startswith("subject")
        target = SUBJECT_TARGET_S if subject else OVERVIEW_TARGET_S
        base, base_name = (base_list, "list") if subject else (base_count, "count")
        met = timing.p(95) <= target
        ok = ok and met
        print(
            f"  {timing.label:<24} {ms(timing.p(50)):>9} {ms(timing.p(95)):>9} {target:>6.0f}s {timing.p(95) / target:>9.1%} "
            f"{timing.p(50) / base:>8.1f}x {base_name:<5}  {timing.note}{'' if met else '  MISSED'}"
        )
    year, retrieves = result.sanity
    print(
        f"sanity: overview year total calls {year:,} vs count(*) of retrieve rows {retrieves:,}: {'equal' if year == retrieves else 'DIFFER'}"
    )
    print("plans:")
    for name, lines in result.plans.items():
        print(f"  {name}: " + " | ".join(lines))
    return ok and year == retrieves


def write_report(rates: dict[str, float], rows: int) -> None:
    full = rates["facets + rollup"]
    print(f"\n=== write side: append of {rows:,} rows per variant (5 interleaved rounds, fresh store) ===")
    for name, rate in rates.items():
        relative = (
            "as the service appends" if name == "facets + rollup" else f"the service's append takes {rate / full:.2f}x its time"
        )
        print(f"  {name:<16} {rate:>8,.0f} rows/s   ({relative})")
    price = 1000 / full - 1000 / rates["no facts"]
    print(f"  price of the facets and the rollup: {price:.3f} ms a row, {rates['no facts'] / full - 1:.0%} more time per append")


# ---------------------------------------------------------------- main


@contextmanager
def store(args: argparse.Namespace, root: Path, size: int) -> Iterator[tuple[str, Path | None]]:
    if not args.database_url:
        path = root / f"compliance-{size}.db"
        yield f"sqlite:///{path}", path
        return
    schema = "gw_bench_" + secrets.token_hex(6)
    admin = create_engine(args.database_url)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    url = f"{args.database_url}{'&' if '?' in args.database_url else '?'}options=-csearch_path%3D{schema}"
    try:
        migrate_store(url)
        yield url, None
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="comma-separated trace counts (default 100000,1000000)")
    parser.add_argument("--database-url", help="PostgreSQL instead of SQLite, in a fresh schema dropped at the end")
    parser.add_argument("--write-rows", type=int, default=20_000, help="rows per variant of the write-side cost (0: skip)")
    parser.add_argument("--data", type=Path, help="where the SQLite files go (default: a temp dir, removed at the end)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s]
    with bench_dir(args.data, "gateway-compliance-bench-") as root:
        backend = "PostgreSQL" if args.database_url else "SQLite"
        ok = True
        try:
            if args.write_rows:
                with store(args, root, 0) as (url, _):
                    write_report(write_cost(url, args.write_rows), args.write_rows)
            for size in sizes:
                with store(args, root, size) as (url, db):
                    engine = open_store(url)
                    try:
                        end = datetime.now(timezone.utc).replace(microsecond=0)
                        print(f"[{backend}] seeding {size:,} traces", flush=True)
                        started = time.perf_counter()
                        world, rate = seed(engine, size, end)
                        seed_s = time.perf_counter() - started
                        print(f"[{backend}] measuring", flush=True)
                        ok = report(measure(engine, size, world, end, rate, seed_s, db), backend) and ok
                    finally:
                        engine.dispose()
                    if db is not None:
                        for leftover in db.parent.glob(db.name + "*"):
                            leftover.unlink(missing_ok=True)
            return 0 if ok else 1
        except KeyboardInterrupt:
            return interrupted()


if __name__ == "__main__":
    sys.exit(main())
