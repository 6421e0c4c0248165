"""Closing the store: a connection still out (a search thread abandoned at its deadline) is closed
when it comes back, never left open in a pool nobody holds."""

from __future__ import annotations

from sqlalchemy import text

from core.store import close_store, open_store


def test_a_connection_returned_after_close_is_closed(database_url: str) -> None:
    engine = open_store(database_url)
    late = engine.connect()  # checked out before the store closes, as an abandoned thread's would be
    raw = late.connection.dbapi_connection
    late.execute(text("SELECT 1"))
    close_store(engine)
    late.close()  # the thread finishes and hands it back
    closed = getattr(raw, "closed", None)
    if isinstance(closed, bool):  # psycopg
        assert closed is True
    else:  # sqlite3: a closed connection refuses work
        try:
            raw.execute("SELECT 1")  # type: ignore[union-attr]
        except Exception as exc:
            assert "closed" in str(exc).lower()
        else:
            raise AssertionError("the returned sqlite3 connection is still open")
