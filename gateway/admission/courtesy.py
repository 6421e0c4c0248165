"""Courtesy: a call of a busier tenant gives way to lighter tenants' calls while it runs.

The fair queue decides which call starts; once running, calls compete for the interpreter and two
cores. So a call gives way at its stage boundaries (`give_way`) when it is heavy (priced or
measured above one unit) or its tenant is crowded (CROWDED_UNITS in flight): while a tenant with
fewer units in flight has calls running, it waits a few milliseconds at a time (at most
COURTESY_MAX_S per boundary, DOOR_COURTESY_MAX_S before it starts) and the trace records how long.
A heavy call's SQLite statements give way from inside too (connectors/sql/cancel.py `pausing`).
A tenant with fewer units in flight never waits, nor do tenants with equal work in flight.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import anyio

from connectors.sql.cancel import pausing
from core import work
from gateway.admission.door import Ticket

COURTESY_STEP_S = 0.005  # how often a heavy call that gives way looks again
COURTESY_MAX_S = 0.05  # the longest it waits at one stage boundary
DOOR_COURTESY_MAX_S = 0.25  # the longest a crowded tenant's call waits before it starts (`give_way` at the door)

_HELD: ContextVar[Ticket | None] = ContextVar("gateway_admission_ticket", default=None)


def held() -> Ticket | None:
    """The running call's ticket (None outside an admitted call)."""
    return _HELD.get()


@contextmanager
def holding(ticket: Ticket, *, release: bool = True) -> Iterator[Ticket]:
    """The block runs as the ticket's call (`give_way` reads it) and is metered; after it the call
    is settled and, unless `release` is False (the caller gives the seats back later, after the
    audit write), its seats are given back."""
    token = _HELD.set(ticket)
    try:
        with work.metering(ticket.meter):
            if ticket.admission is not None:
                with pausing(lambda: _wait_sync(ticket)):
                    yield ticket
            else:
                yield ticket
    finally:
        _HELD.reset(token)
        if release:
            ticket.release()
        ticket.used = ticket.meter.units()
        if ticket.admission is not None:
            ticket.admission.settle(ticket)


def _wait_sync(ticket: Ticket) -> None:
    """`give_way` for a worker thread (a running statement): sleeps instead of awaiting."""
    assert ticket.admission is not None
    if not ticket.yields():
        return
    started = time.perf_counter()
    while ticket.admission.outweighed(ticket.tenant) and time.perf_counter() - started < COURTESY_MAX_S:
        time.sleep(COURTESY_STEP_S)
    waited = (time.perf_counter() - started) * 1000
    if waited >= 1:
        ticket.gave_way_ms += waited  # approximate under concurrent sources: a report, not a limit


async def give_way(longest_s: float = COURTESY_MAX_S, ticket: Ticket | None = None) -> None:
    """At a stage boundary of a call that yields (heavy, or of a crowded tenant): wait while a tenant
    with fewer units in flight has calls running, a few milliseconds at a time and at most
    `longest_s`, so the interpreter serves that tenant first. Other calls, and calls outside
    admission, go on at once. The call is the running one, or `ticket` after its block ended (its
    audit write)."""
    ticket = ticket or _HELD.get()
    if ticket is None or ticket.admission is None or not ticket.yields():
        return
    started = time.perf_counter()
    while ticket.admission.outweighed(ticket.tenant) and time.perf_counter() - started < longest_s:
        await anyio.sleep(COURTESY_STEP_S)
    ticket.gave_way_ms += (time.perf_counter() - started) * 1000
