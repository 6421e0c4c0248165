"""Admission for work that is not a call: a background batch of one tenant's written items.

`Gate.run` waits for a turn of the tenant's in the fair queue (as an actor of its own, such as
`background:embedding`), runs the batch in a worker thread charged to the tenant (its CPU time and
counted work settle its price, and teach the next batch's), and gives the seats back. The background
workers (gateway/background.py) take it as their `Gate`, so a tenant's big ingests are paid for in
that tenant's share of the service.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import anyio.to_thread

from core import work
from gateway.admission.courtesy import holding
from gateway.admission.door import Admission


@dataclass(frozen=True, slots=True)
class Gate:
    admission: Admission

    async def run(self, tenant: str, actor: str, estimate: int, job: Callable[[], int]) -> int:
        ticket = await self.admission.enter(tenant, actor, estimate, shape=actor)
        with holding(ticket):
            return await anyio.to_thread.run_sync(work.timed(job))
