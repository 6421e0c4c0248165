"""Closing the store: a connection still out (a search thread abandoned at its deadline) is closed
when it comes back, never left open in a pool nobody holds."""

from __future__ import annotations

import json

from sqlalchemy import JSON, Column, Integer, MetaData, Table, select, text

from core.store import close_store, open_store, read_json


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


def test_json_columns_read_what_orjson_refuses_as_json_would(database_url: str) -> None:
    """JSON columns are read by orjson (issue 46); a value it refuses, planted by a hand in the
    database (NaN, an integer past 64 bits), is read as `json` reads it, never a failed call."""
    planted = ['{"n": NaN}', '{"big": 123456789012345678901234567890}', '["a", {"b": [1, 2.5, null]}]', '"é"']
    for raw in planted:
        assert repr(read_json(raw)) == repr(json.loads(raw))
        assert repr(read_json(raw.encode())) == repr(json.loads(raw))
    engine = open_store(database_url)
    try:
        table = Table("json_probe", MetaData(), Column("id", Integer, primary_key=True), Column("value", JSON))
        with engine.begin() as conn:
            table.drop(conn, checkfirst=True)
            table.create(conn)
            kind = "jsonb" if conn.dialect.name == "postgresql" else "text"
            for number, raw in enumerate(planted[1:]):  # PostgreSQL's JSON refuses NaN itself
                conn.execute(
                    text(f"INSERT INTO json_probe (id, value) VALUES (:id, CAST(:raw AS {kind}))"), {"id": number, "raw": raw}
                )
            read = [row.value for row in conn.execute(select(table.c.value).order_by(table.c.id))]
            table.drop(conn)
        assert read == [json.loads(raw) for raw in planted[1:]]
    finally:
        close_store(engine)
