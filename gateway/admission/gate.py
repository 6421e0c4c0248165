"""Admission for work that is not a call: a background batch of one tenant's written items.

`Gate.run` waits for a background turn in the fair queue (as an actor of the tenant's own, such as
`background:embedding`): after every waiting call, on seats calls left free, inside the background's
share of them (fair_queue.py). It runs the batch in a worker thread charged to the tenant (its CPU
time and counted work settle its price, and teach the next batch's), and gives the seats back. The
background workers (gateway/background.py) take it as their `Gate`: a tenant's big ingests slow its
own background work, never a call, and the tenant's rate quotas are not charged for them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio.to_thread

from core import work
from gateway.admission.courtesy import holding
from gateway.admission.door import Admission

T = TypeVar("T")

BATCH_SHARE_OF_WAIT = 0.1  # a batch holds its seats about this share of the queue's wait bound


@dataclass(frozen=True, slots=True)
class Gate:
    admission: Admission

    @property
    def batch_s(self) -> float:
        """How long one batch should hold its seats: a tenth of the queue's wait bound (1 s by default)."""
        return self.admission.max_wait_s * BATCH_SHARE_OF_WAIT

    async def run(self, tenant: str, actor: str, estimate: int, job: Callable[[], T]) -> T:
        ticket = await self.admission.enter(tenant, actor, estimate, shape=actor, background=True)
        with holding(ticket):
            return await anyio.to_thread.run_sync(work.timed(job))
