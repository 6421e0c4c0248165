"""Database work that stops when its caller stops waiting.

A source runs its query in a worker thread under the call's deadline. When the deadline passes, the
call answers `timeout` at once; without more, the thread would go on until its query finished,
holding a connection and a core for a call that has answered (a flood of deep graph walks once kept
the machine busy for ~10 s after it stopped). `cancellable` runs the work in a thread and, when the
caller is cancelled, tells the database to stop the statements that work is running: SQLite's
`interrupt()` (safe from any thread), PostgreSQL's cancel request. The interrupted statement raises
in the thread, which then ends. A PostgreSQL connection that was sent a cancel is discarded rather
than pooled, so a late cancel can never reach another call's statement.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from sqlalchemy.engine import Connection, Engine

from core import work
from core.work import timed

log = logging.getLogger("gateway.connectors.cancel")
T = TypeVar("T")


class Cancelled(Exception):
    """The caller stopped waiting before the work took its connection."""


class Watch:
    """The connections one piece of work has open, so that they can be interrupted from outside."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: list[Any] = []
        self.cancelled = False

    def attach(self, dbapi: Any) -> None:
        with self._lock:
            if self.cancelled:
                raise Cancelled("the caller stopped waiting")
            self._open.append(dbapi)
            _RUNNING.add(id(dbapi))

    def detach(self, dbapi: Any) -> bool:
        """Forget a connection; True when it was interrupted while open."""
        with self._lock:
            self._open.remove(dbapi)
            _RUNNING.discard(id(dbapi))
            return self.cancelled

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            for dbapi in self._open:
                _interrupt(dbapi)


class _Running:
    """How many watched connections are running work right now (what the tests check)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: set[int] = set()

    def add(self, key: int) -> None:
        with self._lock:
            self._ids.add(key)

    def discard(self, key: int) -> None:
        with self._lock:
            self._ids.discard(key)

    def __len__(self) -> int:
        with self._lock:
            return len(self._ids)


_RUNNING = _Running()
_WATCH: ContextVar[Watch | None] = ContextVar("gateway_watch", default=None)
# Called from inside a running SQLite statement every PAUSE_EVERY virtual-machine steps, when the
# caller set one (`pausing`): it may sleep, so that a heavy statement gives its core to other work
# (gateway/admission.py decides when), then the statement goes on where it was.
_PAUSE: ContextVar[Callable[[], None] | None] = ContextVar("gateway_pause", default=None)
PAUSE_EVERY = 10_000  # also how the running call's meter counts a statement's steps (core/work.py)


@contextmanager
def pausing(pause: Callable[[], None]) -> Iterator[None]:
    """SQLite statements run in this context (and the worker threads it starts) call `pause` as they go."""
    token = _PAUSE.set(pause)
    try:
        yield
    finally:
        _PAUSE.reset(token)


def running() -> int:
    """Watched connections whose work has not ended (interrupted work ends within milliseconds)."""
    return len(_RUNNING)


def given_up() -> bool:
    """Whether the running work's caller stopped waiting (its watch was cancelled): work that loops
    between statements (an index build reading chunks) asks this between them, since a cancel
    reaches only a statement that is running."""
    watch = _WATCH.get()
    return watch is not None and watch.cancelled


@contextmanager
def watching(watch: Watch) -> Iterator[None]:
    """Connections opened with `watched` in this context (a thread's own work) register to `watch`,
    so whoever holds it can interrupt them (`Watch.cancel`)."""
    token = _WATCH.set(watch)
    try:
        yield
    finally:
        _WATCH.reset(token)


def _interrupt(dbapi: Any) -> None:
    if isinstance(dbapi, sqlite3.Connection):
        dbapi.interrupt()
        return
    cancel = getattr(dbapi, "cancel_safe", None) or getattr(dbapi, "cancel", None)
    if cancel is not None:  # a round trip to the server: off the caller's event loop
        threading.Thread(target=_quietly, args=(cancel,), name="pg-cancel", daemon=True).start()


def _quietly(cancel: Callable[[], Any]) -> None:
    try:
        cancel()
    except Exception as exc:  # the statement may have ended, the connection closed: nothing to stop
        log.debug("cancel request not sent: %s", type(exc).__name__)


@contextmanager
def watched(engine: Engine) -> Iterator[Connection]:
    """`engine.connect()`, with the connection registered to the running work's watch (if any), so
    a cancelled caller interrupts its statements."""
    watch, pause, meter = _WATCH.get(), _PAUSE.get(), work.current()
    with engine.connect() as conn:
        dbapi = conn.connection.dbapi_connection
        paused = (pause is not None or meter is not None) and isinstance(dbapi, sqlite3.Connection)
        if paused:
            dbapi.set_progress_handler(_pauser(pause, meter), PAUSE_EVERY)  # type: ignore[union-attr]
        try:
            if watch is None:
                yield conn
                return
            watch.attach(dbapi)
            try:
                yield conn
            finally:
                if watch.detach(dbapi) and conn.dialect.name != "sqlite":
                    conn.invalidate()  # a cancel may still be on its way: never pool this connection
        finally:
            if paused:
                dbapi.set_progress_handler(None, 0)  # type: ignore[union-attr]


def _pauser(pause: Callable[[], None] | None, meter: work.Meter | None) -> Callable[[], int]:
    def handler() -> int:
        if meter is not None:
            meter.add(steps=PAUSE_EVERY)
        if pause is not None:
            pause()
        return 0  # go on (an interrupt, not this handler, stops a statement)

    return handler


async def cancellable(job: Callable[..., T], *args: Any) -> T:
    """`job(*args)` in a worker thread; if the caller is cancelled (its deadline passed), the job's
    database statements are interrupted and its thread ends, while the caller moves on at once. Its
    thread's CPU time is charged to the running call (core/work.py)."""
    watch = Watch()
    token = _WATCH.set(watch)  # worker threads run in a copy of this context, so they see the watch
    try:
        return await anyio.to_thread.run_sync(timed(job), *args, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        watch.cancel()
        raise
    finally:
        _WATCH.reset(token)
