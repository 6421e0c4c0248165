"""Lexical search through the per-process Tantivy index (connectors/sql/text_index.py): it follows
every write at once, ranks as FTS5 does, and can hide a row but never show one the store refuses."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import Engine

from connectors.sql import text_index
from connectors.sql.cancel import running
from connectors.sql.lexical import FullTextConnector, visibility_groups
from connectors.sql.text_index import INDEXED, TenantText, TextIndex, item, tokens
from core.records import RecallQuery, SourceResult
from core.store import open_store, visibility_tokens
from gateway.writes.items import ingest
from tests.conftest import BACKENDS, fresh_database
from tests.connectors.test_contract import CONSTRAINTS, note


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """A fresh store: a SQLite file, or a PostgreSQL schema (where Tantivy serves lexical search too)."""
    for url in fresh_database(request.param, tmp_path):
        engine = open_store(url)
        yield engine
        engine.dispose()


def sqlite_only(store: Engine) -> None:
    if store.dialect.name != "sqlite":
        pytest.skip("compares Tantivy's ranking with FTS5's")


def search(connector: FullTextConnector, words: str, limit: int = 10, **changes: Any) -> SourceResult:
    return asyncio.run(connector.search(replace(CONSTRAINTS, **changes), RecallQuery(text=words, limit=limit)))


def ids(result: SourceResult) -> list[str]:
    return [c.record.id for c in result.candidates]


def test_the_default_engine_is_tantivy_and_answers_from_it(store: Engine) -> None:
    assert ingest(store, "acme", [note("n1", "walrus tusks"), note("n2", "seal flippers")]).rejected == []
    connector = FullTextConnector(store)
    assert connector.text is not None
    assert ids(search(connector, "walrus")) == ["n1"]
    assert connector.text.readiness() == {"engine": "tantivy", "tenants_ready": 1, "tenants_building": 0}
    assert FullTextConnector(store, engine_name="store").text is None


def test_every_write_is_seen_by_the_next_search(store: Engine) -> None:
    connector = FullTextConnector(store)
    assert ingest(store, "acme", [note("n1", "walrus tusks"), note("n2", "walrus again")]).rejected == []
    assert sorted(ids(search(connector, "walrus"))) == ["n1", "n2"]  # built here
    assert ingest(store, "acme", [note("n1", "narwhal horn"), note("n3", "walrus three")]).rejected == []
    assert sorted(ids(search(connector, "walrus"))) == ["n2", "n3"]  # n1's old words are gone at once
    assert ids(search(connector, "narwhal")) == ["n1"]
    assert ingest(store, "acme", [note("n2", "walrus again", acl=["group:finance"])]).rejected == []
    assert ids(search(connector, "walrus")) == ["n3"]  # an ACL change hides it in the index too
    with store.begin() as conn:
        conn.execute(text("DELETE FROM item WHERE id = 'n3'"))
    assert search(connector, "walrus").candidates == ()
    index = connector.text.state_of("acme") if connector.text is not None else None
    assert index is not None and index.docs == 2  # n3 left the index, n2 stays (hidden by its tokens)


def test_a_forged_index_entry_can_hide_a_row_but_never_show_one(store: Engine) -> None:
    """Someone who could write the index's tokens (or a stale entry) meets the store's own check."""
    connector = FullTextConnector(store)
    assert ingest(store, "acme", [note("secret", "walrus", acl=["group:finance"]), note("open", "walrus")]).rejected == []
    assert ids(search(connector, "walrus")) == ["open"]
    assert connector.text is not None
    index = connector.text.state_of("acme")
    assert index is not None
    with store.connect() as conn:
        secret_pk = conn.execute(text("SELECT pk FROM item WHERE id = 'secret'")).scalar_one()
    with index.lock:  # the entry claims the row is readable by everyone, of every kind
        index.writer.delete_documents("key", str(secret_pk))
        everyone = [t for group in visibility_groups(CONSTRAINTS) or [] for t in group]
        index.add(secret_pk, "walrus walrus walrus", " ".join(everyone))
        index.publish()
    result = search(connector, "walrus")
    assert ids(result) == ["open"] and "secret" not in repr(result)


def test_a_large_tenant_is_built_on_a_thread_while_fts5_answers(store: Engine) -> None:
    sqlite_only(store)
    rows = [note(f"n{i}", f"walrus number {i} " + "filler " * (i % 7)) for i in range(60)]
    assert ingest(store, "acme", rows).rejected == []
    fts5 = ids(search(FullTextConnector(store, engine_name="fts5"), "walrus number", limit=20))
    connector = FullTextConnector(store)
    assert connector.text is not None
    connector.text.build_now_max = 10  # 60 items: too many to build on the caller's time
    first = search(connector, "walrus number", limit=20)
    assert ids(first) == fts5  # FTS5 answered while the index builds
    deadline = time.monotonic() + 30
    while connector.text.readiness()["tenants_ready"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert connector.text.readiness() == {"engine": "tantivy", "tenants_ready": 1, "tenants_building": 0}
    assert ids(search(connector, "walrus number", limit=20)) == fts5  # the same ranking from Tantivy


def test_top_k_is_the_exhaustive_ranking_and_close_to_fts5s(store: Engine) -> None:
    """Tantivy's top ten (pruned, the filter inside the query) is the head of the exhaustive ranking
    of every permitted match. Forbidden rows rank nowhere. (FTS5 ranks by BM25 too, with another
    IDF and exact lengths: bench/quality_bench.py compares the two on SciFact.)"""
    sqlite_only(store)
    words = ["walrus", "tusk", "ice", "floe", "arctic", "seal", "krill", "whale", "shelf", "current"]
    rows = [
        note(f"n{i}", " ".join(words[j] for j in range(10) if (i * (j + 3)) % (j + 2) == 0) + f" filler{i}") for i in range(200)
    ]
    rows += [note(f"hidden{i}", "walrus krill arctic shelf current seal", acl=["group:finance"]) for i in range(50)]
    assert ingest(store, "acme", rows).rejected == []
    tantivy, fts5 = FullTextConnector(store), FullTextConnector(store, engine_name="fts5")
    for query in ("walrus krill", "arctic shelf current", "seal", "whale ice floe tusk", "tusks whales"):
        top, everything = ids(search(tantivy, query)), ids(search(tantivy, query, limit=250))
        assert top == everything[:10] and not any(i.startswith("hidden") for i in everything), query
        assert set(top) & set(ids(search(fts5, query))), query  # ties abound here: SciFact's quality bench compares the two


def test_a_tenants_index_holds_only_its_rows(store: Engine) -> None:
    assert ingest(store, "acme", [note("a1", "walrus")]).rejected == []
    assert ingest(store, "globex", [note(f"g{i}", "walrus walrus") for i in range(30)]).rejected == []
    connector = FullTextConnector(store)
    assert ids(search(connector, "walrus")) == ["a1"]
    assert connector.text is not None
    acme = connector.text.state_of("acme")
    assert acme is not None and acme.docs == 1


def test_the_index_follows_a_store_it_did_not_build_from_the_start(store: Engine) -> None:
    """A second process's index (or one built after a restart) starts from `item` and the log's position."""
    assert ingest(store, "acme", [note("n1", "walrus")]).rejected == []
    first, second = FullTextConnector(store), TextIndex(store)
    assert ids(search(first, "walrus")) == ["n1"]
    assert ingest(store, "acme", [note("n2", "walrus")]).rejected == []
    with store.connect() as conn:
        index = second.state(conn, "acme")
        assert index is not None and index.docs == 2
    assert sorted(ids(search(first, "walrus"))) == ["n1", "n2"]


def test_a_group_every_row_holds_is_left_out_of_the_query_and_one_that_excludes_is_kept(store: Engine) -> None:
    """Kind, sensitivity and status groups that every row meets cost an intersection and exclude
    nothing; as soon as one row lacks them they narrow again, and what they exclude never comes back."""
    assert ingest(store, "acme", [note(f"n{i}", "walrus") for i in range(5)]).rejected == []
    connector = FullTextConnector(store)
    assert ids(search(connector, "walrus", limit=20)) != []
    assert connector.text is not None
    index = connector.text.state_of("acme")
    groups = visibility_groups(CONSTRAINTS)
    assert index is not None and groups is not None
    narrowing = index.narrowing(index.searcher, groups)
    assert narrowing == []  # every row is a memory, internal, active, unscoped and everyone's: the words alone
    assert (
        ingest(store, "acme", [note("sealed", "walrus", status="retracted"), note("hidden", "walrus", acl=["group:x"])]).rejected
        == []
    )
    found = ids(search(connector, "walrus", limit=20))
    assert sorted(found) == [f"n{i}" for i in range(5)]
    narrowing = index.narrowing(index.searcher, groups)
    assert sorted(g[0][0] for g in narrowing) == ["p", "t"]  # a retracted row and a group's row: both narrow again


def test_forged_log_rows_can_make_the_index_forget_a_row_but_never_admit_another_tenants(store: Engine) -> None:
    """Someone who can write `item_change` names another tenant's rows under this tenant: the index
    re-reads them only as this tenant's (`WHERE tenant = ?`), so nothing of globex enters acme's index."""
    assert ingest(store, "acme", [note("a1", "walrus")]).rejected == []
    assert ingest(store, "globex", [note("g1", "walrus secret")]).rejected == []
    connector = FullTextConnector(store)
    assert ids(search(connector, "walrus")) == ["a1"]
    with store.begin() as conn:
        globex_pk, acme_pk = (
            conn.execute(text("SELECT pk FROM item WHERE id = :i"), {"i": i}).scalar_one() for i in ("g1", "a1")
        )
        conn.execute(
            text("INSERT INTO item_change (item_pk, tenant) VALUES (:g, 'acme'), (:a, 'acme')"), {"g": globex_pk, "a": acme_pk}
        )
    result = search(connector, "walrus secret")
    assert ids(result) == ["a1"] and "g1" not in repr(result)
    assert connector.text is not None
    index = connector.text.state_of("acme")
    assert index is not None and index.docs == 1


def test_another_tenants_writes_are_never_applied_on_this_tenants_searches(store: Engine) -> None:
    """A flooding tenant's writes cost its own searches the index commits, never another tenant's."""
    assert ingest(store, "acme", [note("a1", "walrus")]).rejected == []
    assert ingest(store, "globex", [note("g0", "walrus")]).rejected == []
    connector = FullTextConnector(store)
    assert ids(search(connector, "walrus")) == ["a1"]
    assert ids(search(connector, "walrus", tenant="globex")) == ["g0"]
    assert connector.text is not None
    acme, globex = connector.text.state_of("acme"), connector.text.state_of("globex")
    assert acme is not None and globex is not None
    acme_seq, acme_searcher = acme.seq, acme.searcher
    for batch in range(3):
        assert ingest(store, "globex", [note(f"g{batch}_{i}", "walrus flood") for i in range(50)]).rejected == []
        assert ids(search(connector, "walrus")) == ["a1"]
    assert acme.searcher is acme_searcher  # nothing re-read, nothing committed for acme
    assert store.dialect.name != "sqlite" or acme.seq == acme_seq  # (PostgreSQL's position is a horizon of transactions)
    assert globex.docs == 1  # globex's writes wait for globex's own next search
    assert len(ids(search(connector, "walrus flood", limit=200, tenant="globex"))) == 151  # its own search applies them all


def test_a_transaction_that_commits_after_a_later_one_is_still_applied(store: Engine) -> None:
    """PostgreSQL hands out log positions at insert and commits in any order: the index follows the
    transactions, so a write whose transaction began first and commits last is still seen."""
    if store.dialect.name == "sqlite":
        pytest.skip("SQLite commits one writer at a time")
    assert ingest(store, "acme", [note("n1", "narwhal"), note("n2", "narwhal")]).rejected == []
    connector = FullTextConnector(store)
    assert sorted(ids(search(connector, "narwhal"))) == ["n1", "n2"]
    with store.connect() as slow, store.connect() as quick:
        slow.begin()
        slow.execute(text("UPDATE item SET text = 'walrus late' WHERE id = 'n1'"))  # logged first, not committed
        with quick.begin():
            quick.execute(text("UPDATE item SET text = 'walrus early' WHERE id = 'n2'"))  # logged after, committed
        assert ids(search(connector, "walrus")) == ["n2"]
        slow.commit()
    assert sorted(ids(search(connector, "walrus"))) == ["n1", "n2"]
    assert search(connector, "narwhal").candidates == ()
    assert connector.text is not None
    index = connector.text.state_of("acme")
    assert index is not None and index.applied == {}  # every transaction settled: nothing held for another look


def test_the_index_tokens_are_fts5s(tmp_path: Path) -> None:
    """Tantivy's `vis` tokens are computed from the row's columns in Python (on every store); on
    SQLite they equal what FTS5's `vis` column holds, computed in SQL, for every kind of value."""
    engine = open_store(f"sqlite:///{tmp_path}/gateway.db")
    rows = [
        note("plain", "walrus"),
        note("scoped", "walrus", scope=["sales", "region.nord"], acl=["group:a", "user:zoe_1"]),
        note("confidential", "walrus", sensitivity="confidential", status="retracted", acl=["group:finance"]),
    ]
    assert ingest(engine, "acme", rows).rejected == []
    with engine.connect() as conn:
        computed = {row.pk: tokens(row) for row in conn.execute(select(*INDEXED).where(item.c.tenant == "acme"))}
        stored: dict[int, str] = dict(
            conn.execute(text(f"SELECT pk, {visibility_tokens('item')} FROM item WHERE tenant = 'acme'")).all()
        )
    engine.dispose()
    assert len(computed) == 3
    for pk, vis in stored.items():
        assert sorted(vis.lower().split()) == sorted(computed[pk].lower().split()), pk


def one_walrus_indexed(store: Engine) -> tuple[FullTextConnector, TenantText]:
    """A tenant with one item, its Tantivy index built by a first search."""
    assert ingest(store, "acme", [note("n0", "walrus")]).rejected == []
    connector = FullTextConnector(store)
    assert ids(search(connector, "walrus")) == ["n0"]
    assert connector.text is not None
    index = connector.text.state_of("acme")
    assert index is not None and index.docs == 1
    return connector, index


def test_a_bulk_load_is_applied_off_the_callers_time_while_the_store_answers(
    store: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More waiting log rows than CATCH_UP_NOW_MAX are applied on a thread: the search that finds
    them is answered by the store's own engine (it sees every write too), then Tantivy again."""
    monkeypatch.setattr(text_index, "CATCH_UP_NOW_MAX", 5)
    connector, index = one_walrus_indexed(store)
    assert ingest(store, "acme", [note(f"n{i}", "walrus herd") for i in range(1, 21)]).rejected == []
    assert len(ids(search(connector, "walrus", limit=50))) == 21  # every write seen, by the store's engine
    deadline = time.monotonic() + 30
    while (index.catching_up or index.docs < 21) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert index.docs == 21 and not index.catching_up
    assert connector.text is not None
    with store.connect() as conn:
        assert connector.text.state(conn, "acme") is index  # current again: Tantivy answers
    assert len(ids(search(connector, "walrus", limit=50))) == 21


def slow_adds(monkeypatch: pytest.MonkeyPatch, seconds: float) -> list[int]:
    """Each document an index takes costs `seconds` (so a build or catch-up is seen in progress);
    the keys added so far."""
    added: list[int] = []
    real = text_index.TenantText.add

    def add(self: text_index.TenantText, pk: int, body: str, vis: str) -> None:
        added.append(pk)
        time.sleep(seconds)
        real(self, pk, body, vis)

    monkeypatch.setattr(text_index.TenantText, "add", add)
    return added


def index_threads(before: set[threading.Thread]) -> list[str]:
    """The index's threads alive now that were not before."""
    return sorted(t.name for t in threading.enumerate() if t not in before and t.name.startswith("text-index-") and t.is_alive())


def wait_for(condition: Any, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "waited too long"
        time.sleep(0.01)


def idle_in_transaction(store: Engine) -> int:
    """PostgreSQL: the sessions (other than this one) holding a transaction open with nothing running."""
    with store.connect() as conn:
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'"
                )
            ).scalar_one()
        )


def test_close_stops_a_build_in_progress_and_nothing_starts_after_it(store: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """At shutdown a large tenant's build stops at its next chunk and its thread ends; after `close`
    no build starts, small or large, and the store's own engine answers."""
    monkeypatch.setattr(text_index, "READ_CHUNK", 5)
    assert ingest(store, "acme", [note(f"n{i}", f"walrus {i}") for i in range(60)]).rejected == []
    before = set(threading.enumerate())
    connector = FullTextConnector(store)
    assert connector.text is not None
    connector.text.build_now_max = 10  # built on a thread
    added = slow_adds(monkeypatch, 0.02)  # ~1.2 s of building
    assert len(ids(search(connector, "walrus", limit=100))) == 60  # the store's engine answers meanwhile
    wait_for(lambda: len(added) >= 5)
    assert index_threads(before) == ["text-index-build"]
    connector.close()
    assert index_threads(before) == []
    assert len(added) < 60  # stopped, not built to the end
    assert connector.text.readiness() == {"engine": "tantivy", "tenants_ready": 0, "tenants_building": 0}
    assert connector.text.state_of("acme") is None
    done = len(added)
    connector.text.build_now_max = 1_000  # a small tenant now: not built on the search's time either
    assert len(ids(search(connector, "walrus", limit=100))) == 60
    connector.text.warm()
    with store.connect() as conn:
        assert connector.text.state(conn, "acme") is None
    assert index_threads(before) == [] and len(added) == done and connector.text.state_of("acme") is None


def test_close_stops_a_catch_up_in_progress(store: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bulk load's catch-up thread stops at its next chunk; nothing half-applied is published."""
    monkeypatch.setattr(text_index, "CATCH_UP_NOW_MAX", 5)
    monkeypatch.setattr(text_index, "APPLY_CHUNK", 5)
    connector, index = one_walrus_indexed(store)
    before = set(threading.enumerate())
    added = slow_adds(monkeypatch, 0.02)
    assert ingest(store, "acme", [note(f"n{i}", "walrus herd") for i in range(1, 61)]).rejected == []
    assert len(ids(search(connector, "walrus", limit=100))) == 61  # the store's engine; the catch-up on its thread
    wait_for(lambda: len(added) >= 5)
    assert index_threads(before) == ["text-index-catch-up"]
    connector.close()
    assert index_threads(before) == []
    assert len(added) < 60 and not index.catching_up
    index.index.reload()
    assert index.index.searcher().num_docs == 1  # what it had applied was rolled back, never published


def test_a_search_given_up_during_a_first_build_leaves_nothing_open(store: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A small tenant's first build runs on the search's own connection: when the deadline gives up
    on the search, the build stops at its next chunk and the connection goes, with no transaction
    left open (PostgreSQL), so the schema can be dropped at once (the fresh-clone suite once
    deadlocked there, on a build's snapshot held by a connection nobody could cancel)."""
    monkeypatch.setattr(text_index, "READ_CHUNK", 5)
    assert ingest(store, "acme", [note(f"n{i}", f"walrus {i}") for i in range(50)]).rejected == []
    connector = FullTextConnector(store)
    assert connector.text is not None
    added = slow_adds(monkeypatch, 0.02)  # ~1 s to build, in the search's thread

    async def given_up() -> None:
        with anyio.fail_after(0.3):
            await connector.search(CONSTRAINTS, RecallQuery(text="walrus", limit=10))

    with pytest.raises(TimeoutError):
        anyio.run(given_up)
    wait_for(lambda: running() == 0, 5)
    assert len(added) < 50  # stopped, not built to the end
    assert connector.text.state_of("acme") is None  # forgotten: the next search builds it again
    postgres = store.dialect.name == "postgresql"
    if postgres:
        assert idle_in_transaction(store) == 0
    assert len(ids(search(connector, "walrus", limit=100))) == 50
    assert connector.text.readiness()["tenants_ready"] == 1
    connector.close()
    if postgres:
        assert idle_in_transaction(store) == 0
        with store.connect() as conn:
            schema = conn.execute(text("SELECT current_schema()")).scalar_one()
        with store.connect() as conn:  # dropped (then rolled back: the fixture drops it), waiting 5 s at most for a lock
            conn.execute(text("SET LOCAL lock_timeout = '5s'"))
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
            conn.rollback()


def test_what_commits_around_a_postgres_build_is_applied_by_the_next_catch_up(
    store: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL a build reads the horizon, then the rows in a later statement, holding no
    snapshot between them. A write that commits in between is in the rows and applied again (once
    more, not twice); a transaction running at the horizon that commits after the rows were read
    is applied by the next search's catch-up."""
    if store.dialect.name == "sqlite":
        pytest.skip("SQLite reads the position and the rows in one transaction")
    assert ingest(store, "acme", [note(f"n{i}", "narwhal") for i in (1, 2, 3)]).rejected == []
    connector = FullTextConnector(store)
    real = text_index._horizon
    with store.connect() as running_at_horizon, store.connect() as between:
        running_at_horizon.begin()
        running_at_horizon.execute(text("UPDATE item SET text = 'walrus late' WHERE id = 'n1'"))

        def horizon(conn: Any) -> int:
            read = real(conn)
            with between.begin():  # commits after the horizon was read, before the rows are
                between.execute(text("UPDATE item SET text = 'walrus between' WHERE id = 'n2'"))
            return read

        monkeypatch.setattr(text_index, "_horizon", horizon)
        assert ids(search(connector, "walrus")) == ["n2"]  # built here; n1's transaction has not committed
        monkeypatch.setattr(text_index, "_horizon", real)
        running_at_horizon.commit()
    assert sorted(ids(search(connector, "walrus"))) == ["n1", "n2"]
    assert ids(search(connector, "narwhal")) == ["n3"]
    assert connector.text is not None
    index = connector.text.state_of("acme")
    assert index is not None and index.docs == 3 and index.applied == {}


def test_warm_builds_every_tenant_on_a_thread_that_close_stops(store: Engine) -> None:
    assert ingest(store, "acme", [note("a1", "walrus")]).rejected == []
    assert ingest(store, "globex", [note("g1", "walrus")]).rejected == []
    before = set(threading.enumerate())
    index = TextIndex(store)
    index.warm()
    wait_for(lambda: index.readiness()["tenants_ready"] == 2)
    wait_for(lambda: index_threads(before) == [])
    index.close()
    assert index_threads(before) == []
    with store.connect() as conn:
        assert index.state(conn, "acme") is None  # closed: the store's engine answers
