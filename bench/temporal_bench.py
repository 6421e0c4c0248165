"""Temporal benchmark: versioned facts through the real service, current@1 now and as of past dates.

Generates N facts (slots such as `ent_0007#plan`, each with 2-4 dated versions of different
authority, status and validity), loads them through `PUT /v1/items`, then asks `POST /v1/retrieve`
about each fact's entity and attribute word, now and at past `as_of` instants, and checks that the
first item of the fact's slot is the version that was true at that instant. The truth is computed
here, independently of the gateway: among the slot's versions with status `active` that are valid
at the instant, the highest authority (approved > reviewed > unreviewed > speculative), then the
newest `recorded_at`, then the id. Run from the project root with the project's venv:

    .venv/bin/python bench/temporal_bench.py --facts 1000            # ~1,000 facts, every fact
    .venv/bin/python bench/temporal_bench.py --queries 200           # 1,200 facts, 200 of them asked

See bench/history/temporal_bench.md ("Reading the report") for what each printed figure means.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import harness
import httpx
from harness import Server, bench_dir, code_revision, free_port, interrupted, load_through_api, serving

SEED = 20261130
TENANT = "bench"
AGENT_PRINCIPAL = "user:bench"
LOADER_PRINCIPAL = "user:bench-loader"
TASK = {"type": "account_followup"}
BUDGET_BYTES = 200_000
ENTITY_COUNT = 300
PAST_PER_FACT = 3
SHOW_MISMATCHES = 5
AUTHORITY_RANK = {"approved": 3, "reviewed": 2, "unreviewed": 1, "speculative": 0}

# (property name, label in the text, the one query word that finds it, values). Every query word
# occurs only in its own attribute's texts (checked at start-up, with a margin for Porter stemming).
ATTRIBUTES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("plan", "plan", "plan", ("Starter", "Growth", "Business", "Enterprise", "Scale", "Premier", "Essentials", "Ultimate")),
    (
        "billing_cycle",
        "billing cycle",
        "billing",
        ("monthly", "quarterly", "annually", "semiannually", "prepaid yearly", "usage based"),
    ),
    (
        "discount_rule",
        "discount rule",
        "discount",
        ("5 percent", "8 percent", "10 percent", "12 percent", "15 percent", "20 percent", "none"),
    ),
    (
        "account_owner",
        "account owner",
        "owner",
        (
            "Alice Moreau",
            "Bruno Silva",
            "Chen Wei",
            "Dana Kowalski",
            "Elif Yilmaz",
            "Farid Haddad",
            "Grace Okafor",
            "Hugo Lindqvist",
        ),
    ),
    (
        "renewal_date",
        "renewal date",
        "renewal",
        ("January 2027", "March 2027", "May 2027", "July 2027", "September 2027", "November 2027", "February 2028"),
    ),
    ("support_tier", "support tier", "tier", ("Bronze", "Silver", "Gold", "Platinum", "Diamond", "Titanium")),
    ("region", "region", "region", ("EMEA", "APAC", "LATAM", "DACH", "Nordics", "Benelux", "North America")),
    (
        "contract_value",
        "contract value",
        "contract",
        ("USD 24000", "USD 48000", "USD 96000", "USD 150000", "USD 310000", "USD 720000"),
    ),
    ("currency", "currency", "currency", ("USD", "EUR", "GBP", "CHF", "JPY", "CAD", "AUD")),
    ("payment_terms", "payment terms", "terms", ("net 30", "net 45", "net 60", "net 90", "due on receipt")),
    ("seat_count", "seats", "seats", ("10", "25", "50", "100", "250", "500", "1000")),
    ("segment", "segment", "segment", ("SMB", "midmarket", "strategic", "public sector", "startup", "nonprofit")),
)
SYLLABLES = "ba be bi bo ka ke ki ko la le li lo ma me mi mo na ne ni no ra ri ro sa se si so ta te ti to va ve vi zu".split()
COMPANY_SUFFIXES = ("Labs", "Group", "Systems", "Holdings", "Partners", "Industries", "Works", "Logistics")
FIRST_NAMES = ("Mira", "Jonas", "Priya", "Tomas", "Lea", "Omar", "Sofia", "Ivan", "Nadia", "Kofi", "Ines", "Yuki")

# Scenario: how a slot's versions are laid out in time (weights sum to 100). See make_versions().
SCENARIOS = (
    ("authority_over_recency", 25),
    ("history", 20),
    ("equal_authority_recency", 20),
    ("overlap_mixed", 15),
    ("superseded_trap", 10),
    ("future_version", 10),
)


# ---------------------------------------------------------------- data generation


@dataclass(frozen=True, slots=True)
class Version:
    id: str
    value: str
    authority: str
    status: str
    valid_from: datetime
    valid_to: datetime | None
    recorded_at: datetime

    def valid_at(self, t: datetime) -> bool:
        return self.valid_from <= t and (self.valid_to is None or t < self.valid_to)

    def describe(self) -> str:
        until = day(self.valid_to) if self.valid_to else "open"
        return f"{self.id} {self.authority}/{self.status} valid {day(self.valid_from)}..{until} rec {day(self.recorded_at)}"


@dataclass(slots=True)
class Fact:
    slot: str
    entity: str
    entity_name: str
    name: str
    label: str
    word: str
    scenario: str
    versions: list[Version] = field(default_factory=list)


def day(value: datetime) -> str:
    return value.strftime("%Y-%m-%d")


def instant(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def expected_at(fact: Fact, t: datetime) -> Version | None:
    """The truth at t: active and valid, then authority, then newest recorded_at, then id."""
    candidates = [v for v in fact.versions if v.status == "active" and v.valid_at(t)]
    if not candidates:
        return None
    return min(candidates, key=lambda v: (-AUTHORITY_RANK[v.authority], -v.recorded_at.timestamp(), v.id))


def unambiguous_at(fact: Fact, t: datetime) -> bool:
    """No tie, and recency means the same whether read as recorded_at or valid_from."""
    candidates = [v for v in fact.versions if v.status == "active" and v.valid_at(t)]
    if len(candidates) < 2:
        return True
    best = max(AUTHORITY_RANK[v.authority] for v in candidates)
    top = [v for v in candidates if AUTHORITY_RANK[v.authority] == best]
    if len(top) < 2:
        return True
    by_recorded = sorted(top, key=lambda v: v.recorded_at)
    by_valid = sorted(top, key=lambda v: v.valid_from)
    return (
        by_recorded == by_valid and len({v.recorded_at for v in top}) == len(top) and len({v.valid_from for v in top}) == len(top)
    )


Row = tuple[str, str, int, int | None, int | None]  # authority, status, valid_from, valid_to, recorded (days ago)


class Maker:
    """Seeded generator of entities, facts and their versions; dates are whole days around the anchor."""

    def __init__(self, seed: int, anchor: datetime) -> None:
        self.rng = random.Random(seed)
        self.anchor = anchor

    def name_word(self) -> str:
        while True:
            word = "".join(self.rng.choice(SYLLABLES) for _ in range(self.rng.randint(2, 3))).capitalize()
            if not collides(word):
                return word

    def entity(self, index: int) -> dict[str, Any]:
        company = self.rng.random() < 0.6
        name = (
            f"{self.name_word()} {self.rng.choice(COMPANY_SUFFIXES)}"
            if company
            else f"{self.rng.choice(FIRST_NAMES)} {self.name_word()}"
        )
        return {
            "id": f"ent_{index:04d}",
            "kind": "entity",
            "entity_type": "company" if company else "contact",
            "name": name,
            "acl": ["*"],
            "sensitivity": "internal",
        }

    def when(self, days_ago: int) -> datetime:
        return self.anchor - timedelta(days=days_ago)

    def recorded(self, valid_from: datetime) -> datetime:
        """A little after the version became valid (0-3 days, random second), never after the anchor."""
        moment = valid_from + timedelta(days=self.rng.randint(0, 3), seconds=self.rng.randint(1, 86399))
        return min(moment, self.anchor - timedelta(seconds=self.rng.randint(1, 3600)))

    def pick(self, *authorities: str) -> str:
        return self.rng.choice(authorities)

    def open_approved_then_newer(self, status: str, lower: tuple[str, ...], newest: int) -> list[Row]:
        """An open-ended approved version with `status` (300-700 days ago), a newer active one of an
        authority in `lower` (20 to `newest` days ago), and 6 times in 10 a closed one before both."""
        r = self.rng.randint
        a, b = r(300, 700), r(20, newest)
        rows: list[Row] = [("approved", status, a, None, None), (self.pick(*lower), "active", b, None, None)]
        if self.rng.random() < 0.6:
            rows.insert(0, (self.pick("reviewed", "unreviewed", "approved"), "active", a + r(150, 500), a, None))
        return rows

    def layout(self, scenario: str) -> list[Row]:
        """(authority, status, valid_from days ago, valid_to days ago or None, recorded days ago or None).
        Negative days ago lie after the anchor (scheduled versions)."""
        r = self.rng.randint
        rows: list[Row]
        if scenario == "authority_over_recency":
            # approved and open-ended, then a newer speculative/unreviewed one: the approved one stays true.
            return self.open_approved_then_newer("active", ("speculative", "unreviewed"), 200)
        if scenario == "history":
            # consecutive closed windows, the last one open: exactly one version is valid at any instant.
            count = r(2, 4)
            starts = [r(30, 250)]
            for _ in range(count - 1):
                starts.append(starts[-1] + r(120, 400))
            starts.reverse()  # oldest first
            rows = []
            for i, start in enumerate(starts):
                end = starts[i + 1] if i + 1 < count else None
                status = "superseded" if i == 0 and count >= 3 and self.rng.random() < 0.4 else "active"
                rows.append((self.pick("approved", "reviewed", "unreviewed", "speculative"), status, start, end, None))
            return rows
        if scenario == "equal_authority_recency":
            # 2-3 open-ended versions of one authority: the newest valid one is true.
            authority = self.pick("approved", "reviewed", "unreviewed")
            starts = sorted({r(20, 800) for _ in range(r(2, 3))}, reverse=True)
            while len(starts) < 2 or min(a - b for a, b in zip(starts, starts[1:])) < 30:
                starts = sorted({r(20, 800) for _ in range(r(2, 3))}, reverse=True)
            return [(authority, "active", start, None, None) for start in starts]
        if scenario == "overlap_mixed":
            # v1 approved [p, q) closed; v2 unreviewed [r, open); v3 reviewed [s, open); v4 speculative [u, open).
            q = r(200, 300)
            rr = q + r(80, 300)
            p = rr + r(80, 300)
            s = r(90, q - 60)
            u = r(20, s - 40)
            return [
                ("approved", "active", p, q, None),
                ("unreviewed", "active", rr, None, None),
                ("reviewed", "active", s, None, None),
                ("speculative", "active", u, None, None),
            ]
        if scenario == "superseded_trap":
            # an approved version still open-ended but marked superseded; a lower-authority active one is true.
            return self.open_approved_then_newer("superseded", ("reviewed", "unreviewed"), 250)
        if scenario == "future_version":
            # an approved version recorded already but valid only from a future date: not true yet.
            a = r(100, 600)
            rows = [
                (self.pick("reviewed", "unreviewed"), "active", a, None, None),
                ("approved", "active", -r(30, 120), None, r(5, 15)),
            ]
            if self.rng.random() < 0.6:
                rows.insert(0, (self.pick("reviewed", "unreviewed", "approved"), "active", a + r(150, 500), a, None))
            return rows
        raise ValueError(scenario)

    def fact(self, entity: dict[str, Any], attribute: tuple[str, str, str, tuple[str, ...]]) -> Fact:
        name, label, word, values = attribute
        scenario = self.rng.choices([s for s, _ in SCENARIOS], weights=[w for _, w in SCENARIOS], k=1)[0]
        number = entity["id"].removeprefix("ent_")
        fact = Fact(f"{entity['id']}#{name}", entity["id"], entity["name"], name, label, word, scenario)
        layout = self.layout(scenario)
        chosen = self.rng.sample(values, len(layout))
        # Version ids are numbered in a shuffled order, so an id says nothing about which version is newest.
        numbers = self.rng.sample(range(1, len(layout) + 1), len(layout))
        for (authority, status, start, end, recorded_ago), value, n in zip(layout, chosen, numbers):
            valid_from = self.when(start)
            recorded_at = (
                self.when(recorded_ago) + timedelta(seconds=self.rng.randint(1, 86399))
                if recorded_ago is not None
                else self.recorded(valid_from)
            )
            fact.versions.append(
                Version(
                    f"prop_{number}_{name}_v{n}",
                    value,
                    authority,
                    status,
                    valid_from,
                    self.when(end) if end is not None else None,
                    recorded_at,
                )
            )
        return fact


def collides(text_: str) -> bool:
    """True when a word of text_ could match an attribute's query word (same first four letters)."""
    words = re.findall(r"[a-z0-9]+", text_.lower())
    return any(w[:4] == q[:4] for w in words for _, _, q, _ in ATTRIBUTES)


def check_vocabulary() -> None:
    for name, label, word, values in ATTRIBUTES:
        if word not in re.findall(r"[a-z]+", label.lower()):
            raise SystemExit(f"attribute {name}: its label {label!r} must contain its query word {word!r}")
        for other in (*values, *(lbl for n, lbl, _, _ in ATTRIBUTES if n != name)):
            own = {w for w in re.findall(r"[a-z0-9]+", other.lower())}
            if any(w[:4] == word[:4] for w in own):
                raise SystemExit(f"attribute {name}: {other!r} could match its query word {word!r}")
    for extra in (*COMPANY_SUFFIXES, *FIRST_NAMES):
        if collides(extra):
            raise SystemExit(f"name part {extra!r} could match an attribute's query word")


def generate(facts: int, entities: int, seed: int, anchor: datetime) -> tuple[list[dict[str, Any]], list[Fact]]:
    """Entity items and facts: fact i belongs to entity i mod E and takes that entity's next attribute."""
    check_vocabulary()
    if facts > entities * len(ATTRIBUTES):
        raise SystemExit(f"--facts {facts} needs more than {len(ATTRIBUTES)} attributes per entity: raise --entities")
    maker = Maker(seed, anchor)
    entity_items = [maker.entity(i) for i in range(entities)]
    attribute_order = [maker.rng.sample(ATTRIBUTES, len(ATTRIBUTES)) for _ in range(entities)]
    result = [maker.fact(entity_items[i % entities], attribute_order[i % entities][i // entities]) for i in range(facts)]
    return entity_items, result


def fact_items(fact: Fact) -> list[dict[str, Any]]:
    return [
        {
            "id": v.id,
            "kind": "property",
            "entity": fact.entity,
            "name": fact.name,
            "value": v.value,
            "text": f"{fact.label}: {v.value} ({fact.entity_name})",
            "slot": fact.slot,
            "authority": v.authority,
            "status": v.status,
            "valid_from": instant(v.valid_from),
            "valid_to": instant(v.valid_to) if v.valid_to else None,
            "recorded_at": instant(v.recorded_at),
            "acl": ["*"],
            "sensitivity": "internal",
        }
        for v in fact.versions
    ]


# ---------------------------------------------------------------- queries and truth


@dataclass(frozen=True, slots=True)
class Query:
    fact: Fact
    when: str  # "now" or "past"
    as_of: datetime | None  # None: no as_of in the request (the service's now)


def past_instants(fact: Fact, anchor: datetime, rng: random.Random, per_fact: int) -> list[datetime]:
    """Up to per_fact past instants (noon UTC) where an active version is valid and the truth is unambiguous.

    The slot's history is cut at every validity boundary before the anchor; windows whose truth
    differs from today's come first, then windows where several versions are valid, then recent ones.
    """
    bounds = sorted({b for v in fact.versions for b in (v.valid_from, v.valid_to) if b is not None and b < anchor} | {anchor})
    now_truth = expected_at(fact, anchor)
    windows: list[tuple[tuple[int, int, float], datetime, datetime]] = []
    for start, end in zip(bounds, bounds[1:]):
        if (end - start).days < 2:
            continue
        middle = start + (end - start) / 2
        probe = middle.replace(hour=12, minute=0, second=0, microsecond=0)
        truth = expected_at(fact, probe)
        if truth is None or not unambiguous_at(fact, probe):
            continue
        valid = sum(1 for v in fact.versions if v.valid_at(probe))
        windows.append(((int(truth != now_truth), min(valid, 2), start.timestamp()), start, end))
    windows.sort(key=lambda w: w[0], reverse=True)
    chosen = [(start, end) for _, start, end in windows[:per_fact]]
    instants = []
    for start, end in chosen:
        offset = rng.randint(1, max((end - start).days - 1, 1))
        instants.append((start + timedelta(days=offset)).replace(hour=12, minute=0, second=0, microsecond=0))
    if len(instants) < min(2, per_fact) and chosen:  # a single window: a second instant inside it
        start, end = max(chosen, key=lambda w: w[1] - w[0])
        for _ in range(10):
            extra = (start + timedelta(days=rng.randint(1, max((end - start).days - 1, 1)))).replace(
                hour=12, minute=0, second=0, microsecond=0
            )
            if extra not in instants:
                instants.append(extra)
                break
    return sorted(i for i in instants if expected_at(fact, i) is not None and unambiguous_at(fact, i))


def build_queries(facts: list[Fact], sample: int | None, seed: int, anchor: datetime, per_fact: int) -> list[Query]:
    rng = random.Random(seed + 1)
    chosen = facts if sample is None or sample >= len(facts) else rng.sample(facts, sample)
    queries: list[Query] = []
    for fact in chosen:
        if expected_at(fact, anchor) is None or not unambiguous_at(fact, anchor):
            raise SystemExit(f"generator bug: {fact.slot} has no unambiguous truth at the anchor")
        queries.append(Query(fact, "now", None))
        queries.extend(Query(fact, "past", t) for t in past_instants(fact, anchor, rng, per_fact))
    return queries


def body_for(query: Query, historical: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "task": TASK,
        "entities": [{"id": query.fact.entity}],
        "query": query.fact.word,
        "sources": {"semantic": False},
        "budget": {"bytes": BUDGET_BYTES},
    }
    if query.as_of is not None:
        body["as_of"] = instant(query.as_of)
    if historical:
        body["include_historical"] = True
    return body


# ---------------------------------------------------------------- the gateway as subprocesses


def create_key(data_dir: Path, principal: str, role: str, clearance: str) -> str:
    return harness.create_key(data_dir, TENANT, principal, role, clearance, groups="sales")  # account_followup is granted to it


# ---------------------------------------------------------------- asking


@dataclass(slots=True)
class Outcome:
    query: Query
    truth: Version | None = None  # at the instant the request was sent
    sent_at: datetime | None = None
    status: int = 0  # of the include_historical call
    ms: float = 0.0
    items: list[dict[str, Any]] = field(default_factory=list)
    collapse_status: int = 0
    collapse_ms: float = 0.0
    collapse_items: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    retried: bool = False

    def slot_items(self, items: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """Items of the fact's slot by the response's own `slot` field (the contract)."""
        return [i for i in (self.items if items is None else items) if i.get("slot") == self.query.fact.slot]

    def own_items(self, items: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """Items of the fact's slot by id (the benchmark's knowledge, whatever `slot` says)."""
        ids = {v.id for v in self.query.fact.versions}
        return [i for i in (self.items if items is None else items) if i.get("id") in ids]

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.collapse_status == 200

    def truth_first(self, items: list[dict[str, Any]]) -> bool:
        """The expected version is the first of `items`."""
        return bool(items) and self.truth is not None and items[0].get("id") == self.truth.id

    @property
    def current_at_1(self) -> bool:
        return self.truth_first(self.slot_items())

    @property
    def strict_at_1(self) -> bool:
        return self.truth_first(self.items)

    @property
    def collapsed(self) -> bool:
        slot = self.slot_items(self.collapse_items)
        return len(slot) == 1 and self.truth_first(slot)

    @property
    def by_id_at_1(self) -> bool:
        return self.truth_first(self.own_items())

    @property
    def current_flag_ok(self) -> bool:
        """The expected version says current: true and every other version of the slot current: false."""
        own = self.own_items()
        return (
            bool(own)
            and self.truth is not None
            and all((i.get("current") is True) == (i.get("id") == self.truth.id) for i in own)
        )


async def post(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[int, float, list[dict[str, Any]], str | None]:
    started = time.perf_counter()
    try:
        response = await client.post("/v1/retrieve", json=body)
    except httpx.HTTPError as exc:  # counted as a failure (status 0), never silently skipped
        return 0, (time.perf_counter() - started) * 1000, [], f"{type(exc).__name__}: {exc}"
    ms = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        return response.status_code, ms, [], response.text[:300]
    payload = response.json()
    degraded = {name: s["status"] for name, s in payload.get("sources", {}).items() if s.get("status") in ("error", "timeout")}
    return 200, ms, list(payload.get("items") or []), (f"degraded sources {degraded}" if degraded else None)


async def ask(client: httpx.AsyncClient, query: Query) -> Outcome:
    outcome = Outcome(query)
    outcome.sent_at = datetime.now(timezone.utc)
    outcome.truth = expected_at(query.fact, query.as_of or outcome.sent_at)
    outcome.status, outcome.ms, outcome.items, error = await post(client, body_for(query, historical=True))
    outcome.collapse_status, outcome.collapse_ms, outcome.collapse_items, collapse_error = await post(
        client, body_for(query, historical=False)
    )
    outcome.error = error or collapse_error
    return outcome


async def run_queries(url: str, key: str, queries: list[Query], concurrency: int) -> tuple[list[Outcome], float]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    outcomes: list[Outcome] = []
    jobs = iter(queries)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, limits=limits, timeout=60) as client:
        for warm in queries[: min(5, len(queries))]:  # first calls compile and warm caches
            await ask(client, warm)

        async def worker() -> None:
            for query in jobs:
                outcomes.append(await ask(client, query))
                if len(outcomes) % 500 == 0:
                    print(f"  {len(outcomes):>6}/{len(queries)} queries", flush=True)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
        # A source over the connector deadline (GATEWAY_CONNECTOR_DEADLINE_MS) makes a partial answer: that is
        # the machine's load, not the ranking. Ask those again, alone, once; the report counts them.
        retried = 0
        for index, outcome in enumerate(outcomes):
            if outcome.ok and outcome.error:
                retried += 1
                outcomes[index] = await ask(client, outcome.query)
                outcomes[index].retried = True
    if retried:
        print(f"  {retried} answers with a timed-out or failed source asked again one at a time", flush=True)
    return outcomes, wall


# ---------------------------------------------------------------- reporting


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def share(outcomes: list[Outcome], attribute: str) -> float:
    return sum(1 for o in outcomes if getattr(o, attribute)) / len(outcomes) if outcomes else float("nan")


def short(item: dict[str, Any]) -> str:
    return (
        f"{item.get('id')} ({item.get('authority')}, status {item.get('status')}, current {item.get('current')}, "
        f"slot {item.get('slot', '-')!s}, found_by {','.join(item.get('found_by') or [])})"
    )


def explain(o: Outcome) -> list[str]:
    fact, q = o.query.fact, o.query
    at = f"as_of {instant(q.as_of)}" if q.as_of else f"now ({instant(o.sent_at) if o.sent_at else '?'})"
    slot_first = o.slot_items()
    own = o.own_items()
    lines = [f"  {fact.slot} [{fact.scenario}] query {fact.word!r}, {at}: expected {o.truth.id if o.truth else None}"]
    for v in sorted(fact.versions, key=lambda v: v.valid_from):
        mark = "  <- expected" if o.truth and v.id == o.truth.id else ""
        lines.append(f"      {v.describe()}{mark}")
    lines.append(f"    first of slot: {short(slot_first[0]) if slot_first else 'none (no item carries this slot)'}")
    lines.append(
        f"    slot versions in order (by id): {', '.join(i['id'] for i in own) or 'none returned'}; "
        f"items[0]: {short(o.items[0]) if o.items else 'none'}"
    )
    collapse = [i["id"] for i in o.own_items(o.collapse_items)]
    lines.append(f"    without include_historical, versions of the slot: {', '.join(collapse) or 'none'}")
    return lines


def baseline(outcomes: list[Outcome], rule: str) -> float:
    """current@1 of a ranker that takes the newest valid version (`newest`), or the highest authority
    then newest among valid versions whatever their status (`authority`): how much the data tests."""
    hits = 0
    for o in outcomes:
        t = o.query.as_of or o.sent_at
        valid = [v for v in o.query.fact.versions if t is not None and v.valid_at(t)]
        if not valid or o.truth is None:
            continue
        if rule == "newest":
            pick = max(valid, key=lambda v: v.recorded_at)
        else:
            pick = min(valid, key=lambda v: (-AUTHORITY_RANK[v.authority], -v.recorded_at.timestamp(), v.id))
        hits += pick.id == o.truth.id
    return hits / len(outcomes) if outcomes else float("nan")


def figures(outcomes: list[Outcome]) -> dict[str, float]:
    return {
        "n": len(outcomes),
        "current_at_1": share(outcomes, "current_at_1"),
        "strict_at_1": share(outcomes, "strict_at_1"),
        "collapse": share(outcomes, "collapsed"),
        "by_id_at_1": share(outcomes, "by_id_at_1"),
        "current_flag": share(outcomes, "current_flag_ok"),
    }


def report(
    outcomes: list[Outcome],
    facts: list[Fact],
    versions: int,
    args: argparse.Namespace,
    anchor: datetime,
    load: dict[str, float],
    wall: float,
    code: str,
) -> bool:
    ok = [o for o in outcomes if o.ok]
    failed = [o for o in outcomes if not o.ok]
    groups = {"now": [o for o in ok if o.query.when == "now"], "past as_of": [o for o in ok if o.query.when == "past"], "all": ok}
    asked_facts = len({o.query.fact.slot for o in outcomes})
    print(
        f"\n=== temporal benchmark: {len(facts):,} facts ({versions:,} versions) over {args.entities} entities, "
        f"{asked_facts:,} facts asked, {len(outcomes):,} (fact, instant) queries x 2 calls, anchor {day(anchor)}, "
        f"seed {args.seed}, concurrency {args.concurrency}, {os.cpu_count()} CPUs, code {code} ==="
    )
    print(
        f"load: {load['created'] + load['updated'] + load['unchanged']:,.0f} items via PUT /v1/items in {load['batches']:.0f} batches, "
        f"{load['seconds']:.1f} s = {load['rate']:,.0f} items/s"
    )
    print(f"{'':<12} {'queries':>7}  {'current@1':>9}  {'strict@1':>8}  {'collapse':>8}  {'by-id@1':>7}  {'current-flag':>12}")
    table = {}
    for label, group in groups.items():
        f = figures(group)
        table[label] = f
        print(
            f"{label:<12} {f['n']:>7}  {f['current_at_1']:9.3f}  {f['strict_at_1']:8.3f}  {f['collapse']:8.3f}  "
            f"{f['by_id_at_1']:7.3f}  {f['current_flag']:12.3f}"
        )
    print("by scenario (current@1 now / past; collapse now / past; queries now / past):")
    by_scenario: dict[str, dict[str, list[Outcome]]] = defaultdict(lambda: {"now": [], "past": []})
    for o in ok:
        by_scenario[o.query.fact.scenario][o.query.when].append(o)
    for name, _ in SCENARIOS:
        parts = by_scenario.get(name)
        if not parts:
            continue
        now, past = parts["now"], parts["past"]
        print(
            f"  {name:<24} {share(now, 'current_at_1'):5.3f} / {share(past, 'current_at_1'):5.3f}   "
            f"{share(now, 'collapsed'):5.3f} / {share(past, 'collapsed'):5.3f}   {len(now):>5} / {len(past):<5}"
        )
    hist_ms = [o.ms for o in ok]
    collapse_ms = [o.collapse_ms for o in ok]
    print(
        f"latency (client-observed, {args.concurrency} client{'s' if args.concurrency > 1 else ''}): include_historical p50 "
        f"{percentile(hist_ms, 50):.1f} ms p95 {percentile(hist_ms, 95):.1f} ms; without p50 {percentile(collapse_ms, 50):.1f} ms "
        f"p95 {percentile(collapse_ms, 95):.1f} ms; {2 * len(outcomes) / wall:.1f} req/s"
    )
    returned = [i for o in ok for i in o.items]
    without_slot = sum(1 for i in returned if "slot" not in i)
    without_current = sum(1 for i in returned if "current" not in i)
    absent = sum(1 for o in ok if o.truth and o.truth.id not in {i.get("id") for i in o.items})
    print(
        f"diagnostics: items without a `slot` field {without_slot:,}/{len(returned):,}, without `current` {without_current:,}/{len(returned):,}; "
        f"expected version absent from items in {absent} queries"
    )
    strict_misses = [o for o in ok if not o.strict_at_1 and o.items]
    other_entity = sum(1 for o in strict_misses if o.items[0].get("entity") != o.query.fact.entity)
    same_entity_other_slot = sum(
        1
        for o in strict_misses
        if o.items[0].get("entity") == o.query.fact.entity and o.items[0].get("id") not in {v.id for v in o.query.fact.versions}
    )
    exact_only = sum(
        1
        for o in strict_misses
        if o.truth and any(i.get("id") == o.truth.id and "lexical" not in (i.get("found_by") or []) for i in o.items)
    )
    print(
        f"strict@1 misses: {len(strict_misses)}; items[0] was another entity's item in {other_entity}, "
        f"another attribute of the same entity in {same_entity_other_slot}, another version of the slot in "
        f"{len(strict_misses) - other_entity - same_entity_other_slot}; the expected version was found by exact "
        f"but not by lexical in {exact_only} of them"
    )
    naive = {when: [o for o in ok if o.query.when == when] for when in ("now", "past")}
    print(
        "what naive rankers would score (the truth differs from them): "
        + "; ".join(
            f"{label} newest valid {baseline(group, 'newest'):.3f}, highest authority ignoring status "
            f"{baseline(group, 'authority'):.3f}"
            for label, group in naive.items()
            if group
        )
    )
    misses = [o for o in ok if not o.current_at_1]
    collapse_misses = [o for o in ok if o.current_at_1 and not o.collapsed]
    if misses:
        print(
            f"current@1 mismatches: {len(misses)} (showing {min(args.show, len(misses))}; by scenario "
            f"{dict(Counter(f'{o.query.fact.scenario}/{o.query.when}' for o in misses))})"
        )
        for o in misses[: args.show]:
            print("\n".join(explain(o)))
    if collapse_misses:
        print(
            f"collapse mismatches where current@1 held: {len(collapse_misses)} (showing {min(args.show, len(collapse_misses))})"
        )
        for o in collapse_misses[: args.show]:
            print("\n".join(explain(o)))
    if failed:
        first = failed[0]
        print(
            f"!!! {len(failed)} queries had a non-200 answer (first: HTTP {first.status}/{first.collapse_status} {first.error}); "
            "they are left out of the figures above"
        )
    degraded = [o for o in ok if o.error]
    if degraded:
        print(f"!!! {len(degraded)} answers had a degraded source (first: {degraded[0].error}); they are counted as they came")
    retried = sum(1 for o in outcomes if o.retried)
    if retried:
        print(f"re-asked one at a time after a degraded source: {retried} queries")
    if not failed and not degraded:
        print(f"errors: none (all {2 * len(outcomes):,} responses were 200, no source timed out or failed)")
    summary = {
        "bench": "temporal",
        "facts": len(facts),
        "versions": versions,
        "entities": args.entities,
        "facts_asked": asked_facts,
        "queries": {"now": table["now"]["n"], "past": table["past as_of"]["n"], "failed": len(failed)},
        "current_at_1": {
            k: round(table[label]["current_at_1"], 4) for k, label in (("now", "now"), ("past", "past as_of"), ("all", "all"))
        },
        "strict_at_1": {
            k: round(table[label]["strict_at_1"], 4) for k, label in (("now", "now"), ("past", "past as_of"), ("all", "all"))
        },
        "collapse": {
            k: round(table[label]["collapse"], 4) for k, label in (("now", "now"), ("past", "past as_of"), ("all", "all"))
        },
        "p50_ms": round(percentile(hist_ms, 50), 2),
        "p50_ms_without_historical": round(percentile(collapse_ms, 50), 2),
        "retried": sum(1 for o in outcomes if o.retried),
        "anchor": day(anchor),
        "seed": args.seed,
        "concurrency": args.concurrency,
        "code": code,
        "measured_at": instant(datetime.now(timezone.utc)),
    }
    print(json.dumps(summary, separators=(",", ":")))
    if args.save:
        args.save.write_text(
            json.dumps(
                [
                    {
                        "slot": o.query.fact.slot,
                        "scenario": o.query.fact.scenario,
                        "when": o.query.when,
                        "as_of": instant(o.query.as_of) if o.query.as_of else None,
                        "expected": o.truth.id if o.truth else None,
                        "status": o.status,
                        "items": [
                            {k: i.get(k) for k in ("id", "entity", "slot", "status", "current", "authority", "found_by")}
                            for i in o.items
                        ],
                        "collapse_items": [
                            {k: i.get(k) for k in ("id", "slot", "status", "current", "authority")} for i in o.collapse_items
                        ],
                    }
                    for o in outcomes
                ]
            )
        )
        print(f"answers written to {args.save}")
    return not failed and not degraded


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--facts", type=int, default=1200, help="facts (slots) to generate (default 1200)")
    parser.add_argument(
        "--entities", type=int, default=ENTITY_COUNT, help=f"entities the facts are spread over (default {ENTITY_COUNT})"
    )
    parser.add_argument("--queries", type=int, help="ask about a random sample of N facts (default: every fact)")
    parser.add_argument(
        "--past", type=int, default=PAST_PER_FACT, help=f"past as_of instants per fact, at most (default {PAST_PER_FACT})"
    )
    parser.add_argument("--seed", type=int, default=SEED, help=f"data and sampling seed (default {SEED})")
    parser.add_argument("--anchor", help="the day the data is laid out around, YYYY-MM-DD (default: today, UTC)")
    parser.add_argument("--concurrency", type=int, default=1, help="concurrent clients (default 1)")
    parser.add_argument("--data", type=Path, help="data directory (default: a fresh temp dir, removed at the end); must be empty")
    parser.add_argument(
        "--show", type=int, default=SHOW_MISMATCHES, help=f"mismatches to print in full (default {SHOW_MISMATCHES})"
    )
    parser.add_argument("--save", type=Path, help="also write every answer (ids, slots, statuses) to this JSON file")
    args = parser.parse_args(argv)
    if (
        args.facts < 1
        or args.entities < 1
        or args.concurrency < 1
        or args.past < 0
        or (args.queries is not None and args.queries < 1)
    ):
        parser.error("--facts, --entities, --queries and --concurrency must be positive, --past not negative")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally blocks stop the server
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    anchor = datetime.strptime(args.anchor, "%Y-%m-%d").replace(tzinfo=timezone.utc) if args.anchor else today
    if anchor > today:
        raise SystemExit("--anchor must not lie in the future")
    entities, facts = generate(args.facts, args.entities, args.seed, anchor)
    items = entities + [item for fact in facts for item in fact_items(fact)]
    queries = build_queries(facts, args.queries, args.seed, anchor, args.past)
    with bench_dir(args.data, "gateway-temporal-") as data_dir:
        if (data_dir / "gateway.db").exists():
            raise SystemExit(f"{data_dir} already holds a store; use a fresh --data dir")
        try:
            ingest_key = create_key(data_dir, LOADER_PRINCIPAL, "ingest", "confidential")
            agent_key = create_key(data_dir, AGENT_PRINCIPAL, "agent", "confidential")
            # Semantic search is off in every request; without a model the service spends no CPU embedding.
            server = Server(data_dir, free_port(), env={"GATEWAY_EMBEDDINGS": "none"}, label="temporal")
            with serving(server):
                code = code_revision()
                print(f"Server ready at {server.url} (log: {server.log_path})", flush=True)
                load = load_through_api(server.url, ingest_key, items)
                print(
                    f"Asking {len(queries):,} (fact, instant) queries, each with and without include_historical, "
                    f"{args.concurrency} client(s)...",
                    flush=True,
                )
                outcomes, wall = asyncio.run(run_queries(server.url, agent_key, queries, args.concurrency))
                versions = sum(len(f.versions) for f in facts)
                return 0 if report(outcomes, facts, versions, args, anchor, load, wall, code) else 1
        except KeyboardInterrupt:
            return interrupted()


if __name__ == "__main__":
    sys.exit(main())
