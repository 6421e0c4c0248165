"""What keeps a retrieve near its engines' floors: constraints applied only to the pks an engine
ranked (one statement when everything is permitted), the exact fallback when little is, statements
built once, a cursor table swept now and then. Every path still answers exactly what the slow one did."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, bindparam, event, insert, select
from sqlalchemy.engine import Engine

from connectors.sql.lexical import FullTextConnector
from connectors.sql.vectors import VectorIndex
from connectors.sql.walk import GIVE_UP_AFTER, walk
from core.actor import Actor
from core.instants import utc_now
from core.records import RecallQuery
from core.store import open_store, writer
from core.tables import RetrieveCursor
from gateway.pipeline import cursors
from gateway.writes.items import ingest
from gateway.writes.vectorize import embed_all
from tests.connectors.test_contract import CONSTRAINTS, minilm, note


class Statements:
    """Counts the statements an engine runs (a real SQLite engine, observed through its events)."""

    def __init__(self, engine: Engine) -> None:
        self.count = 0
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, *_: Any) -> None:
        self.count += 1


@pytest.fixture()
def numbers(tmp_path: Path) -> Iterator[tuple[Engine, Table]]:
    """A table of pks 1..100 where only the even ones are 'permitted' (the statement's condition)."""
    engine = open_store(f"sqlite:///{tmp_path / 'walk.db'}")
    table = Table("walk_number", MetaData(), Column("pk", Integer, primary_key=True), Column("parity", String(4)))
    table.create(engine)
    with engine.begin() as conn:
        conn.execute(insert(table), [{"pk": i, "parity": "even" if i % 2 == 0 else "odd"} for i in range(1, 101)])
    yield engine, table
    engine.dispose()


def admitted(table: Table, parity: str | None = None) -> Any:
    statement = select(table).where(table.c.pk.in_(bindparam("walk_pks", expanding=True)))
    return statement.where(table.c.parity == parity) if parity else statement


def test_a_walk_returns_the_first_permitted_pks_in_the_ranked_order(numbers: tuple[Engine, Table]) -> None:
    engine, table = numbers
    ranked = list(range(100, 0, -1))  # best first: 100, 99, ...
    with engine.connect() as conn:
        done = walk(conn, admitted(table, "even"), {}, ranked, 10)
    assert [row.pk for row, _ in done.rows] == list(range(100, 80, -2))
    assert [ranked[position] for row, position in done.rows] == [row.pk for row, _ in done.rows]


def test_a_walk_over_a_fully_permitted_list_costs_one_statement(numbers: tuple[Engine, Table]) -> None:
    engine, table = numbers
    statements = Statements(engine)
    with engine.connect() as conn:
        conn.execute(select(1))  # the connection's own first statements are not the walk's
        before = statements.count
        done = walk(conn, admitted(table), {}, list(range(1, 101)), 50)
        assert statements.count - before == 1
    assert [row.pk for row, _ in done.rows] == list(range(1, 51))


def test_a_walk_that_finds_too_few_stops_early_only_when_allowed_to(numbers: tuple[Engine, Table]) -> None:
    engine, table = numbers
    ranked = list(range(1, 101)) * 4  # 400 pks, none permitted ('none' matches no row)
    with engine.connect() as conn:
        patient = walk(conn, admitted(table, "none"), {}, ranked, 5)
        hasty = walk(conn, admitted(table, "none"), {}, ranked, 5, give_up=True)
    assert patient.rows == [] and patient.done == len(ranked)
    assert hasty.rows == [] and GIVE_UP_AFTER <= hasty.done < len(ranked)


@pytest.fixture()
def crowded(tmp_path: Path) -> Iterator[Engine]:
    """Three permitted notes behind 300 forbidden ones that are nearer to the query."""
    engine = open_store(f"sqlite:///{tmp_path / 'crowded.db'}")
    forbidden = [
        note(f"forbidden_{i}", f"walrus tusk pricing discount offer number {i}", acl=["group:finance"]) for i in range(300)
    ]
    permitted = [
        note("permitted_a", "the walrus discount for annual plans"),
        note("permitted_b", "pricing of tusks in the museum shop"),
        note("permitted_c", "quarterly report on the weather"),
    ]
    assert ingest(engine, "acme", forbidden + permitted).rejected == []
    embed_all(engine, minilm())
    yield engine
    engine.dispose()


def nearest_permitted(engine: Engine, vector: np.ndarray, ids: list[str], k: int) -> list[str]:
    """The reference answer: the permitted items' vectors scored one by one."""
    embedder = minilm()
    texts = {
        "permitted_a": "the walrus discount for annual plans",
        "permitted_b": "pricing of tusks in the museum shop",
        "permitted_c": "quarterly report on the weather",
    }
    scores = {i: float(embedder.embed([texts[i]])[0] @ vector) for i in ids}
    return sorted(scores, key=lambda i: -scores[i])[:k]


@pytest.mark.parametrize("strategy", ["exact", "approximate"])
def test_semantic_search_past_hundreds_of_nearer_forbidden_items_returns_the_best_permitted(
    crowded: Engine, strategy: str
) -> None:
    embedder = minilm()
    vector = embedder.embed(["walrus pricing discount"])[0]
    index = VectorIndex(crowded, embedder.model_id, embedder.dims, ann_min_items=1_000_000)
    query = RecallQuery(text="walrus pricing discount", vector=tuple(float(x) for x in vector), model=embedder.model_id, limit=2)
    found, used = index.nearest_rows(CONSTRAINTS, query, strategy)  # type: ignore[arg-type]
    ids = [row._mapping["id"] for row, _ in found]
    if strategy == "approximate":
        # 303 rows are one cell (connectors/sql/cells.py): the graph's plan scores every row of it
        # exactly and finds the permitted ones itself. Without its cells the graph's window holds
        # too few permitted rows, and the plan gives way to exact search.
        assert used == "approximate"
        with crowded.connect() as conn:
            index.tenant(conn, "acme").cells = None
        again, used_again = index.nearest_rows(CONSTRAINTS, query, "approximate")
        assert used_again == "exact"
        assert [row._mapping["id"] for row, _ in again] == ids
    else:
        assert used == "exact"
    assert ids == nearest_permitted(crowded, vector, ["permitted_a", "permitted_b", "permitted_c"], 2)
    assert all(not i.startswith("forbidden") for i in ids)
    assert [score for _, score in found] == sorted((score for _, score in found), reverse=True)


def test_a_tenant_searched_before_its_first_write_is_found_after_it(tmp_path: Path) -> None:
    """The lexical connector remembers that a tenant's index exists, never that it does not."""
    engine = open_store(f"sqlite:///{tmp_path / 'late.db'}")
    connector = FullTextConnector(engine)
    query = RecallQuery(text="heliotrope", limit=5)
    assert asyncio.run(connector.search(CONSTRAINTS, query)).candidates == ()
    assert ingest(engine, "acme", [note("late_note", "heliotrope in the garden")]).rejected == []
    assert [c.record.id for c in asyncio.run(connector.search(CONSTRAINTS, query)).candidates] == ["late_note"]
    engine.dispose()


def test_expired_cursors_are_swept_by_an_issue_at_most_every_so_often(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = open_store(f"sqlite:///{tmp_path / 'cursors.db'}")
    table = RetrieveCursor.__table__  # type: ignore[attr-defined]
    actor = Actor(id="alice", tenant="acme", roles=("agent",), groups=(), clearance="internal")
    monkeypatch.setattr(cursors, "_SWEPT", type(cursors._SWEPT)())  # this process has not swept this store yet

    def expire_all() -> None:
        with writer(engine).begin() as conn:
            conn.execute(table.update().values(last_used_at=utc_now() - timedelta(hours=2)))

    def rows() -> int:
        with engine.connect() as conn:
            return len(conn.execute(select(table.c.token_hash)).all())

    def issue() -> None:
        cursors.issue(engine, cursors.prepared(engine, actor, {}, [], [], idle_seconds=3600))

    issue()  # the first issue sweeps (nothing to sweep yet)
    issue()
    expire_all()
    issue()  # within the interval: not swept yet
    assert rows() == 3
    monkeypatch.setattr(cursors, "SWEEP_EVERY_S", 0.0)
    issue()
    assert rows() == 2  # the two expired ones went; the two live ones stay
    engine.dispose()


class Plans:
    """The query plan SQLite chose for every statement an engine runs, read on the same connection
    with the same parameters (EXPLAIN QUERY PLAN) right after the statement itself."""

    def __init__(self, engine: Engine) -> None:
        self.plans: list[str] = []
        event.listen(engine, "after_cursor_execute", self._seen)

    def _seen(self, conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
            self.plans.append(" | ".join(str(row[-1]) for row in rows))


def test_named_ids_are_found_through_the_unique_index_not_the_tenants_kinds(tmp_path: Path) -> None:
    """Given `id IN (...)` beside the constraints' `kind IN (...)`, SQLite walked the tenant's
    (tenant, kind) index: a fetch of 10 ids cost ~130 ms in a tenant of 90,000 items, a cheap way for
    one tenant to burn the service's CPU. The ids now go through the unique (tenant, id) index first."""
    from connectors.sql.exact import SqlExactConnector

    engine = open_store(f"sqlite:///{tmp_path / 'ids.db'}")
    try:
        assert not ingest(engine, "acme", [note(f"n{i}", f"note {i}") for i in range(300)]).rejected
        connector = SqlExactConnector(engine)
        plans = Plans(engine)
        result = asyncio.run(connector.search(CONSTRAINTS, RecallQuery(ids=("n7", "n250", "missing"))))
        entities = asyncio.run(connector.linked("acme", ("n7", "ent_jane")))
        assert sorted(c.record.id for c in result.candidates) == ["n250", "n7"] and entities == ()
        looked_up = [plan for plan in plans.plans if "sqlite_autoindex_item_1" in plan]
        assert len(looked_up) == 2, plans.plans  # the fetch and the linked-entity lookup
        for plan in looked_up:
            assert "rowid=?" in plan or "INTEGER PRIMARY KEY" in plan, plan  # the named rows, by their pk
            assert "SCAN item" not in plan, plan
    finally:
        engine.dispose()
