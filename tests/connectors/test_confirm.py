"""An external index's candidates are re-read from the store inside the constraints."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from sqlalchemy import insert, select
from sqlalchemy.engine import Engine

from connectors.confirm import StoreConfirmed
from connectors.sql.pushdown import item, record_from_row, tombstone
from core.constraints import ItemFilter
from core.instants import utc_now
from core.records import Candidate, RecallQuery, Record, SourceResult
from core.store import open_store
from gateway.writes.items import ingest
from tests.connectors.test_contract import CONSTRAINTS, note


class StaleIndex:
    """An index holding stale copies: returns the first `limit` of the envelopes it was given, and
    records what it was asked and told to forget (the live Weaviate runs in test_weaviate*.py)."""

    name = "semantic"

    def __init__(self, candidates: tuple[Candidate, ...]) -> None:
        self.candidates = candidates
        self.asked: list[int] = []
        self.forgotten: list[tuple[str, tuple[str, ...]]] = []

    async def search(self, constraints: ItemFilter, query: RecallQuery) -> SourceResult:
        self.asked.append(query.limit)
        return SourceResult(self.name, "ok", self.candidates[: query.limit])

    def forget(self, tenant: str, ids: tuple[str, ...]) -> int:
        self.forgotten.append((tenant, ids))
        self.candidates = tuple(c for c in self.candidates if c.record.id not in ids)
        return len(ids)


def test_stale_copies_are_dropped_and_fresh_envelopes_used(database_url: str) -> None:
    engine: Engine = open_store(database_url)
    ingest(engine, "acme", [note("kept", "kept note"), note("rescoped", "note"), note("gone", "note")])
    fresh = _records(engine)
    # Since the index copied them: "rescoped" lost its ACL, "gone" was deleted.
    ingest(engine, "acme", [note("rescoped", "note", acl=["group:finance"])])
    with engine.begin() as conn:
        conn.execute(item.delete().where(item.c.id == "gone"))
    stale = tuple(
        Candidate(replace(fresh[i], text="stale text"), "semantic", n, 0.9 - n / 10)
        for n, i in enumerate(["gone", "rescoped", "kept"], start=1)
    )
    result = asyncio.run(StoreConfirmed(StaleIndex(stale), engine).search(CONSTRAINTS, RecallQuery(text="x")))
    assert [(c.record.id, c.rank, c.record.text) for c in result.candidates] == [("kept", 1, "kept note")]
    engine.dispose()


def test_items_of_an_entity_tombstoned_since_the_copy_are_dropped(database_url: str) -> None:
    """Weaviate's filter cannot know tombstones; the store's re-read applies the pushdown's clause."""
    engine: Engine = open_store(database_url)
    ingest(engine, "acme", [note("about_jane", "note"), {**note("about_nobody", "note"), "entity": None}])
    copied = _records(engine)
    with engine.begin() as conn:
        conn.execute(insert(tombstone).values(tenant="acme", entity_id="ent_jane", deleted_at=utc_now()))
    stale = tuple(Candidate(copied[i], "semantic", n, 0.5) for n, i in enumerate(["about_jane", "about_nobody"], start=1))
    result = asyncio.run(StoreConfirmed(StaleIndex(stale), engine).search(CONSTRAINTS, RecallQuery(text="x")))
    assert [c.record.id for c in result.candidates] == ["about_nobody"]
    engine.dispose()


def test_items_naming_an_entity_the_filter_hides_are_dropped(database_url: str) -> None:
    """Weaviate's filter reads no other rows; the re-read applies the pushdown's linked-entity clause."""
    engine: Engine = open_store(database_url)
    hidden = {"id": "ent_hidden", "kind": "entity", "entity_type": "company", "acl": ["group:finance"]}
    edge = {"id": "edge_hidden", "kind": "edge", "from": "ent_jane", "relation": "works_at", "to": "ent_hidden", "acl": ["*"]}
    ingest(engine, "acme", [hidden, edge, {**note("about_hidden", "note"), "entity": "ent_hidden"}, note("about_jane", "note")])
    copied = _records(engine)
    stale = tuple(
        Candidate(copied[i], "semantic", n, 0.5) for n, i in enumerate(["edge_hidden", "about_hidden", "about_jane"], start=1)
    )
    where = replace(CONSTRAINTS, kinds=(*CONSTRAINTS.kinds, "edge"))
    result = asyncio.run(StoreConfirmed(StaleIndex(stale), engine).search(where, RecallQuery(text="x")))
    assert [c.record.id for c in result.candidates] == ["about_jane"]
    engine.dispose()


def _records(engine: Engine) -> dict[str, Record]:
    with engine.connect() as conn:
        return {row._mapping["id"]: record_from_row(row) for row in conn.execute(select(item))}


def test_stale_copies_nearer_than_k_admitted_items_widen_the_window_and_gone_ones_are_forgotten(database_url: str) -> None:
    """Twelve nearest copies are of pieces the store removed and of items re-shared away: asking for
    5 still returns 5 admitted ones, and the index is told to drop the removed pieces' copies only."""
    engine: Engine = open_store(database_url)
    ingest(
        engine,
        "acme",
        [note(f"removed_{i}", "note") for i in range(6)]
        + [note(f"reshared_{i}", "note") for i in range(6)]
        + [note(f"kept_{i}", "note") for i in range(5)],
    )
    copied = _records(engine)
    ingest(engine, "acme", [note(f"reshared_{i}", "note", acl=["group:finance"]) for i in range(6)])
    with engine.begin() as conn:
        conn.execute(item.delete().where(item.c.id.like("removed_%")))
    order = [f"removed_{i}" for i in range(6)] + [f"reshared_{i}" for i in range(6)] + [f"kept_{i}" for i in range(5)]
    index = StaleIndex(tuple(Candidate(copied[i], "semantic", n, 1 - n / 100) for n, i in enumerate(order, start=1)))
    result = asyncio.run(StoreConfirmed(index, engine).search(CONSTRAINTS, RecallQuery(text="x", limit=5)))
    assert [c.record.id for c in result.candidates] == [f"kept_{i}" for i in range(5)]
    assert [c.rank for c in result.candidates] == [1, 2, 3, 4, 5]
    assert index.asked == [5, 20]  # one wider ask
    forgotten = [i for tenant, ids in index.forgotten for i in ids]
    assert sorted(forgotten) == [f"removed_{i}" for i in range(6)] and {t for t, _ in index.forgotten} == {"acme"}
    engine.dispose()


def test_a_full_page_of_admitted_items_asks_once(database_url: str) -> None:
    engine: Engine = open_store(database_url)
    ingest(engine, "acme", [note(f"kept_{i}", "note") for i in range(8)])
    copied = _records(engine)
    index = StaleIndex(tuple(Candidate(copied[f"kept_{i}"], "semantic", i + 1, 0.5) for i in range(8)))
    result = asyncio.run(StoreConfirmed(index, engine).search(CONSTRAINTS, RecallQuery(text="x", limit=5)))
    assert len(result.candidates) == 5 and index.asked == [5] and index.forgotten == []
    engine.dispose()


def test_an_index_full_of_stale_copies_is_asked_at_most_three_times_within_a_bounded_window(database_url: str) -> None:
    """A flood of copies re-shared away from the caller: the widening stops after two wider asks, its
    window capped, and the answer is empty rather than a scan of the whole index."""
    engine: Engine = open_store(database_url)
    ingest(engine, "acme", [note(f"reshared_{i}", "note") for i in range(300)])
    copied = _records(engine)
    ingest(engine, "acme", [note(f"reshared_{i}", "note", acl=["group:finance"]) for i in range(300)])
    index = StaleIndex(tuple(Candidate(copied[f"reshared_{i}"], "semantic", i + 1, 0.5) for i in range(300)))
    result = asyncio.run(StoreConfirmed(index, engine).search(CONSTRAINTS, RecallQuery(text="x", limit=10)))
    assert result.candidates == () and result.status == "empty"
    assert index.asked == [10, 40, 160] and index.forgotten == []  # re-shared, not gone: nothing is deleted
    engine.dispose()
