"""Fair queuing for the process's seats: a lone tenant may use them all, contending tenants share them.

After Kubernetes API Priority and Fairness. The process has `capacity` seats: admission units in
flight at once. A call asks for its price in seats (at most `capacity`, so no call waits forever)
and joins a queue of its tenant, inside it a queue of its actor (first come, first served per
actor). Whenever a call arrives or seats free up, calls are taken in fair order: from the tenant
with the fewest units in flight for its weight, and inside it from the actor with the fewest units
in flight; ties go to the call that came first. The fairest call runs when

- its tenant has nothing in flight (a tenant's first call never waits for another tenant's), or
- its tenant stays inside its fair share: `capacity × weight / Σ weights` of the tenants with calls
  running or waiting, or
- the seats are free for it;

and it stays under its tenant's and its actor's caps when the operator set any. Otherwise it waits,
and so does every call behind it in fair order (a heavy call is not overtaken forever by light ones).
The share rule is what keeps a quiet tenant's latency: a tenant flooding every seat does not make
another tenant's next call wait for one of them to end; the flood's own next calls wait instead,
until the seats in use fall back under `capacity`. Seats in use therefore exceed `capacity` by at
most each other tenant's share while a flood drains.

A call is refused (429, `RateLimited`) only past the queue's bounds: when its tenant already has
`queue` units waiting (then the newest call of the tenant's actor with the most waiting is refused,
which is the newcomer unless another actor of the tenant is flooding), or when it has waited
`max_wait_s`. Its `Retry-After` is how long the tenant's queue takes to drain at the rate the
tenant's own calls held seats lately (another tenant's long calls never tell it to wait longer). A waiting call whose client leaves is taken out of the queue, and a call granted
seats at the moment it was cancelled gives them back.

Calls measured heavier than their price weigh their measured units from then on (`reweigh`): a
tenant whose cheap-looking calls turn out heavy holds more of its share, and waits sooner.

Background work (embedding and analysing what a tenant wrote; gateway/admission/gate.py) comes
after calls. A background batch asks for seats as `background=True`: it waits in a queue of its own
(never in its tenant's, so it takes no room a call could wait in, and it is never refused), and it
is granted only when no waiting call wants the seats (the fair order found no call to wait for),
the seats are free for it, and background work in all would hold at most `background_seats` (half
the capacity by default). Calls do not count background seats: a call arriving while batches run
starts as if they were not there, and the batches' next turn waits until calls leave seats free.
Between tenants, the batch of the tenant with the fewest background units in flight goes first.
Seats in use therefore exceed `capacity` by at most `background_seats` while batches end.
All state is in memory, per process, under one lock (`reweigh` is called from worker threads);
grants are made on the event loop (`enter`, `release`, `wait`).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from core.errors import RateLimited

UNIT_SECONDS_START = 0.05  # seconds a unit holds a seat, before any call has ended
UNIT_SECONDS_WEIGHT = 0.1  # how much each ended call moves that estimate
UNIT_TENANTS = 10_000  # tenants whose seat time is remembered for their Retry-After
LINGER_S = 0.05  # a tenant whose last call ended this recently still counts as running, for courtesy


@dataclass(frozen=True, slots=True)
class Share:
    """How one tenant is served: its weight against other tenants, the units it may have waiting,
    and optional caps on the units it and each of its actors may have in flight (None: no cap)."""

    weight: float = 1.0
    queue: int = 64
    concurrency: int | None = None
    actor_concurrency: int | None = None


class Left(Exception):
    """The client went away while its call waited for seats."""


@dataclass(eq=False, slots=True)
class Seat:
    """One call's place: waiting in its queue, then holding `units` seats until released."""

    tenant: str
    actor: str
    cost: int
    seq: int
    since: float
    background: bool = False  # a batch of background work: after calls, inside its share (see above)
    event: anyio.Event = field(default_factory=anyio.Event)
    units: int = 0  # seats held once granted: the cost, raised by `reweigh`
    granted_at: float | None = None
    refused: RateLimited | None = None
    released: bool = False

    def waited_s(self) -> float:
        return (self.granted_at if self.granted_at is not None else self.since) - self.since


def _take(counts: dict[str, int], key: str, units: int) -> None:
    """Units given back from `counts[key]`; the key goes when none are left."""
    left = counts[key] - units
    if left > 0:
        counts[key] = left
    else:
        del counts[key]


@dataclass(slots=True)
class _Tenant:
    share: Share
    in_flight: int = 0
    queued: int = 0
    queues: dict[str, deque[Seat]] = field(default_factory=dict)
    actors_in_flight: dict[str, int] = field(default_factory=dict)

    def head_seq(self) -> int:
        return min(q[0].seq for q in self.queues.values() if q)

    def idle(self) -> bool:
        return not self.in_flight and not self.queued


@dataclass(slots=True)
class FairQueue:
    capacity: int
    share: Callable[[str], Share]
    max_wait_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    background_seats: int = 0  # 0: half the capacity; always at least one, at most the capacity
    _tenants: dict[str, _Tenant] = field(default_factory=dict)
    _in_flight: int = 0  # calls' units; background units are counted apart
    _background: int = 0
    _background_of: dict[str, int] = field(default_factory=dict)  # tenant -> background units in flight
    _background_waiting: list[Seat] = field(default_factory=list)
    # How long a unit of each tenant's calls held a seat lately (its Retry-After), the most recent
    # UNIT_TENANTS tenants kept: a tenant's state goes when it is idle, this stays between calls.
    _unit_s: dict[str, float] = field(default_factory=dict)
    _seq: int = 0
    _refused: int = 0
    _waited: int = 0
    _recent: dict[str, float] = field(default_factory=dict)  # tenants gone idle lately, and when
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.background_seats = max(1, min(self.background_seats or self.capacity // 2, self.capacity))

    # ------------------------------------------------------------------ a call's way through

    def enter(self, tenant: str, actor: str, cost: int, background: bool = False) -> Seat:
        """Queue a call for `cost` seats and take calls in fair order: the returned seat may be
        granted already (`granted_at` set). RateLimited when the tenant's queue is full of this
        actor's own calls. With `background`, a batch of background work: queued apart, after calls
        and inside `background_seats` (at most that many units), never refused."""
        if background:
            with self._lock:
                self._seq += 1
                seat = Seat(tenant, actor, max(1, min(cost, self.background_seats)), self._seq, self.clock(), background=True)
                self._background_waiting.append(seat)
                self._dispatch(seat.since)
            return seat
        cost = max(1, min(cost, self.capacity))
        with self._lock:
            state = self._tenants.get(tenant)
            if state is None:
                state = self._tenants[tenant] = _Tenant(self.share(tenant))
            self._seq += 1
            seat = Seat(tenant, actor, cost, self._seq, self.clock())
            if not self._make_room(state, actor, cost):
                self._refused += 1
                self._forget_if_idle(tenant)
                raise self._refusal(tenant, state, f"too many calls waiting: the tenant's queue holds {state.share.queue} units")
            state.queues.setdefault(actor, deque()).append(seat)
            state.queued += cost
            self._dispatch(seat.since)
        return seat

    async def wait(self, seat: Seat, left: Callable[[], Awaitable[Any]] | None = None) -> None:
        """Until `seat` is granted. RateLimited past `max_wait_s` (or when a newer call of a less
        crowded actor took its place), Left when `left` returns first (the client went away)."""
        gone = finished = False
        if seat.granted_at is None and seat.refused is None:
            # A batch of background work waits as long as calls keep the seats: it is never refused.
            bound = math.inf if seat.background else max(0.0, seat.since + self.max_wait_s - self.clock())
            try:
                with anyio.move_on_after(bound):
                    if left is None:
                        await seat.event.wait()
                    else:
                        async with anyio.create_task_group() as group:

                            async def granted() -> None:
                                await seat.event.wait()
                                group.cancel_scope.cancel()

                            async def leaving() -> None:
                                nonlocal gone
                                try:
                                    await left()
                                except Exception:  # a channel that cannot be read counts as gone
                                    pass
                                gone = True
                                group.cancel_scope.cancel()

                            group.start_soon(granted)
                            group.start_soon(leaving)
                finished = True
            finally:
                self._leave_queue(seat, keep=finished and not gone)
        if gone:
            raise Left()
        if seat.refused is not None:
            raise seat.refused

    def release(self, seat: Seat) -> None:
        """Give a granted call's seats back (once) and take the next calls in fair order."""
        with self._lock:
            if seat.released or seat.granted_at is None:
                return
            seat.released = True
            if not seat.background:  # how long the tenant's calls hold seats, for its Retry-After
                held = self.clock() - seat.granted_at
                unit_s = self._unit_s.pop(seat.tenant, UNIT_SECONDS_START)
                self._unit_s[seat.tenant] = unit_s + UNIT_SECONDS_WEIGHT * (held / max(1, seat.cost) - unit_s)
                if len(self._unit_s) > UNIT_TENANTS:
                    del self._unit_s[next(iter(self._unit_s))]  # the tenant whose call ended longest ago
            self._give_back(seat)
            self._dispatch()

    def reweigh(self, seat: Seat, units: int) -> None:
        """A running call measured at more units than it holds weighs them from now on."""
        with self._lock:
            state = self._tenants.get(seat.tenant)
            if seat.background or seat.released or seat.granted_at is None or state is None or units <= seat.units:
                return  # a batch of background work holds its share and no more
            extra = units - seat.units
            seat.units = units
            state.in_flight += extra
            state.actors_in_flight[seat.actor] = state.actors_in_flight.get(seat.actor, 0) + extra
            self._in_flight += extra

    # ------------------------------------------------------------------ what others read

    def in_flight(self, tenant: str) -> int:
        with self._lock:
            state = self._tenants.get(tenant)
            return state.in_flight if state else 0

    def outweighed(self, tenant: str) -> bool:
        """Whether another tenant with fewer units in flight has calls running, or had one within
        LINGER_S (a client calling one call after another is between two of them, not gone): what
        a busier tenant's calls give way to (gateway/admission/courtesy.py)."""
        with self._lock:
            mine = self._tenants[tenant].in_flight if tenant in self._tenants else 0
            if any(0 < s.in_flight < mine for other, s in self._tenants.items() if other != tenant):
                return True
            if not mine:
                return False
            now = self.clock()
            return any(
                other != tenant and other not in self._tenants and now - ended <= LINGER_S
                for other, ended in self._recent.items()
            )

    def snapshot(self) -> dict[str, Any]:
        """For /readyz and the operator: seats in use against capacity, calls waiting, refusals so far."""
        with self._lock:
            queued = sum(s.queued for s in self._tenants.values())
            return {
                "in_flight": self._in_flight,
                "capacity": self.capacity,
                # Busy is not saturated: every seat taken with calls waiting is a queue doing its job.
                # Saturated is a full queue's worth waiting (the default tenant's bound), across tenants.
                "saturated": queued >= self.share("").queue,
                "queued": queued,
                "waiting_calls": sum(len(q) for s in self._tenants.values() for q in s.queues.values()),
                "waited": self._waited,
                "refused": self._refused,
                "background_in_flight": self._background,
                "background_seats": self.background_seats,
                "background_waiting": len(self._background_waiting),
            }

    # ------------------------------------------------------------------ under the lock

    def _dispatch(self, now: float | None = None) -> None:
        """Grant waiting calls in fair order while the fairest one that its caps allow fits; then,
        when no call waits for seats, background batches that fit in the free seats and their share."""
        now = self.clock() if now is None else now
        if self._dispatch_calls(now):
            self._dispatch_background(now)

    def _dispatch_calls(self, now: float) -> bool:
        """Grant calls in fair order; False when the fairest call waits for seats (it wants them)."""
        while True:
            ready = sorted(
                (s for s in self._tenants.values() if s.queued),
                key=lambda s: (s.in_flight / s.share.weight, s.head_seq()),
            )
            for state in ready:
                seat = self._next_of(state)
                if seat is None:
                    continue  # every actor of this tenant is at a cap: the next tenant may go
                if not self._fits(state, seat.cost):
                    return False  # the fairest call waits for seats, and everything behind it
                self._grant(state, seat, now)
                break
            else:
                return True  # nothing waits, or only calls held back by their caps, not by seats

    def _dispatch_background(self, now: float) -> None:
        """Grant background batches, the tenant with the fewest background units in flight first,
        while one fits in the seats calls left free and in the background's share."""
        while self._background_waiting:
            seat = min(self._background_waiting, key=lambda s: (self._background_of.get(s.tenant, 0), s.seq))
            in_use = self._in_flight + self._background
            if in_use + seat.cost > self.capacity or self._background + seat.cost > self.background_seats:
                return
            self._background_waiting.remove(seat)
            seat.units = seat.cost
            seat.granted_at = max(now, seat.since)
            self._background += seat.units
            self._background_of[seat.tenant] = self._background_of.get(seat.tenant, 0) + seat.units
            seat.event.set()

    def _next_of(self, state: _Tenant) -> Seat | None:
        """The tenant's next call: its least busy actor's oldest, unless a cap holds it back."""
        cap = state.share.concurrency
        if cap is not None and state.in_flight and state.in_flight >= cap:
            return None
        heads = sorted(
            (q[0] for q in state.queues.values() if q),
            key=lambda s: (state.actors_in_flight.get(s.actor, 0), s.seq),
        )
        for seat in heads:
            busy = state.actors_in_flight.get(seat.actor, 0)
            actor_cap = state.share.actor_concurrency
            over_actor = actor_cap is not None and busy and busy + seat.cost > actor_cap
            over_tenant = cap is not None and state.in_flight and state.in_flight + seat.cost > cap
            if not over_actor and not over_tenant:
                return seat
        return None

    def _fits(self, state: _Tenant, cost: int) -> bool:
        if not state.in_flight or self._in_flight + cost <= self.capacity:
            return True
        active = sum(s.share.weight for s in self._tenants.values() if not s.idle())
        return state.in_flight + cost <= self.capacity * state.share.weight / active

    def _grant(self, state: _Tenant, seat: Seat, now: float) -> None:
        state.queues[seat.actor].popleft()
        if not state.queues[seat.actor]:
            del state.queues[seat.actor]
        state.queued -= seat.cost
        seat.units = seat.cost
        seat.granted_at = max(now, seat.since)
        if seat.granted_at > seat.since:
            self._waited += 1
        state.in_flight += seat.units
        state.actors_in_flight[seat.actor] = state.actors_in_flight.get(seat.actor, 0) + seat.units
        self._in_flight += seat.units
        seat.event.set()

    def _give_back(self, seat: Seat) -> None:
        if seat.background:
            self._background -= seat.units
            _take(self._background_of, seat.tenant, seat.units)
            return
        state = self._tenants[seat.tenant]
        state.in_flight -= seat.units
        self._in_flight -= seat.units
        _take(state.actors_in_flight, seat.actor, seat.units)
        self._forget_if_idle(seat.tenant)

    def _make_room(self, state: _Tenant, actor: str, cost: int) -> bool:
        """Room for `cost` more units in the tenant's queue: refuse the newest calls of the actor
        with the most waiting while it has more waiting than `actor` would; False if none."""
        while state.queued + cost > state.share.queue:
            waiting = {a: sum(s.cost for s in q) for a, q in state.queues.items() if q}
            longest = max(waiting, key=lambda a: (waiting[a], a), default=None)
            if longest is None or longest == actor or waiting[longest] <= waiting.get(actor, 0) + cost:
                return False
            victim = state.queues[longest].pop()
            if not state.queues[longest]:
                del state.queues[longest]
            state.queued -= victim.cost
            self._refused += 1
            victim.refused = self._refusal(
                victim.tenant, state, "too many calls waiting: another call of the tenant took this one's place"
            )
            victim.event.set()
        return True

    def _leave_queue(self, seat: Seat, keep: bool) -> None:
        """After a wait: a granted seat is kept, or given back when its call is gone; a seat still
        queued leaves the queue, refused when its time ran out."""
        with self._lock:
            if seat.granted_at is not None:
                if not keep:
                    seat.released = True
                    self._give_back(seat)
                    self._dispatch()
                return
            if seat.refused is not None:
                return
            if seat.background:  # a batch whose worker stopped while it waited
                if seat in self._background_waiting:
                    self._background_waiting.remove(seat)
                return
            state = self._tenants[seat.tenant]
            queue = state.queues.get(seat.actor)
            if queue is not None and seat in queue:
                queue.remove(seat)
                if not queue:
                    del state.queues[seat.actor]
                state.queued -= seat.cost
            if keep:  # its time ran out
                self._refused += 1
                seat.refused = self._refusal(seat.tenant, state, f"too many calls: waited {self.max_wait_s:g} s for a turn")
            self._forget_if_idle(seat.tenant)
            self._dispatch()  # a call that waited at the head may have held others back

    def _refusal(self, tenant: str, state: _Tenant, message: str) -> RateLimited:
        """RateLimited with a Retry-After of how long the tenant's queue takes to drain."""
        active = sum(s.share.weight for s in self._tenants.values() if not s.idle()) or state.share.weight
        seats = max(1.0, self.capacity * state.share.weight / active)
        seconds = (state.queued + 1) * self._unit_s.get(tenant, UNIT_SECONDS_START) / seats
        return RateLimited(message, retry_after=max(1, math.ceil(seconds)))

    def _forget_if_idle(self, tenant: str) -> None:
        state = self._tenants.get(tenant)
        if state is not None and state.idle() and not state.queues:
            del self._tenants[tenant]
            now = self.clock()
            self._recent = {t: ended for t, ended in self._recent.items() if now - ended <= LINGER_S}
            self._recent[tenant] = now
