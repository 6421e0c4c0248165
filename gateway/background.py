"""A background worker for work that piles up behind writes (embedding, personal-data analysis).

`step(tenant, limit)` does one batch within `limit` (items, and bytes of their text) and returns
what it finished (`Done`); `count()` says how many wait. Writes `nudge()` the worker awake;
otherwise it looks again every `idle_s`. A failing batch is logged (type and place only, never
values) and retried later; the worker never dies.

Batches are sized by what they cost (`Pace`): each batch's time teaches the bytes the next may
take, so a batch holds its seats for about `Gate.batch_s` (a tenth of the queue's wait bound)
whether its items are short notes or long documents, and the worker gives way to calls at each
batch's end (gateway/admission/fair_queue.py: background after calls, inside its share).

With several processes on one store (`gateway serve --workers N`, replicas on one PostgreSQL,
`gateway work`, `gateway embed` and `gateway pii analyze` beside them), every process runs its
workers: each batch is claimed before it is done (gateway/writes/claims.py), so the workers share
the backlog without doing an item twice, and a worker that dies strands its items only until its
claims expire.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread
from sqlalchemy import and_, select
from sqlalchemy.engine import Engine

from core.errors import RateLimited, where

log = logging.getLogger("gateway.background")
LAG_EVERY_S = 2.0


T = TypeVar("T")
MOST_ITEMS = 512  # the most items one batch reads, whatever its byte budget
FIRST_BYTES = 16_384  # the first batch's budget, before any batch has been timed
ITEM_BYTES = 256  # what an item costs beyond its text (its row read, its result stored), in bytes
BATCH_S = 1.0  # how long a batch should hold its seats, without a gate to say


@dataclass(frozen=True, slots=True)
class Limit:
    """What one batch may take: at most `items` items, and items whose text plus ITEM_BYTES each
    add up to at most `bytes` (the first item always, however long)."""

    items: int
    bytes: int

    def within(self, rows: Sequence[T]) -> list[T]:
        """The longest prefix of `rows` (each with a `text`) inside the limit; at least the first row."""
        taken: list[T] = []
        spent = 0
        for row in rows[: self.items]:
            spent += _size(row) + ITEM_BYTES
            if taken and spent > self.bytes:
                break
            taken.append(row)
        return taken


@dataclass(frozen=True, slots=True)
class Done:
    """What one batch finished: items, and the bytes of their text."""

    items: int = 0
    bytes: int = 0

    @classmethod
    def of(cls, rows: Sequence[Any]) -> Done:
        """What a batch of `rows` (each with a `text`) finished."""
        return cls(len(rows), sum(map(_size, rows)))


def _size(row: Any) -> int:
    """The UTF-8 bytes of a waiting row's text."""
    return len((row.text or "").encode())


class Pace:
    """The next batch's limit, from what the last ones cost: bytes (text plus ITEM_BYTES an item)
    a second, as measured, times `target_s`. It shrinks at once after a slow batch and at most
    doubles after a quick one (a batch that found little waiting says little of the next)."""

    def __init__(self, target_s: float = BATCH_S) -> None:
        self.target_s = target_s
        self.bytes = FIRST_BYTES

    def limit(self) -> Limit:
        return Limit(MOST_ITEMS, self.bytes)

    def learn(self, done: Done, seconds: float) -> None:
        if not done.items:
            return
        cost = done.bytes + done.items * ITEM_BYTES
        fitted = cost * self.target_s / max(seconds, 1e-3)
        self.bytes = int(max(ITEM_BYTES, min(fitted, 2 * self.bytes)))


class Gate(Protocol):
    """Admission for work that is not a call (gateway/admission/): `run` waits for a background
    turn of the tenant's, runs `work` in a worker thread charged to it, and returns what `work`
    returned. `batch_s`: how long a batch should hold its seats."""

    @property
    def batch_s(self) -> float: ...

    async def run(self, tenant: str, actor: str, estimate: int, work: Callable[[], Done]) -> Done: ...


class PendingWorker:
    """`step(tenant, limit)` does one batch of the tenant's waiting items (None: anyone's) within
    `limit` and returns what it finished; `next_tenant(after)` names the next tenant with items
    waiting after `after` in name order, wrapping round (None when nothing waits). With a gate,
    each batch waits for a background turn in admission's fair queue (after calls, inside the
    background's share of the seats) and is charged to its tenant, as actor `background:<name>`: a
    tenant's big ingests slow its own background work, never a call. Tenants take turns, a batch
    each; each batch is sized by `Pace` to hold its seats about the gate's `batch_s`."""

    def __init__(
        self,
        name: str,
        step: Callable[[str | None, Limit], Done],
        count: Callable[[], int],
        idle_s: float = 2.0,
        next_tenant: Callable[[str | None], str | None] | None = None,
        claimed: Callable[[], int] | None = None,
    ) -> None:
        self.name = name
        self.claimed = claimed
        self.in_flight: int | None = None  # items held by any worker's live claims, as last counted
        self.step = step
        self.count = count
        self.idle_s = idle_s
        self.next_tenant = next_tenant
        self.lag: int | None = None  # items waiting, as last counted
        self._lag_counted = 0.0
        self._wake = anyio.Event()
        self._after: str | None = None  # the tenant whose batch ran last
        self.pace = Pace()

    def nudge(self) -> None:
        self._wake.set()

    async def run(self, gate: Gate | None = None) -> None:
        while True:
            try:
                done = await self._batch(gate)
                if done:
                    if time.monotonic() - self._lag_counted > LAG_EVERY_S:
                        await anyio.to_thread.run_sync(self.recount)
                        self._lag_counted = time.monotonic()
                    await anyio.sleep(0)  # let requests run between batches
                    continue
                await anyio.to_thread.run_sync(self.recount)  # none here: others' claims may still wait
            except RateLimited:  # its tenant's queue is full, or the batch waited its longest: later
                pass
            except Exception as exc:  # a failing batch is retried later; the worker never dies
                log.warning("%s batch failed: %s", self.name, where(exc))
            with anyio.move_on_after(self.idle_s):
                await self._wake.wait()
            self._wake = anyio.Event()

    async def _batch(self, gate: Gate | None) -> int:
        """One batch: of the next tenant's items, under its turn, with a gate; else of anyone's.
        Returns how many items it finished; its time (in the worker thread, while it holds its
        seats) sizes the next one."""
        if gate is not None:
            self.pace.target_s = gate.batch_s
        if gate is None or self.next_tenant is None:
            return (await anyio.to_thread.run_sync(self._timed, None)).items
        tenant = await anyio.to_thread.run_sync(self.next_tenant, self._after)
        if tenant is None:
            self._after = None
            return 0
        self._after = tenant
        return (await gate.run(tenant, f"background:{self.name}", 1, lambda: self._timed(tenant))).items

    def _timed(self, tenant: str | None) -> Done:
        started = time.monotonic()
        done = self.step(tenant, self.pace.limit())
        self.pace.learn(done, time.monotonic() - started)
        return done

    def recount(self) -> None:
        """Count what waits (`lag`) and what any worker holds (`in_flight`)."""
        self.lag = self.count()
        self.in_flight = self.claimed() if self.claimed is not None else None


def next_tenant(engine: Engine, joined: Any, condition: Any, tenant: Any, after: str | None) -> str | None:
    """The first `tenant` (a column of `joined`) in name order after `after` with a row matching
    `condition`, wrapping round to the first; None when no row matches."""
    for bound in (after,) if after is None else (after, None):
        where = condition if bound is None else and_(condition, tenant > bound)
        with engine.connect() as conn:
            found = conn.execute(select(tenant).select_from(joined).where(where).order_by(tenant).limit(1)).scalar()
        if found is not None:
            return str(found)
    return None


async def run_background(workers: Sequence[PendingWorker], gate: Gate | None = None) -> None:
    """Run the workers (their batches admitted through `gate`) until cancelled. Every process runs
    its own: their batches are claimed (gateway/writes/claims.py), so they never overlap."""
    if not workers:
        return
    log.info("background jobs (%s) run in process %d, their batches claimed", ", ".join(w.name for w in workers), os.getpid())
    async with anyio.create_task_group() as running:
        for worker in workers:
            running.start_soon(worker.run, gate)
