"""Hot reload: the engine in force, switched to a new revision atomically.

A call pins the engine in force when it starts (`pin`), so its decision, its verify and its trace
are all made by one revision, even when a reload lands in the middle. A reload reads the source,
builds the candidate beside the engine in force, probes both entry points, and only then swaps;
a candidate that fails anywhere is closed and reported, and the old revision keeps serving. The
engine a reload replaced is closed once the last call pinned to it has finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import anyio
import anyio.to_thread

from core.errors import GatewayError
from gateway.policy.base import PolicyEngine
from gateway.policy.bundle import PolicyBundle
from gateway.policy.decision_log import DecisionSink
from gateway.policy.source import PolicySource

log = logging.getLogger("gateway.policy")

Build = Callable[[PolicyBundle], Awaitable[PolicyEngine]]  # compiles and probes one revision, or raises


@dataclass(frozen=True, slots=True)
class ReloadResult:
    """What one reload did: `switched`, `unchanged` or `rejected` (with the candidate's errors)."""

    trigger: str
    status: str
    revision: str  # in force after the reload
    previous: str
    candidate: str | None = None
    errors: tuple[str, ...] = ()
    ms: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "trigger": self.trigger,
            "status": self.status,
            "revision": self.revision,
            "previous": self.previous,
            "candidate": self.candidate,
            "errors": list(self.errors),
            "ms": round(self.ms, 3),
        }


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
                return self._done(ReloadResult(trigger, "rejected", previous, previous, None, (exc.message,)), started)
            if bundle is None or bundle.revision == previous:
                return self._done(ReloadResult(trigger, "unchanged", previous, previous, previous), started)
            try:
                engine = await self._build(bundle)
            except Exception as exc:  # noqa: BLE001 - whatever fails, the candidate is rejected, never half-used
                why = exc.message if isinstance(exc, GatewayError) else f"the candidate failed to start: {type(exc).__name__}"
                return self._done(ReloadResult(trigger, "rejected", previous, previous, bundle.revision, (why,)), started)
            old, self._slot = self._slot, _Slot(engine, bundle)
            old.retired = True
            if old.users == 0:
                _close_soon(old)
            return self._done(ReloadResult(trigger, "switched", engine.revision, previous, bundle.revision), started)

    def _done(self, result: ReloadResult, started: float) -> ReloadResult:
        result = ReloadResult(
            result.trigger,
            result.status,
            result.revision,
            result.previous,
            result.candidate,
            result.errors,
            (time.perf_counter() - started) * 1000,
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
