"""One timer for every stage of a call: a span per stage, and its time in a typed timings record."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Literal

from opentelemetry.trace import Span

from gateway.admission import held
from gateway.telemetry import Attributes, layer

TimingField = Literal[
    "queue_ms",
    "decide_ms",
    "verify_ms",
    "embed_ms",
    "semantic_ms",
    "lexical_ms",
    "graph_ms",
    "sections_ms",
    "recall_ms",
    "fuse_ms",
    "mask_ms",
    "synthesis_ms",
]


@dataclass(slots=True)
class Timings:
    """Milliseconds per stage of one call, as the response's `timings`; a stage that did not run is absent."""

    queue_ms: float | None = None  # waiting for the call's turn in admission's fair queue, before the total
    decide_ms: float | None = None
    verify_ms: float | None = None
    embed_ms: float | None = None
    semantic_ms: float | None = None
    lexical_ms: float | None = None
    graph_ms: float | None = None
    sections_ms: float | None = None
    recall_ms: float | None = None
    fuse_ms: float | None = None
    mask_ms: float | None = None
    synthesis_ms: float | None = None
    total_ms: float | None = None

    def as_dict(self) -> dict[str, float]:
        return {f.name: round(value, 3) for f in fields(self) if (value := getattr(self, f.name)) is not None}


class StageTimer:
    """Runs each stage in a span of its own and adds the stage's time to one field of `timings`."""

    def __init__(self) -> None:
        self.timings = Timings()
        self._started = time.perf_counter()
        ticket = held()  # the call's wait for its turn in admission's fair queue, when it waited
        if ticket is not None and ticket.queued_ms:
            self.timings.queue_ms = ticket.queued_ms

    @contextlib.contextmanager
    def stage(self, name: str, timing: TimingField | None = None, attributes: Attributes | None = None) -> Iterator[Span]:
        started = time.perf_counter()
        try:
            with layer(name, attributes) as span:
                yield span
        finally:
            if timing is not None:
                self.add(timing, (time.perf_counter() - started) * 1000)

    def add(self, timing: TimingField, ms: float) -> None:
        setattr(self.timings, timing, (getattr(self.timings, timing) or 0.0) + ms)

    def set(self, timing: TimingField, ms: float) -> None:
        setattr(self.timings, timing, ms)

    def finish(self) -> dict[str, float]:
        """The timings with the call's total so far."""
        self.timings.total_ms = (time.perf_counter() - self._started) * 1000
        return self.timings.as_dict()
