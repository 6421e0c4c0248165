"""A background worker for work that piles up behind writes (embedding, personal-data analysis).

`step(tenant, limit)` does one batch within `limit` (items, and bytes of their text) and returns
what it finished (`Done`); `count()` says how many wait. Writes `nudge()` the worker awake;
otherwise it looks again every `idle_s`. A failing batch is logged (type and place only, never
values) and retried later; the worker never dies.

Batches are sized by what they cost (`Pace`): each batch's time teaches the bytes the next may
take, so a batch holds its seats for about `Gate.batch_s` (a tenth of the queue's wait bound)
whether its items are short notes or long documents, and the worker gives way to calls at each
batch's end (gateway/admission/fair_queue.py: background after calls, inside its share).

With several processes on one store (`gateway serve --workers N`, replicas on one PostgreSQL),
the jobs run in one of them: the one holding the store's lease (`lease_for`): a lock file beside
the SQLite database, or a PostgreSQL advisory lock per schema. The others stand by, count what
waits (so their answers still report it), and take the lease over when its holder dies.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import anyio
import anyio.to_thread
from sqlalchemy import and_, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from core.errors import RateLimited, where

log = logging.getLogger("gateway.background")
LAG_EVERY_S = 2.0
H = TypeVar("H")  # what holds a lease: a file descriptor, a database session
LEASE_EVERY_S = 1.0  # how often a standby tries the lease, and the holder checks it still holds it


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
    ) -> None:
        self.name = name
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
                        self.lag = await anyio.to_thread.run_sync(self.count)
                        self._lag_counted = time.monotonic()
                    await anyio.sleep(0)  # let requests run between batches
                    continue
                self.lag = 0
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

    async def stand_by(self) -> None:
        """While another process runs the jobs: count what waits, after a write here and every
        `idle_s`, so this process's answers report the lag too; runs until cancelled."""
        while True:
            try:
                self.lag = await anyio.to_thread.run_sync(self.count)
            except Exception as exc:  # an unknown lag is reported as unknown, never as zero
                self.lag = None
                log.warning("%s lag count failed: %s", self.name, where(exc))
            with anyio.move_on_after(self.idle_s):
                await self._wake.wait()
            self._wake = anyio.Event()


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


class Lease(Protocol):
    """The right to run the store's background jobs; `acquire` never blocks."""

    def acquire(self) -> bool: ...
    def held(self) -> bool: ...
    def release(self) -> None: ...


class _Held(Generic[H]):
    """What both leases share: the handle holding the lock (a descriptor, a session), taken when
    `acquire` finds none and kept until `release`; `_take` tries once and never blocks."""

    _handle: H | None = None

    def acquire(self) -> bool:
        if self._handle is None:
            self._handle = self._take()
        return self._handle is not None

    def _take(self) -> H | None:
        raise NotImplementedError


class FileLease(_Held[int]):
    """flock on a file beside the SQLite database: the kernel drops it when the holding process
    dies, however it dies. The holder's pid is written in the file, for operators."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _take(self) -> int | None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:  # SQLite could not write beside its file either; say so, retry later
            log.warning("background lease file %s: %s", self.path, exc.strerror)
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return fd

    def held(self) -> bool:
        return self._handle is not None

    def release(self) -> None:
        if self._handle is not None:
            os.close(self._handle)  # closing the only descriptor drops the lock
            self._handle = None


class AdvisoryLease(_Held[Connection]):
    """A session-level PostgreSQL advisory lock on a connection of its own, keyed by the schema
    the store lives in (one runner per store, across hosts). PostgreSQL drops it when the session
    ends: the process died, or its connection did, and then `held` says so."""

    SQL = "SELECT pg_try_advisory_lock(hashtextextended('gateway.background:' || coalesce(current_schema(), ''), 0))"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _take(self) -> Connection | None:
        try:
            conn = self.engine.connect()
        except SQLAlchemyError:
            return None
        try:
            got = bool(conn.exec_driver_sql(self.SQL).scalar())
            conn.commit()  # no transaction left open on the held session
        except SQLAlchemyError:
            got = False
        if not got:
            conn.close()
            return None
        return conn

    def held(self) -> bool:
        if self._handle is None:
            return False
        try:
            self._handle.exec_driver_sql("SELECT 1")
            self._handle.commit()
            return True
        except SQLAlchemyError:
            self.release()
            return False

    def release(self) -> None:
        if self._handle is not None:
            try:  # at once, rather than when the server notices the session closing
                self._handle.exec_driver_sql("SELECT pg_advisory_unlock_all()")
                self._handle.commit()
            except SQLAlchemyError:
                pass  # the session is gone, and the lock with it
            # Closed, not pooled: a pooled session would keep the lock for whoever borrowed it next.
            self._handle.invalidate()
            self._handle.close()
            self._handle = None


def lease_for(engine: Engine) -> Lease | None:
    """The store's lease, or None for a store no other process can open (in-memory SQLite)."""
    if engine.dialect.name == "postgresql":
        return AdvisoryLease(engine)
    database = engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return FileLease(Path(database).with_name(Path(database).name + ".background"))


async def run_background(workers: Sequence[PendingWorker], lease: Lease | None, gate: Gate | None = None) -> None:
    """Run the workers (their batches admitted through `gate`) while this process holds the lease;
    stand by while another does, trying again every LEASE_EVERY_S. Runs until cancelled; the lease
    is let go on the way out."""
    if not workers:
        return
    if lease is None:
        async with anyio.create_task_group() as running:
            for worker in workers:
                running.start_soon(worker.run, gate)
        return
    try:
        while True:
            async with anyio.create_task_group() as waiting:
                for worker in workers:
                    waiting.start_soon(worker.stand_by)
                while not await anyio.to_thread.run_sync(lease.acquire):
                    await anyio.sleep(LEASE_EVERY_S)
                waiting.cancel_scope.cancel()
            log.info("background jobs (%s) run in process %d", ", ".join(w.name for w in workers), os.getpid())
            async with anyio.create_task_group() as running:
                for worker in workers:
                    running.start_soon(worker.run, gate)
                while await anyio.to_thread.run_sync(lease.held):
                    await anyio.sleep(LEASE_EVERY_S)
                running.cancel_scope.cancel()
            log.warning("background jobs stopped in process %d: the lease was lost", os.getpid())
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(lease.release)
