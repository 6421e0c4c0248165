"""Rate quotas and learned prices: what a call costs in admission units, and how many an actor or a
tenant may start per second when the operator set a rate.

A call's price is the larger of the door's estimate (`retrieve_cost` for a retrieve, 1 for most
calls) and what the actor's recent calls of the same shape (an endpoint and its estimate) measured
(`Prices`). A rate quota is a token bucket of units per second with a burst of one second's worth
(`Quotas`); it is off (0) unless the operator sets one, because the fair queue, not a rate, is what
shares the service: a quota is a contract ("this tenant may start 200 units a second"), and a call
past it is refused at once with the Retry-After of when the bucket is back. Each ended call is
settled against what it measured: its use beyond its price is taken from its buckets, which may owe
up to DEBT_SECONDS of their rate.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from core.errors import RateLimited
from core.request import RetrieveRequest

IDLE_SECONDS = 300  # a bucket or price nobody used for this long is forgotten (bounded memory under many actors)
DEBT_SECONDS = 10  # the most a bucket can owe for calls that used more than they were admitted at
LONG_QUERY_CHARS = 1_000  # a retrieve costs a unit more per this many characters of query


@dataclass(frozen=True, slots=True)
class Rates:
    """Units per second a tenant and each of its actors may start; 0 means no quota."""

    tenant: float = 0.0
    actor: float = 0.0


@dataclass(slots=True)
class _Bucket:
    rate: float
    tokens: float
    stamp: float

    def refill(self, now: float) -> None:
        self.tokens = min(self.rate, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now


@dataclass(slots=True)
class Quotas:
    """Token buckets per tenant and per (tenant, actor), only for the rates that are set."""

    _buckets: dict[tuple[str, str], _Bucket] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _swept: float = 0.0

    def take(self, tenant: str, actor: str, cost: int, rates: Rates, now: float) -> None:
        """Take `cost` units from the tenant's and the actor's buckets, or raise RateLimited (nothing taken)."""
        with self._lock:
            self._sweep(now)
            buckets = list(self._buckets_of(tenant, actor, rates, now))
            for scope, bucket in buckets:
                bucket.refill(now)
                needed = min(cost, bucket.rate)  # a call larger than a second's worth runs on a full bucket
                if bucket.tokens < needed:
                    seconds = (needed - bucket.tokens) / bucket.rate
                    raise RateLimited(f"too many calls: the {scope}'s rate quota", retry_after=max(1, math.ceil(seconds)))
            for _, bucket in buckets:
                bucket.tokens -= min(cost, bucket.rate)

    def settle(self, tenant: str, actor: str, price: int, used: float, rates: Rates, now: float) -> None:
        """Charge (or give back, down to one unit) the difference between a call's use and its price:
        at most one second of a bucket's rate for one call, at most DEBT_SECONDS owed in all."""
        with self._lock:
            for _, bucket in self._buckets_of(tenant, actor, rates, now):
                bucket.refill(now)
                extra = min(used, price + bucket.rate) - price
                bucket.tokens = min(bucket.rate, max(-DEBT_SECONDS * bucket.rate, bucket.tokens - extra))

    def _buckets_of(self, tenant: str, actor: str, rates: Rates, now: float) -> Iterator[tuple[str, _Bucket]]:
        for scope, key, rate in (("tenant", ("tenant", tenant), rates.tenant), ("actor", (tenant, actor), rates.actor)):
            if rate <= 0:
                continue
            bucket = self._buckets.get(key)
            if bucket is None or bucket.rate != rate:
                bucket = self._buckets[key] = _Bucket(rate, rate, now)
            yield scope, bucket

    def _sweep(self, now: float) -> None:
        if now - self._swept < IDLE_SECONDS:
            return
        self._swept = now
        for key in [k for k, b in self._buckets.items() if now - b.stamp > IDLE_SECONDS]:
            del self._buckets[key]


@dataclass(slots=True)
class Prices:
    """What each actor's calls of each shape measured lately: a running mean, halving the weight of
    each older call; one call teaches at most `most` units (a price past the capacity already runs
    alone), so an outlier (a store's first request-time analysis) is forgotten within a few calls."""

    _learned: dict[tuple[str, str, str], tuple[float, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _swept: float = 0.0

    def price(self, tenant: str, actor: str, shape: str, estimate: int) -> int:
        with self._lock:
            learned = self._learned.get((tenant, actor, shape))
        return max(estimate, 0 if learned is None else math.floor(learned[0]))

    def learn(self, tenant: str, actor: str, shape: str, used: float, most: int, now: float) -> None:
        taught = min(max(1.0, used), float(most))
        with self._lock:
            if now - self._swept >= IDLE_SECONDS:
                self._swept = now
                for key in [k for k, (_, when) in self._learned.items() if now - when > IDLE_SECONDS]:
                    del self._learned[key]
            learned = self._learned.get((tenant, actor, shape))
            self._learned[(tenant, actor, shape)] = (taught if learned is None else (learned[0] + taught) / 2, now)


def retrieve_cost(request: RetrieveRequest, default_budget: int) -> int:
    """What a retrieve is estimated to cost at the door, in admission units: 1, plus 3 for a deep
    walk, 1 for a deep graph (depth 3 or more than 5 entities to walk from), 1 for a budget over
    twice the default, 2 for synthesis (a model call), and 1 per LONG_QUERY_CHARS of query after the
    first. The call is settled against what it measured when it ends."""
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
