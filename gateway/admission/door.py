"""The door every governed call passes: its price, the rate quotas, then a turn in the fair queue.

`Admission.enter` prices the call (`quota.Prices`), takes it from the rate quotas when the operator
set any (`quota.Quotas`), and waits for its seats in the fair queue (`fair_queue.FairQueue`). The
`Ticket` it returns is the call's: `holding` (courtesy.py) runs the call under it, and when the call
ends it is settled against what its meter measured (`Admission.settle`) and its seats are given
back (`Ticket.release`).

Limits come from settings; a tenant's own go in the policy's data document
(policies/gateway/config/data.json) under `data.gateway.config.admission.tenants.<tenant>`:
`weight`, `queue`, `concurrency`, `actor_concurrency`, `rate`, `actor_rate`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from core import work
from core.errors import ConfigurationError, RateLimited
from gateway.admission.fair_queue import FairQueue, Seat, Share
from gateway.admission.quota import Prices, Quotas, Rates
from gateway.settings import AdmissionSettings

QUEUE_PER_SEAT = 8  # the units a tenant may have waiting, per seat of capacity, unless set
CROWDED_UNITS = 4  # a tenant with this many units in flight gives way with every call, light ones too


@dataclass(frozen=True, slots=True)
class TenantLimits:
    share: Share
    rates: Rates = Rates()


@dataclass(slots=True)
class Ticket:
    """An admitted call: its price (`cost`), the door's estimate, its seats, and once it has ended
    what it used. `queued_ms` is how long it waited for its turn, `gave_way_ms` how long it waited
    for lighter tenants between its stages (courtesy.py)."""

    admission: Admission | None = None
    seat: Seat | None = None
    tenant: str = ""
    actor: str = ""
    cost: int = 1
    estimate: int = 1
    shape: str = ""
    meter: work.Meter = field(default_factory=work.Meter)
    used: float = 0.0
    queued_ms: float = 0.0
    gave_way_ms: float = 0.0

    @property
    def weight(self) -> int:
        """Units counted in flight for this call: its price, raised as its measured work grows."""
        return self.seat.units if self.seat is not None else self.cost

    def release(self) -> None:
        """Give the call's seats back (once); the next calls in fair order take them."""
        if self.admission is not None and self.seat is not None:
            self.admission.queue.release(self.seat)

    def heavy(self) -> bool:
        """Whether the call is heavy: admitted at more than one unit, or measured at more so far;
        a call that turns out heavy weighs its measured units from then on."""
        if self.admission is None or self.seat is None:
            return False
        units = math.ceil(self.meter.units())
        if units > self.seat.units:
            self.admission.queue.reweigh(self.seat, units)
        return self.seat.units > 1

    def yields(self) -> bool:
        """Whether the call gives way to lighter tenants: it is heavy, or its tenant is crowded
        (CROWDED_UNITS or more in flight: a flood of light calls, which have no heavy stage to wait in)."""
        return self.admission is not None and (self.heavy() or self.admission.crowded(self.tenant))


@dataclass(slots=True)
class Admission:
    defaults: TenantLimits
    overrides: Mapping[str, TenantLimits] = field(default_factory=dict)
    capacity: int = 8
    max_wait_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    background_seats: int = 0  # 0: half the capacity (fair_queue.py)
    queue: FairQueue = field(init=False)
    quotas: Quotas = field(default_factory=Quotas)
    prices: Prices = field(default_factory=Prices)
    _quota_refused: int = 0

    def __post_init__(self) -> None:
        self.queue = FairQueue(
            self.capacity, lambda tenant: self.limits(tenant).share, self.max_wait_s, self.clock, self.background_seats
        )

    def limits(self, tenant: str) -> TenantLimits:
        return self.overrides.get(tenant, self.defaults)

    async def enter(
        self,
        tenant: str,
        actor: str,
        estimate: int,
        shape: str = "",
        left: Callable[[], Awaitable[Any]] | None = None,
        background: bool = False,
    ) -> Ticket:
        """The call's ticket once its turn has come. RateLimited past a rate quota or the queue's
        bounds; fair_queue.Left when `left` returns first (its client went away). A `background`
        batch is priced like a call but takes nothing from the rate quotas (a writer is never
        refused for the service's own work) and waits after calls, inside its share of the seats."""
        price = self.prices.price(tenant, actor, shape, estimate)
        if not background:
            try:
                self.quotas.take(tenant, actor, price, self.limits(tenant).rates, self.clock())
            except RateLimited:
                self._quota_refused += 1
                raise
        seat = self.queue.enter(tenant, actor, price, background=background)
        await self.queue.wait(seat, left)
        return Ticket(self, seat, tenant, actor, price, estimate, shape, queued_ms=seat.waited_s() * 1000)

    def settle(self, ticket: Ticket) -> None:
        """Settle an ended call against what it measured (`ticket.used`, at least one unit): what it
        used teaches the price of the actor's next calls of its shape, and with a rate quota the
        difference from its price is charged to (or given back to) its buckets."""
        now = self.clock()
        limits = self.limits(ticket.tenant)
        self.prices.learn(ticket.tenant, ticket.actor, ticket.shape, ticket.used, self.capacity, now)
        if ticket.seat is not None and ticket.seat.background:
            return  # background work is not taken from the tenant's quotas, nor charged to them after
        self.quotas.settle(ticket.tenant, ticket.actor, ticket.cost, max(1.0, ticket.used), limits.rates, now)

    def crowded(self, tenant: str) -> bool:
        return self.queue.in_flight(tenant) >= CROWDED_UNITS

    def outweighed(self, tenant: str) -> bool:
        return self.queue.outweighed(tenant)

    def saturation(self) -> dict[str, Any]:
        """For /readyz: seats in use against capacity, calls waiting, calls that waited, refusals."""
        state = self.queue.snapshot()
        state["refused"] += self._quota_refused
        return state


def load_admission(settings: AdmissionSettings, document: Mapping[str, Any]) -> Admission:
    """Limits from settings, with per-tenant ones from the policy's config document
    (`admission.tenants`); a malformed entry stops start-up with its name."""
    queue = settings.admission_queue_units or QUEUE_PER_SEAT * settings.admission_capacity
    if queue < settings.admission_capacity:
        raise ConfigurationError("GATEWAY_ADMISSION_QUEUE_UNITS: at least GATEWAY_ADMISSION_CAPACITY, so any call can wait")
    defaults = TenantLimits(
        Share(
            1.0,
            queue,
            settings.admission_tenant_concurrency,
            settings.admission_actor_concurrency,
        ),
        Rates(float(settings.admission_tenant_rate or 0), float(settings.admission_actor_rate or 0)),
    )
    tenants = (document.get("admission") or {}).get("tenants") or {}
    if not isinstance(tenants, dict):
        raise ConfigurationError("data.gateway.config.admission.tenants: expected an object of tenants")
    overrides = {
        str(tenant): _override(defaults, str(tenant), entry, settings.admission_capacity) for tenant, entry in tenants.items()
    }
    background = max(1, math.floor(settings.admission_capacity * settings.admission_background_share))
    return Admission(
        defaults,
        overrides,
        settings.admission_capacity,
        settings.admission_queue_wait_ms / 1000,
        background_seats=background,
    )


KEYS = ("weight", "queue", "concurrency", "actor_concurrency", "rate", "actor_rate")


def _override(defaults: TenantLimits, tenant: str, entry: Any, capacity: int) -> TenantLimits:
    where = f"data.gateway.config.admission.tenants.{tenant}"
    if not isinstance(entry, dict) or set(entry) - set(KEYS):
        raise ConfigurationError(f"{where}: expected any of {', '.join(KEYS)}")
    for name, value in entry.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ConfigurationError(f"{where}.{name}: expected a positive number")
    if entry.get("queue", capacity) < capacity:
        raise ConfigurationError(f"{where}.queue: at least the capacity ({capacity} units), so any call can wait")
    share = replace(
        defaults.share,
        weight=float(entry.get("weight", defaults.share.weight)),
        queue=int(entry.get("queue", defaults.share.queue)),
        concurrency=int(entry["concurrency"]) if "concurrency" in entry else defaults.share.concurrency,
        actor_concurrency=int(entry["actor_concurrency"]) if "actor_concurrency" in entry else defaults.share.actor_concurrency,
    )
    rates = Rates(float(entry.get("rate", defaults.rates.tenant)), float(entry.get("actor_rate", defaults.rates.actor)))
    return TenantLimits(share, rates)
