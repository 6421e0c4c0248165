"""Work past its deadline stops in the database: the caller answers at once, and the thread that
ran the statement ends within a second instead of finishing the query alone."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from sqlalchemy import text

from connectors.sql.cancel import cancellable, pausing, running, watched
from core.store import close_store, open_store

SLOW = {
    # about 10^9 steps: tens of seconds uninterrupted
    "sqlite": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000000000) SELECT count(*) FROM c",
    "postgresql": "SELECT pg_sleep(30)",
}


def test_a_statement_past_its_deadline_is_interrupted_and_its_thread_ends(database_url: str) -> None:
    engine = open_store(database_url)
    outcome: dict[str, Any] = {}

    def work() -> None:
        started = time.monotonic()
        try:
            with watched(engine) as conn:
                conn.execute(text(SLOW[conn.dialect.name])).all()
            outcome["finished"] = True
        except Exception as exc:  # interrupted: SQLite "interrupted", PostgreSQL "canceling statement"
            outcome["error"] = type(exc).__name__
        outcome["seconds"] = time.monotonic() - started

    async def call() -> float:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            with anyio.fail_after(0.2):
                await cancellable(work)
        return time.monotonic() - started

    try:
        answered = anyio.run(call)
        assert answered < 1.0  # the caller did not wait for the statement
        deadline = time.monotonic() + 2
        while "seconds" not in outcome and time.monotonic() < deadline:
            time.sleep(0.01)
        assert outcome.get("error") is not None and "finished" not in outcome, outcome
        assert outcome["seconds"] < 1.2, outcome  # the thread stopped soon after the deadline
        assert running() == 0
        with engine.connect() as conn:  # the store is fine afterwards, and (PostgreSQL) nothing still sleeps
            assert conn.execute(text("SELECT 1")).scalar_one() == 1
            if conn.dialect.name == "postgresql":
                sleeping = conn.execute(
                    text("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(30)%' AND state = 'active'")
                ).scalar_one()
                assert sleeping == 0
    finally:
        close_store(engine)


def test_work_that_ends_in_time_is_untouched(database_url: str) -> None:
    engine = open_store(database_url)

    def work() -> int:
        with watched(engine) as conn:
            return int(conn.execute(text("SELECT 41 + 1")).scalar_one())

    async def call() -> int:
        with anyio.fail_after(5):
            return await cancellable(work)

    try:
        assert anyio.run(call) == 42
        assert running() == 0
    finally:
        close_store(engine)


def test_a_statement_in_a_pausing_context_pauses_as_it_runs_and_others_do_not(sqlite_url: str) -> None:
    """A heavy call's SQLite statement calls its pause every PAUSE_EVERY steps (gateway/admission.py
    sleeps there while a lighter tenant has calls running); the handler is removed afterwards."""
    engine = open_store(sqlite_url)
    counting = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000) SELECT count(*) FROM n"
    pauses: list[float] = []
    try:
        with pausing(lambda: pauses.append(time.perf_counter())):
            with watched(engine) as conn:
                assert conn.execute(text(counting)).scalar_one() == 200000
        assert len(pauses) > 10
        paused = len(pauses)
        with watched(engine) as conn:  # outside the context, and on a connection that had the handler
            assert conn.execute(text(counting)).scalar_one() == 200000
        assert len(pauses) == paused
    finally:
        close_store(engine)
