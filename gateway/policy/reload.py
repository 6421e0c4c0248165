"""Hot reload: the engine in force, switched to a new revision atomically.

A call pins the engine in force when it starts (`pin`), so its decision, its verify and its trace
are all made by one revision, even when a reload lands in the middle. A reload reads the source,
builds the candidate beside the engine in force, probes both entry points, and only then swaps;
a candidate that fails anywhere is closed and reported, and the old revision keeps serving. The
engine a reload replaced is closed once the last call pinned to it has finished.

Outside a request, reloads come on SIGHUP and by polling the source (`watch`), each one audited.

With several worker processes (`gateway serve --workers N`), the supervisor passes SIGHUP on to
every worker, and a `POST /v1/policy/reload` answered by one worker sends SIGHUP to the supervisor,
so every worker switches (gateway/cli/serve.py). Replicas on one PostgreSQL (separate processes,
separate hosts) hear of a switch through LISTEN/NOTIFY (gateway/policy/broadcast.py): the replica
that switched announces the revision, and each of the others reloads from its own source.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import anyio
import anyio.to_thread
from sqlalchemy.engine import Engine

import gateway.policy.broadcast as broadcast
from audit.record import PolicyReloaded, TraceBuilder, new_trace_id
from audit.store import AuditStore
from core.errors import AuditWriteError, GatewayError
from core.instants import utc_now
from gateway.policy.base import PolicyEngine
from gateway.policy.bundle import PolicyBundle
from gateway.policy.decision_log import DecisionSink
from gateway.policy.source import PolicySource
from gateway.settings import Settings

log = logging.getLogger("gateway.policy")

Build = Callable[[PolicyBundle], Awaitable[PolicyEngine]]  # compiles and probes one revision, or raises


class ReloadResult(PolicyReloaded):
    """What one reload did: `switched`, `unchanged` or `rejected` (with the candidate's errors). It is
    the record its audit row leaves (audit.record.calls), and the answer of POST /v1/policy/reload."""

    def as_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


@dataclass(slots=True)
class _Slot:
    engine: PolicyEngine
    bundle: PolicyBundle
    users: int = 0
    retired: bool = False
    closed: anyio.Event = field(default_factory=anyio.Event)


class ReloadingEngine:
    """A PolicyEngine whose revision can change while it serves (see the module doc)."""

    def __init__(
        self, engine: PolicyEngine, bundle: PolicyBundle, build: Build, source: PolicySource, sink: DecisionSink | None = None
    ) -> None:
        self._slot = _Slot(engine, bundle)
        self.sink = sink  # the decision log every revision writes to; closed with the last one
        self._build = build
        self.source = source
        self._pinned: ContextVar[_Slot | None] = ContextVar(f"policy_pin_{id(self)}", default=None)
        self._lock = anyio.Lock()
        self.last: ReloadResult | None = None

    def _current(self) -> _Slot:
        return self._pinned.get() or self._slot

    @property
    def name(self) -> str:
        return self._current().engine.name

    @property
    def revision(self) -> str:
        return self._current().engine.revision

    @property
    def loaded_at(self) -> datetime:
        return self._current().engine.loaded_at

    @property
    def bundle(self) -> PolicyBundle:
        return self._current().bundle

    @contextlib.contextmanager
    def pin(self) -> Iterator[PolicyEngine]:
        """Every evaluation in this context (and the tasks it starts) goes to the engine in force now."""
        if self._pinned.get() is not None:  # already pinned by an outer call
            yield self
            return
        slot = self._slot
        slot.users += 1
        token = self._pinned.set(slot)
        try:
            yield self
        finally:
            self._pinned.reset(token)
            slot.users -= 1
            if slot.retired and slot.users == 0:
                _close_soon(slot)

    async def evaluate(self, entrypoint: str, policy_input: dict[str, Any]) -> dict[str, Any]:
        return await self._current().engine.evaluate(entrypoint, policy_input)

    async def evaluate_path(self, path: str, policy_input: dict[str, Any]) -> Any:
        """Another document of the revision in force (explain); None when its engine reads entry points only."""
        reader = getattr(self._current().engine, "evaluate_path", None)
        return None if reader is None else await reader(path, policy_input)

    async def ready(self) -> bool:
        return await self._slot.engine.ready()

    async def aclose(self) -> None:
        await self._slot.engine.aclose()
        if self.sink is not None:
            await anyio.to_thread.run_sync(self.sink.close)  # the HTTP sink may spend seconds uploading

    async def reload(self, trigger: str) -> ReloadResult:
        """Read the source; when its revision differs, build, probe and switch to it. Never raises
        for a bad candidate: the result says `rejected` and why, and the old revision serves on."""
        async with self._lock:
            started = time.perf_counter()
            previous = self._slot.engine.revision
            try:
                bundle = await self.source.fetch()
            except GatewayError as exc:
                return self._done(started, trigger, "rejected", previous, previous, None, (exc.message,))
            if bundle is None or bundle.revision == previous:
                return self._done(started, trigger, "unchanged", previous, previous, previous)
            try:
                engine = await self._build(bundle)
            except Exception as exc:  # noqa: BLE001 - whatever fails, the candidate is rejected, never half-used
                why = exc.message if isinstance(exc, GatewayError) else f"the candidate failed to start: {type(exc).__name__}"
                return self._done(started, trigger, "rejected", previous, previous, bundle.revision, (why,))
            old, self._slot = self._slot, _Slot(engine, bundle)
            old.retired = True
            if old.users == 0:
                _close_soon(old)
            return self._done(started, trigger, "switched", engine.revision, previous, bundle.revision)

    def _done(
        self,
        started: float,
        trigger: str,
        status: str,
        revision: str,
        previous: str,
        candidate: str | None,
        errors: tuple[str, ...] = (),
    ) -> ReloadResult:
        ms = (time.perf_counter() - started) * 1000
        result = ReloadResult(
            trigger=trigger, status=status, revision=revision, previous=previous, candidate=candidate, errors=errors, ms=ms
        )
        self.last = result
        if result.status == "rejected":
            log.warning(
                "policy reload (%s) rejected %s: %s; %s keeps serving",
                result.trigger,
                result.candidate or "the source",
                "; ".join(result.errors),
                result.revision,
            )
        elif result.status == "switched":
            log.info("policy reload (%s): %s -> %s", result.trigger, result.previous, result.revision)
        return result


def _close_soon(slot: _Slot) -> None:
    """Close a retired engine off the caller's path (its last call is answering now)."""
    if slot.closed.is_set():
        return
    slot.closed.set()

    async def close() -> None:
        try:
            await slot.engine.aclose()
        except Exception as exc:  # a retired engine that fails to close must not fail a call
            log.warning("closing policy revision %s failed: %s", slot.engine.revision, type(exc).__name__)

    try:
        task = asyncio.get_running_loop().create_task(close())
    except RuntimeError:  # no loop (a synchronous caller): close here
        anyio.run(close)
        return
    _closing.add(task)
    task.add_done_callback(_closing.discard)


_closing: set[asyncio.Task[None]] = set()  # closes under way, referenced until done


class Served(Protocol):
    """What a reload outside the engine reads of the service (gateway.context.GatewayContext)."""

    @property
    def policy(self) -> ReloadingEngine: ...
    @property
    def audit(self) -> AuditStore: ...
    @property
    def store(self) -> Engine: ...
    @property
    def settings(self) -> Settings: ...


SUPERVISOR = "GATEWAY_SUPERVISOR_PID"  # set by `gateway serve --workers N` for its workers
STATUS = {"switched": 200, "unchanged": 200, "rejected": 422}
FOLLOWING = ("notify", "reconnect")  # triggers that follow another replica's switch: not announced again
# When this replica's source does not have the announced revision yet (a ConfigMap reaches each pod
# in its own time), look again after these pauses, then give up until the next trigger.
CHASE_S = (1, 2, 4, 8, 15, 30, 60)


async def reload_and_announce(context: Served, trigger: str, *, own_row: bool = True) -> ReloadResult:
    """Reload, and announce a switch to the sibling workers and the other replicas (unless it follows
    another replica's). A switch or a rejection leaves an audit row of its own (endpoint
    `policy_reload`), unless the caller's trace records it (`own_row=False`: POST /v1/policy/reload).
    Every reload goes through here: the HTTP route, SIGHUP and polling (`watch`), `follow`."""
    result = await context.policy.reload(trigger)
    if own_row and result.status != "unchanged":
        trace = TraceBuilder(new_trace_id(), "policy_reload", utc_now(), key=context.audit.key)
        trace.policy_engine, trace.policy_revision = context.policy.name, result.revision
        trace.error_code = "policy_rejected" if result.status == "rejected" else None
        trace.record(result)
        try:
            await context.audit.write(trace.freeze(STATUS[result.status]))
        except AuditWriteError:
            log.error("audit write failed for the policy reload %s", trace.trace_id)
    if result.status == "switched" and trigger not in FOLLOWING:
        await announce(context, result.revision, siblings=trigger != "sighup")  # a SIGHUP reached every worker already
    return result


async def announce(context: Served, revision: str, siblings: bool = True) -> None:
    """After a switch to `revision`: the sibling workers of this process, and every replica on the
    database. (The revision is passed in: inside a call, `context.policy` is pinned to the old one.)"""
    if siblings:
        tell_siblings()
    if broadcast.available(context.store):
        try:
            await anyio.to_thread.run_sync(broadcast.announce, context.store, revision)
        except Exception as exc:  # the switch stands; the others catch up on their next reload
            log.warning("could not tell the other replicas of the new policy revision: %s", type(exc).__name__)


async def follow(context: Served) -> None:
    """On PostgreSQL: reload when another replica announces a revision this one does not serve,
    and once after every reconnect; runs until cancelled. Each switch is audited here."""
    if not broadcast.available(context.store):
        return

    async def caught_up() -> None:
        await _reload_quietly(context, "reconnect")

    chase = _Chase(context)
    async with anyio.create_task_group() as group:
        group.start_soon(chase.run)
        await broadcast.listen(context.store, chase.heard, caught_up)


class _Chase:
    """The newest revision announced, chased until this replica's source has it. A newer
    announcement replaces the one being chased, so a bogus one delays nothing real."""

    def __init__(self, context: Served) -> None:
        self.context = context
        self.revision = ""
        self.news = anyio.Event()

    async def heard(self, revision: str) -> None:
        self.revision = revision
        self.news.set()

    async def run(self) -> None:
        while True:
            await self.news.wait()
            self.news = anyio.Event()
            await self._chase(self.revision)

    async def _chase(self, revision: str) -> None:
        for pause in (0, *CHASE_S):
            with anyio.move_on_after(pause):
                await self.news.wait()
            if self.news.is_set() or revision == self.context.policy.revision:  # newer news, or nothing to do
                return
            result = await _reload_quietly(self.context, "notify")
            if result is None or result.status != "unchanged":  # switched, or refused (and audited): done
                return
        log.warning(
            "the policy source still lacks the revision another replica announced; %s serves on", self.context.policy.revision
        )


async def _reload_quietly(context: Served, trigger: str) -> ReloadResult | None:
    try:
        return await reload_and_announce(context, trigger)
    except Exception as exc:  # a reload never stops the listener
        log.error("policy reload (%s) failed: %s", trigger, type(exc).__name__)
        return None


def tell_siblings() -> None:
    """Under `gateway serve --workers N`: ask the supervisor to pass SIGHUP to every worker."""
    supervisor = os.environ.get(SUPERVISOR)
    if supervisor and supervisor.isdigit() and int(supervisor) != os.getpid():
        try:
            os.kill(int(supervisor), signal.SIGHUP)
        except OSError as exc:
            log.warning("could not ask the other workers to reload: %s", type(exc).__name__)


async def watch(context: Served) -> None:
    """Reload on SIGHUP, and every GATEWAY_POLICY_POLL_SECONDS when polling; runs until cancelled."""
    interval = context.settings.policy_poll_interval
    hangup = anyio.Event()
    loop = asyncio.get_running_loop()

    def on_hangup() -> None:
        nonlocal hangup
        hangup.set()

    try:
        loop.add_signal_handler(signal.SIGHUP, on_hangup)
        handling = True
    except (RuntimeError, ValueError, NotImplementedError):  # not the main thread (tests), or no signals here
        handling = False
    try:
        while True:
            trigger = "poll"
            with anyio.move_on_after(interval if interval is not None else float("inf")):
                await hangup.wait()
                trigger = "sighup"
            hangup = anyio.Event()
            try:
                await reload_and_announce(context, trigger)
            except Exception as exc:  # a reload never stops the watcher
                log.error("policy reload (%s) failed: %s", trigger, type(exc).__name__)
    finally:
        if handling:
            loop.remove_signal_handler(signal.SIGHUP)
