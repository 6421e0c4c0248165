"""A background worker for work that piles up behind writes (embedding, personal-data analysis).

`step()` does one batch and returns how many items it finished; `count()` says how many wait.
Writes `nudge()` the worker awake; otherwise it looks again every `idle_s`. A failing batch is
logged (type and place only, never values) and retried later; the worker never dies.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio
import anyio.to_thread

from core.errors import where

log = logging.getLogger("gateway.background")
LAG_EVERY_S = 2.0


class PendingWorker:
    def __init__(self, name: str, step: Callable[[], int], count: Callable[[], int], idle_s: float = 2.0) -> None:
        self.name = name
        self.step = step
        self.count = count
        self.idle_s = idle_s
        self.lag: int | None = None  # items waiting, as last counted
        self._lag_counted = 0.0
        self._wake = anyio.Event()

    def nudge(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            try:
                done = await anyio.to_thread.run_sync(self.step)
                if done:
                    if time.monotonic() - self._lag_counted > LAG_EVERY_S:
                        self.lag = await anyio.to_thread.run_sync(self.count)
                        self._lag_counted = time.monotonic()
                    await anyio.sleep(0)  # let requests run between batches
                    continue
                self.lag = 0
            except Exception as exc:  # a failing batch is retried later; the worker never dies
                log.warning("%s batch failed: %s", self.name, where(exc))
            with anyio.move_on_after(self.idle_s):
                await self._wake.wait()
            self._wake = anyio.Event()
