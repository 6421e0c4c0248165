"""Admission: how much work each actor and each tenant may have in flight, and start per second.

Every authenticated call has a price in units. The door estimates it (1 for a light call, more for a
deep or entity-heavy graph walk, a large budget, synthesis, a long query; `retrieve_cost`), and
the price is the larger of that estimate and what the actor's recent calls of the same shape
measured (`Admission.admit`, `_price`). Each actor and each tenant has a concurrency limit (units in
flight at once) and a token bucket (units per second, with a burst of one second's worth). A call
past either gets 429 `rate_limited` with `Retry-After`, is audited like any refusal, and costs the
gateway almost nothing: one tenant's flood is turned away at the door instead of queueing for the
cores another tenant needs. `/readyz` reports saturation (units in flight against the process's
capacity) instead of staying green.

While a call runs, a meter (core/work.py) measures what it does; when it ends it is settled
(`Admission.settle`): what it used beyond its price is taken from its buckets, which may owe up to
DEBT_SECONDS of their rate, and a price above its use is given back down to one unit.

Admission bounds how much work a tenant has in flight; it cannot make that work polite. On a
machine with few cores, a flooding tenant's admitted calls still compete for the interpreter with
another tenant's. So a call gives way at its stage boundaries (`give_way`) when it is heavy (priced
or measured above one unit) or its tenant is crowded (CROWDED_UNITS in flight): while a tenant with
fewer units in flight has calls running, it waits a few milliseconds at a time (at most
COURTESY_MAX_S per boundary, DOOR_COURTESY_MAX_S before it starts) and the trace records how long.
A tenant with fewer units in flight never waits, nor do tenants with equal work in flight.

Limits come from settings; a tenant's own can be set in the policy's data document
(policies/gateway/config/data.json) under `data.gateway.config.admission.tenants.<tenant>`
(`concurrency`, `rate`, and the per-actor `actor_concurrency`, `actor_rate`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from connectors.sql.cancel import pausing
from core import work
from core.errors import ConfigurationError, RateLimited
from core.request import RetrieveRequest
from gateway.settings import AdmissionSettings

COURTESY_STEP_S = 0.005  # how often a heavy call that gives way looks again
COURTESY_MAX_S = 0.05  # the longest it waits at one stage boundary
DOOR_COURTESY_MAX_S = 0.25  # the longest a crowded tenant's call waits before it starts (`give_way` at the door)
IDLE_SECONDS = 300  # a bucket nobody used for this long is forgotten (bounded memory under many actors)
CROWDED_UNITS = 4  # a tenant with this many units in flight gives way with every call, light ones too
DEBT_SECONDS = 10  # the most a bucket can owe for calls that used more than they were admitted at
LONG_QUERY_CHARS = 1_000  # a retrieve costs a unit more per this many characters of query


@dataclass(frozen=True, slots=True)
class Limits:
    concurrency: int  # units in flight at once
    rate: float  # units per second; the burst is one second's worth (at least one call's cost)


@dataclass(frozen=True, slots=True)
class TenantLimits:
    tenant: Limits
    actor: Limits


@dataclass(slots=True)
class _Bucket:
    limits: Limits
    tokens: float
    stamp: float
    in_flight: int = 0

    def refill(self, now: float) -> None:
        self.tokens = min(self.limits.rate, self.tokens + (now - self.stamp) * self.limits.rate)
        self.stamp = now

    def refusal(self, cost: int) -> tuple[str, float] | None:
        """Why this bucket cannot take `cost` now, and in how many seconds it could; None if it can.
        A call larger than the limits themselves is let through alone, never refused forever."""
        if self.in_flight and self.in_flight + cost > self.limits.concurrency:
            return "concurrency", 1.0
        needed = min(cost, self.limits.rate)
        if self.tokens < needed:
            return "rate", (needed - self.tokens) / self.limits.rate
        return None


@dataclass(slots=True)
class Ticket:
    """An admitted call's units; `release` gives them back when the call ends (once). `gave_way_ms`
    is how long the call waited for lighter tenants (`give_way`)."""

    release: Callable[[], None]
    admission: Admission | None = None
    tenant: str = ""
    cost: int = 1
    gave_way_ms: float = 0.0
    actor: str = ""
    meter: work.Meter = field(default_factory=work.Meter)
    weight: int = 0  # units counted in flight for this call: its cost, raised as its measured work grows
    used: float = 0.0  # measured units, once the call has ended
    estimate: int = 1  # the door's estimate; `cost` is the price, the estimate or what the shape measured lately
    shape: str = ""

    def heavy(self) -> bool:
        """Whether the call is heavy: admitted at more than one unit, or measured at more so far;
        a call that turns out heavy weighs its measured units from then on (`reweigh`)."""
        if self.admission is None:
            return False
        units = math.ceil(self.meter.units())
        if units > self.weight:
            self.admission.reweigh(self, units)
        return self.weight > 1

    def yields(self) -> bool:
        """Whether the call gives way to lighter tenants: it is heavy, or its tenant is crowded
        (CROWDED_UNITS or more in flight: a flood of light calls, which have no heavy stage to wait in)."""
        return self.admission is not None and (self.heavy() or self.admission.crowded(self.tenant))


_HELD: ContextVar[Ticket | None] = ContextVar("gateway_admission_ticket", default=None)


@contextmanager
def holding(ticket: Ticket) -> Iterator[Ticket]:
    """The block runs as the ticket's call (`give_way` reads it), and gives the units back after. A
    heavy call's SQLite statements give way too, from inside (connectors/sql/cancel.py `pausing`)."""
    token = _HELD.set(ticket)
    try:
        with work.metering(ticket.meter):
            if ticket.admission is not None:
                with pausing(lambda: _wait_sync(ticket)):
                    yield ticket
            else:
                yield ticket
    finally:
        _HELD.reset(token)
        ticket.release()
        ticket.used = ticket.meter.units()
        if ticket.admission is not None:
            ticket.admission.settle(ticket)


def _wait_sync(ticket: Ticket) -> None:
    """`give_way` for a worker thread (a running statement): sleeps instead of awaiting."""
    assert ticket.admission is not None
    if not ticket.yields():
        return
    started = time.perf_counter()
    while ticket.admission.outweighed(ticket.tenant) and time.perf_counter() - started < COURTESY_MAX_S:
        time.sleep(COURTESY_STEP_S)
    waited = (time.perf_counter() - started) * 1000
    if waited >= 1:
        ticket.gave_way_ms += waited  # approximate under concurrent sources: a report, not a limit


async def give_way(longest_s: float = COURTESY_MAX_S) -> None:
    """At a stage boundary of a call that yields (heavy, or of a crowded tenant): wait while a tenant
    with fewer units in flight has calls running, a few milliseconds at a time and at most
    `longest_s`, so the interpreter serves that tenant first. Other calls, and calls outside
    admission, go on at once."""
    ticket = _HELD.get()
    if ticket is None or ticket.admission is None or not ticket.yields():
        return
    started = time.perf_counter()
    while ticket.admission.outweighed(ticket.tenant) and time.perf_counter() - started < longest_s:
        await anyio.sleep(COURTESY_STEP_S)
    ticket.gave_way_ms += (time.perf_counter() - started) * 1000


@dataclass(slots=True)
class Admission:
    defaults: TenantLimits
    overrides: Mapping[str, TenantLimits] = field(default_factory=dict)
    capacity: int = 64  # units in flight across the process before /readyz says saturated
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[tuple[str, str], _Bucket] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _in_flight: int = 0
    _tenants: dict[str, int] = field(default_factory=dict)  # units in flight per tenant with calls running
    _refused: int = 0
    _swept: float = 0.0
    _learned: dict[tuple[str, str, str], tuple[float, float]] = field(default_factory=dict)  # (mean units, when)

    def limits(self, tenant: str) -> TenantLimits:
        return self.overrides.get(tenant, self.defaults)

    def admit(self, tenant: str, actor: str, cost: int, shape: str = "") -> Ticket:
        """Take the call's price from the tenant's and the actor's buckets, or raise RateLimited. The
        price is `cost`, the estimate, or what this actor's calls of the same `shape` (an endpoint
        and its estimate) measured lately, whichever is more (`price`)."""
        now = self.clock()
        limits = self.limits(tenant)
        with self._lock:
            self._sweep(now)
            estimate, cost = cost, max(cost, self._price(tenant, actor, shape))
            buckets = (self._bucket(("tenant", tenant), limits.tenant, now), self._bucket((tenant, actor), limits.actor, now))
            for scope, bucket in zip(("tenant", "actor"), buckets):
                bucket.refill(now)
                refusal = bucket.refusal(cost)
                if refusal is not None:
                    self._refused += 1
                    why, seconds = refusal
                    raise RateLimited(f"too many calls: the {scope}'s {why} limit", retry_after=max(1, math.ceil(seconds)))
            for bucket in buckets:
                bucket.tokens -= min(cost, bucket.limits.rate)
                bucket.in_flight += cost
            self._in_flight += cost
            self._tenants[tenant] = self._tenants.get(tenant, 0) + cost
        ticket = Ticket(lambda: None, self, tenant, cost, actor=actor, weight=cost, estimate=estimate, shape=shape)
        released = False

        def release() -> None:
            nonlocal released
            with self._lock:
                if released:
                    return
                released = True
                for bucket in buckets:
                    bucket.in_flight -= cost
                self._in_flight -= cost
                left = self._tenants[tenant] - ticket.weight
                if left > 0:
                    self._tenants[tenant] = left
                else:
                    del self._tenants[tenant]

        ticket.release = release
        return ticket

    def reweigh(self, ticket: Ticket, units: int) -> None:
        """A running call measured heavier than it was admitted at weighs its measured units in its
        tenant's share of the work in flight (what `outweighed` compares); its buckets are settled
        when it ends."""
        with self._lock:
            if units <= ticket.weight or ticket.tenant not in self._tenants:
                return
            self._tenants[ticket.tenant] += units - ticket.weight
            ticket.weight = units

    def settle(self, ticket: Ticket) -> None:
        """Settle an ended call against what it measured (`ticket.used`, at least one unit): the
        difference from its price is charged to (or, for a call priced above its use, given back to)
        its tenant's and actor's buckets, at most one second of a bucket's rate for one call; a
        bucket may owe up to DEBT_SECONDS of its rate, and until refilled its next calls get 429
        with a Retry-After of when they could run. What it used (at most the actor's concurrency)
        also teaches the price of the actor's next calls of its shape."""
        used = max(1.0, ticket.used)
        now = self.clock()
        limits = self.limits(ticket.tenant)
        with self._lock:
            # One call teaches at most the actor's concurrency (a price past it already runs alone), so
            # an outlier (a store's first request-time analysis) is forgotten within a few calls.
            key = (ticket.tenant, ticket.actor, ticket.shape)
            learned = self._learned.get(key)
            taught = min(used, float(limits.actor.concurrency))
            self._learned[key] = (taught if learned is None else (learned[0] + taught) / 2, now)
            for bucket_key, bucket_limits in (
                (("tenant", ticket.tenant), limits.tenant),
                ((ticket.tenant, ticket.actor), limits.actor),
            ):
                bucket = self._bucket(bucket_key, bucket_limits, now)
                bucket.refill(now)
                # One call owes at most one second of the bucket's rate; many heavy calls, up to DEBT_SECONDS.
                extra = min(used, ticket.cost + bucket.limits.rate) - ticket.cost
                bucket.tokens = min(bucket.limits.rate, max(-DEBT_SECONDS * bucket.limits.rate, bucket.tokens - extra))

    def _price(self, tenant: str, actor: str, shape: str) -> int:
        """What the actor's recent calls of this shape measured (a running mean, halving the weight
        of each older call), in whole units; 0 when none was seen lately."""
        learned = self._learned.get((tenant, actor, shape))
        return 0 if learned is None else math.floor(learned[0])

    def crowded(self, tenant: str) -> bool:
        with self._lock:
            return self._tenants.get(tenant, 0) >= CROWDED_UNITS

    def outweighed(self, tenant: str) -> bool:
        """Whether another tenant with fewer units in flight than `tenant` has calls running."""
        with self._lock:
            mine = self._tenants.get(tenant, 0)
            return any(units < mine for other, units in self._tenants.items() if other != tenant)

    def _bucket(self, key: tuple[str, str], limits: Limits, now: float) -> _Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(limits, limits.rate, now)
        return bucket

    def _sweep(self, now: float) -> None:
        if now - self._swept < IDLE_SECONDS:
            return
        self._swept = now
        for key in [k for k, b in self._buckets.items() if not b.in_flight and now - b.stamp > IDLE_SECONDS]:
            del self._buckets[key]
        for shape in [k for k, (_, when) in self._learned.items() if now - when > IDLE_SECONDS]:
            del self._learned[shape]

    def saturation(self) -> dict[str, Any]:
        """For /readyz: units in flight against capacity, and refusals so far."""
        with self._lock:
            return {
                "in_flight": self._in_flight,
                "capacity": self.capacity,
                "saturated": self._in_flight >= self.capacity,
                "refused": self._refused,
            }


def retrieve_cost(request: RetrieveRequest, default_budget: int) -> int:
    """What a retrieve is estimated to cost at the door, in admission units: 1, plus 3 for a deep
    walk, 1 for a deep graph (depth 3 or more than 5 entities to walk from), 1 for a budget over
    twice the default, 2 for synthesis (a model call), and 1 per LONG_QUERY_CHARS of query after the
    first. At the default actor limit (8 units) one actor runs one deep graph walk at a time (5
    units) beside a few light calls. The call is settled against what it measured when it ends."""
    cost = 1 + len(request.query or "") // LONG_QUERY_CHARS
    if request.depth == "deep":
        cost += 3
    if (request.graph.max_depth or 0) >= 3 or len(request.entities) > 5:
        cost += 1
    if request.budget is not None and request.budget.bytes > 2 * default_budget:
        cost += 1
    if request.synthesize:
        cost += 2
    return cost


def load_admission(settings: AdmissionSettings, document: Mapping[str, Any]) -> Admission:
    """Limits from settings, with per-tenant ones from the policy's config document
    (`admission.tenants`); a malformed entry stops start-up with its name."""
    defaults = TenantLimits(
        Limits(settings.admission_tenant_concurrency, float(settings.admission_tenant_rate)),
        Limits(settings.admission_actor_concurrency, float(settings.admission_actor_rate)),
    )
    overrides: dict[str, TenantLimits] = {}
    tenants = (document.get("admission") or {}).get("tenants") or {}
    if not isinstance(tenants, dict):
        raise ConfigurationError("data.gateway.config.admission.tenants: expected an object of tenants")
    for tenant, entry in tenants.items():
        overrides[tenant] = _override(defaults, str(tenant), entry)
    return Admission(defaults, overrides, settings.admission_capacity)


def _override(defaults: TenantLimits, tenant: str, entry: Any) -> TenantLimits:
    if not isinstance(entry, dict) or set(entry) - {"concurrency", "rate", "actor_concurrency", "actor_rate"}:
        raise ConfigurationError(
            f"data.gateway.config.admission.tenants.{tenant}: expected concurrency, rate, actor_concurrency, actor_rate"
        )
    for name, value in entry.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ConfigurationError(f"data.gateway.config.admission.tenants.{tenant}.{name}: expected a positive number")
    tenant_limits = replace(
        defaults.tenant,
        concurrency=int(entry.get("concurrency", defaults.tenant.concurrency)),
        rate=float(entry.get("rate", defaults.tenant.rate)),
    )
    actor_limits = replace(
        defaults.actor,
        concurrency=int(entry.get("actor_concurrency", defaults.actor.concurrency)),
        rate=float(entry.get("actor_rate", defaults.actor.rate)),
    )
    return TenantLimits(tenant_limits, actor_limits)
