"""Policy reloads across replicas on one PostgreSQL: LISTEN/NOTIFY on one channel.

The replica that switches to a new revision sends the revision (nothing else: no policy text, no
secrets) on `CHANNEL`; every replica listens on a connection of its own and, hearing a revision it
does not serve, reloads from its own policy source. A notification is not queued for a session that
is not listening, so a listener that lost its connection reconnects and then reloads once to catch
up on whatever it missed. NOTIFY reaches every session of the database, whatever its schema: two
deployments sharing a database wake each other, which costs one look at each one's own source.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable

import anyio
import psycopg
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

log = logging.getLogger("gateway.policy")

CHANNEL = "gateway_policy_reload"
LISTENER_NAME = "gateway-policy-listener"  # application_name of the listening session, with the pid (pg_stat_activity)
KEEPALIVE_S = 10.0  # a silent connection is probed this often, so a dead one is noticed
GATHER_S = 0.05  # notifications arriving this close together are answered by one reload
GAP_S = 1.0  # and a flood of them by one reload a second at most
RETRY_S = (0.5, 10.0)  # reconnect delay: first, and the most it doubles to

Heard = Callable[[str], Awaitable[None]]  # called with the newest revision announced
CaughtUp = Callable[[], Awaitable[None]]  # called after a reconnect: reload once, something may be missed


def available(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"


def announce(engine: Engine, revision: str) -> None:
    """Tell every listening replica that `revision` is in force here (delivered at commit)."""
    with engine.begin() as conn:
        conn.execute(select(func.pg_notify(CHANNEL, revision)))


async def listen(engine: Engine, heard: Heard, caught_up: CaughtUp) -> None:
    """Listen until cancelled; reconnects (then calls `caught_up`) whenever the connection drops."""
    delay, connected_before = RETRY_S[0], False
    while True:
        try:
            async with await _connect(engine) as conn:
                await conn.execute(f"LISTEN {CHANNEL}")
                delay = RETRY_S[0]
                if connected_before:  # listening again first, so nothing sent meanwhile is lost
                    log.info("policy listener reconnected; reloading once to catch up")
                    await caught_up()
                connected_before = True
                await _serve(conn, heard)
        except (psycopg.Error, OSError, TimeoutError) as exc:
            log.warning("policy listener lost its connection (%s); reconnecting in %.1f s", type(exc).__name__, delay)
        except Exception as exc:  # never let the listener take the service down with it
            log.error("policy listener failed (%s); starting again in %.1f s", type(exc).__name__, delay)
        await anyio.sleep(delay)
        delay = min(delay * 2, RETRY_S[1])


async def _serve(conn: psycopg.AsyncConnection[object], heard: Heard) -> None:
    while True:
        revisions = [note.payload async for note in conn.notifies(timeout=KEEPALIVE_S, stop_after=1)]
        if not revisions:
            with anyio.fail_after(KEEPALIVE_S):
                await conn.execute("SELECT 1")
            continue
        revisions += [note.payload async for note in conn.notifies(timeout=GATHER_S)]  # a burst: one reload
        await heard(revisions[-1])
        await anyio.sleep(GAP_S)


async def _connect(engine: Engine) -> psycopg.AsyncConnection[object]:
    """A connection of its own (never one of the pool's), with the store's connection settings."""
    _, params = engine.dialect.create_connect_args(engine.url)
    params = {k: v for k, v in params.items() if k != "context"}
    params.setdefault("connect_timeout", 5)
    with anyio.fail_after(KEEPALIVE_S):
        return await psycopg.AsyncConnection.connect(autocommit=True, application_name=f"{LISTENER_NAME} {os.getpid()}", **params)
