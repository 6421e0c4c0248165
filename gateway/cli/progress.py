"""Progress a user can see: a bar with the rate and the time left on a terminal (tqdm), and plain
lines every few seconds when the output is a file or a pipe (a CI log, `nohup`), where a bar's
carriage returns would pile up into one unreadable line."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import IO, Any

from tqdm import tqdm

PLAIN_EVERY_S = 10.0  # between two plain lines


class Progress:
    """`update(n)` after each n items; `total` None when the length is not known (a pipe)."""

    def __init__(self, total: int | None, label: str, *, unit: str = "items", stream: IO[str] | None = None) -> None:
        self.total, self.label, self.unit = total, label, unit
        self.stream = stream or sys.stderr
        self.pos = 0
        self.started = self._last = time.monotonic()
        terminal = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._bar: Any = (
            tqdm(total=total, desc=label, unit=f" {unit}", file=self.stream, dynamic_ncols=True, smoothing=0.1)
            if terminal
            else None
        )

    def update(self, n: int) -> None:
        self.pos += n
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.monotonic()
        if now - self._last >= PLAIN_EVERY_S:
            self._last = now
            self._line(now)

    def _line(self, now: float, final: bool = False) -> None:
        seconds = max(now - self.started, 1e-9)
        rate = self.pos / seconds
        done = f"{self.pos:,}" + (f"/{self.total:,}" if self.total is not None else "")
        left = ""
        if not final and self.total is not None and rate > 0:
            left = f", {max(self.total - self.pos, 0) / rate:,.0f} s left"
        print(f"{self.label}: {done} {self.unit}, {rate:,.1f} {self.unit}/s{left}", file=self.stream, flush=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.close()
        else:
            self._line(time.monotonic(), final=True)
