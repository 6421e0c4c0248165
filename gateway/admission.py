"""Admission: how much work each actor and each tenant may have in flight, and start per second.

Every authenticated call costs units: 1 for a light call, more for heavy ones (a deep or
entity-heavy graph walk, a large budget, synthesis; `retrieve_cost`). Each actor and each tenant
has a concurrency limit (units in flight at once) and a token bucket (units per second, with a
burst of one second's worth). A call past either gets 429 `rate_limited` with `Retry-After`, is
audited like any refusal, and costs the gateway almost nothing: one tenant's flood is turned away
at the door instead of queueing for the cores another tenant needs. `/readyz` reports saturation
(units in flight against the process's capacity) instead of staying green.

Limits come from settings; a tenant's own can be set in the policy's data document
(policies/gateway/config/data.json) under `data.gateway.config.admission.tenants.<tenant>`
(`concurrency`, `rate`, and the per-actor `actor_concurrency`, `actor_rate`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from core.errors import ConfigurationError, RateLimited
from core.request import RetrieveRequest
from gateway.settings import Settings

IDLE_SECONDS = 300  # a bucket nobody used for this long is forgotten (bounded memory under many actors)


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


@dataclass(frozen=True, slots=True)
class Ticket:
    """An admitted call's units; `release` gives them back when the call ends (once)."""

    release: Callable[[], None]


@dataclass(slots=True)
class Admission:
    defaults: TenantLimits
    overrides: Mapping[str, TenantLimits] = field(default_factory=dict)
    capacity: int = 64  # units in flight across the process before /readyz says saturated
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[tuple[str, str], _Bucket] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _in_flight: int = 0
    _refused: int = 0
    _swept: float = 0.0

    def limits(self, tenant: str) -> TenantLimits:
        return self.overrides.get(tenant, self.defaults)

    def admit(self, tenant: str, actor: str, cost: int) -> Ticket:
        """Take `cost` units from the tenant's and the actor's buckets, or raise RateLimited."""
        now = self.clock()
        limits = self.limits(tenant)
        with self._lock:
            self._sweep(now)
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

        return Ticket(release)

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

    def saturation(self) -> dict[str, Any]:
        """For /readyz: units in flight against capacity, and refusals so far."""
        with self._lock:
            return {"in_flight": self._in_flight, "capacity": self.capacity, "saturated": self._in_flight >= self.capacity,
                    "refused": self._refused}


def retrieve_cost(request: RetrieveRequest, default_budget: int) -> int:
    """What a retrieve costs in admission units: 1, plus 3 for a deep walk, 1 for a deep graph
    (depth 3 or more than 5 entities to walk from), 1 for a budget over twice the default, 2 for
    synthesis (a model call). At the default actor limit (8 units) one actor runs one deep graph
    walk at a time (5 units) beside a few light calls."""
    cost = 1
    if request.depth == "deep":
        cost += 3
    if (request.graph.max_depth or 0) >= 3 or len(request.entities) > 5:
        cost += 1
    if request.budget is not None and request.budget.bytes > 2 * default_budget:
        cost += 1
    if request.synthesize:
        cost += 2
    return cost


def load_admission(settings: Settings, document: Mapping[str, Any]) -> Admission:
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
        raise ConfigurationError(f"data.gateway.config.admission.tenants.{tenant}: expected concurrency, rate, actor_concurrency, actor_rate")
    for name, value in entry.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ConfigurationError(f"data.gateway.config.admission.tenants.{tenant}.{name}: expected a positive number")
    tenant_limits = replace(defaults.tenant, concurrency=int(entry.get("concurrency", defaults.tenant.concurrency)),
                            rate=float(entry.get("rate", defaults.tenant.rate)))
    actor_limits = replace(defaults.actor, concurrency=int(entry.get("actor_concurrency", defaults.actor.concurrency)),
                           rate=float(entry.get("actor_rate", defaults.actor.rate)))
    return TenantLimits(tenant_limits, actor_limits)
