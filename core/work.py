"""What one call did, measured as it runs: CPU time of its worker threads, SQLite virtual-machine
steps of its statements, characters embedded and bytes analysed for personal data.

A call's admission ticket (gateway/admission.py) opens a `Meter` for the call (`metering`); worker
threads run in a copy of the call's context, so what they measure lands on the same meter. The
meter turns the work into admission units (`units`), which the call is settled against when it
ends, and which decide, between stages, whether it has turned out heavy.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

# One admission unit is about CPU_MS_PER_UNIT of one core, or this much counted work.
CPU_MS_PER_UNIT = 10.0
STEPS_PER_UNIT = 500_000  # SQLite virtual-machine steps (a lexical search over SciFact: ~50,000)
CHARS_PER_UNIT = 2_000  # characters given to the embedding model
BYTES_PER_UNIT = 32_768  # bytes analysed for personal data


@dataclass
class Meter:
    cpu_s: float = 0.0
    steps: int = 0
    chars: int = 0
    analysed: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, *, cpu_s: float = 0.0, steps: int = 0, chars: int = 0, analysed: int = 0) -> None:
        with self._lock:
            self.cpu_s += cpu_s
            self.steps += steps
            self.chars += chars
            self.analysed += analysed

    def units(self) -> float:
        """The larger of measured CPU time and counted work, in admission units. Counted work is a
        floor for what runs outside worker threads (on the event loop), where CPU is not measured."""
        with self._lock:
            counted = self.steps / STEPS_PER_UNIT + self.chars / CHARS_PER_UNIT + self.analysed / BYTES_PER_UNIT
            return max(self.cpu_s * 1000 / CPU_MS_PER_UNIT, counted)

    def report(self) -> dict[str, Any]:
        with self._lock:
            return {
                "cpu_ms": round(self.cpu_s * 1000, 3),
                "sql_steps": self.steps,
                "embedded_chars": self.chars,
                "analysed_bytes": self.analysed,
            }


_METER: ContextVar[Meter | None] = ContextVar("gateway_work_meter", default=None)


@contextmanager
def metering(meter: Meter) -> Iterator[Meter]:
    token = _METER.set(meter)
    try:
        yield meter
    finally:
        _METER.reset(token)


def current() -> Meter | None:
    return _METER.get()


def charge(**work: Any) -> None:
    """Add work to the running call's meter (nothing outside a call)."""
    meter = _METER.get()
    if meter is not None:
        meter.add(**work)


def timed(work: Callable[..., T]) -> Callable[..., T]:
    """`work`, charging the CPU time its thread spends in it to the running call's meter. Wrap it
    where the call's context is current; the wrapper may run in any thread."""
    meter = _METER.get()
    if meter is None:
        return work

    def run(*args: Any, **kwargs: Any) -> T:
        started = time.thread_time()
        try:
            return work(*args, **kwargs)
        finally:
            meter.add(cpu_s=time.thread_time() - started)

    return run
