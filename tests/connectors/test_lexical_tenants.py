"""One tenant's data changes nothing another tenant can observe in lexical search: not its BM25
scores, not its candidates, not its status, not its semantic `lag`. On SQLite every tenant has its
own FTS5 table (its own statistics); on PostgreSQL the full-text index leads with the tenant."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, insert, inspect, text
from sqlalchemy.engine import Engine

from connectors.sql.lexical import FullTextConnector
from connectors.sql.pushdown import bound
from core.constraints import ItemFilter
from core.records import RecallQuery, SourceResult
from core.store import ensure_tenant_index, lexical_table, open_store
from core.tables import Item, ItemPrincipal
from gateway.writes.documents import parse_document
from gateway.writes.entities import mark_pending_deletion, merge
from gateway.writes.items import ingest, ingest_document
from gateway.writes.vectorize import lag
from tests.conftest import Gateway, fresh_database

item_table = Item.__table__  # type: ignore[attr-defined]
EVERYONE = ItemFilter(
    tenant="acme",
    principals=("*", "user:alice"),
    sensitivities=("public", "internal", "confidential"),
    valid_at=datetime(2026, 11, 30, tzinfo=timezone.utc),
    scopes=("sales",),
    kinds=("entity", "property", "memory", "document"),
    statuses=("active", "superseded", "disputed"),
)
# The store as it was before per-tenant tables: one FTS5 index over every tenant's items.
OLD_SHARED_FTS = [
    "CREATE VIRTUAL TABLE IF NOT EXISTS item_fts USING fts5(text, content='item', content_rowid='pk', tokenize='porter unicode61')",
    """CREATE TRIGGER IF NOT EXISTS item_fts_insert AFTER INSERT ON item BEGIN
         INSERT INTO item_fts(rowid, text) VALUES (new.pk, new.text);
       END""",
    """CREATE TRIGGER IF NOT EXISTS item_fts_delete AFTER DELETE ON item BEGIN
         INSERT INTO item_fts(item_fts, rowid, text) VALUES ('delete', old.pk, old.text);
       END""",
    """CREATE TRIGGER IF NOT EXISTS item_fts_update AFTER UPDATE OF text ON item BEGIN
         INSERT INTO item_fts(item_fts, rowid, text) VALUES ('delete', old.pk, old.text);
         INSERT INTO item_fts(rowid, text) VALUES (new.pk, new.text);
       END""",
]


def note(item_id: str, text_: str, **envelope: Any) -> dict[str, Any]:
    return {"id": item_id, "kind": "memory", "text": text_, "acl": ["*"], **envelope}


def search(engine: Engine, tenant: str, query: str, limit: int = 50) -> SourceResult:
    return asyncio.run(FullTextConnector(engine).search(replace(EVERYONE, tenant=tenant), RecallQuery(text=query, limit=limit)))


def found(engine: Engine, tenant: str, query: str) -> list[str]:
    return [c.record.id for c in search(engine, tenant, query).candidates]


def scored(engine: Engine, tenant: str, query: str) -> list[tuple[str, float]]:
    return [(c.record.id, c.score) for c in search(engine, tenant, query).candidates]


@pytest.fixture
def store(database_url: str) -> Iterator[Engine]:
    engine = open_store(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def sqlite_store(sqlite_url: str) -> Iterator[Engine]:
    engine = open_store(sqlite_url)
    yield engine
    engine.dispose()


def write(engine: Engine, tenant: str, items: list[dict[str, Any]]) -> None:
    report = ingest(engine, tenant, items)
    assert report.rejected == [], report.rejected


# ---------------------------------------------------------------- statistics and candidates


def test_bm25_scores_of_a_tenant_do_not_move_when_another_tenant_writes_the_same_words(sqlite_store: Engine) -> None:
    """SQLite's BM25 reads corpus statistics; PostgreSQL's ts_rank_cd reads none."""
    store = sqlite_store
    write(
        store,
        "acme",
        [
            note("acme_1", "pricing discount for the annual renewal"),
            note("acme_2", "pricing pricing review before the quarterly call"),
            note("acme_3", "discount approval needs the sales director"),
            note("acme_4", "renewal notes without the words"),
        ],
    )
    before = scored(store, "acme", "pricing discount")
    assert [i for i, _ in before] and {i for i, _ in before} == {"acme_1", "acme_2", "acme_3"}
    # Another tenant makes "pricing" common and "discount" rare, which would change IDF in a shared index.
    write(store, "globex", [note(f"globex_{i}", f"pricing update number {i} pricing sheet") for i in range(300)])
    write(store, "globex", [note("globex_discount", "one discount")])
    assert scored(store, "acme", "pricing discount") == before


def assert_empty_for_others(engine: Engine) -> None:
    result = search(engine, "acme", "heliotrope")
    assert result.status == "empty" and result.candidates == ()
    assert len(found(engine, "globex", "heliotrope")) == 50  # the other tenant's own search is unchanged
    assert search(engine, "initech", "heliotrope").status == "empty"  # a tenant that never wrote: empty, not an error


def test_sqlite_a_word_only_another_tenant_holds_is_empty_and_outside_the_candidates(sqlite_store: Engine) -> None:
    write(sqlite_store, "acme", [note(f"acme_{i}", f"renewal notes number {i}") for i in range(20)])
    write(sqlite_store, "globex", [note(f"globex_{i}", f"heliotrope rollout {i}") for i in range(200)])
    assert_empty_for_others(sqlite_store)
    with sqlite_store.connect() as conn:
        acme = lexical_table("acme")
        assert conn.execute(text(f"SELECT count(*) FROM {acme} WHERE {acme} MATCH 'heliotrope'")).scalar_one() == 0
        assert indexed_pks(conn, "acme") == item_pks(conn, "acme")
        assert indexed_pks(conn, "globex") == item_pks(conn, "globex")
        assert FullTextConnector._match_count(conn, "acme", ["heliotrope"], 1000) == 0
        assert FullTextConnector._match_count(conn, "globex", ["heliotrope"], 1000) == 200
        assert not inspect(conn).has_table("item_fts")  # no shared index any more


@pytest.fixture
def postgres_url(tmp_path: Path) -> Iterator[str]:
    yield from fresh_database("postgres", tmp_path)


def test_postgres_a_word_only_another_tenant_holds_is_empty_and_the_index_leads_with_the_tenant(postgres_url: str) -> None:
    engine = open_store(postgres_url)
    try:
        write(engine, "acme", [note(f"acme_{i}", f"renewal notes number {i}") for i in range(20)])
        write(engine, "globex", [note(f"globex_{i}", f"heliotrope rollout {i}") for i in range(2000)])
        assert_empty_for_others(engine)
        with engine.connect() as conn:
            indexes: dict[str, str] = dict(
                conn.execute(
                    text("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'item' AND schemaname = current_schema()")
                ).all()
            )
            assert "USING gin (tenant, tsv) WITH (fastupdate=off)" in indexes["ix_item_tenant_tsv"]  # no shared pending list
            assert not [name for name, ddl in indexes.items() if "USING gin (tsv)" in ddl]  # no index without the tenant
            # Row estimates come from every tenant's statistics; JIT compiling chosen from them would
            # make this tenant's search pay for the other tenant's volume.
            assert conn.execute(text("SHOW jit")).scalar_one() == "off"
            conn.execute(text("ANALYZE"))
            for query in ("heliotrope", "renewal"):
                plan = explain(
                    conn,
                    FullTextConnector(engine)._postgres_statement(EVERYONE, RecallQuery(text=query, limit=10), [query]),
                    bound(EVERYONE),
                )
                item_scans = [n for n in walk(plan) if n.get("Alias") == "item"]
                assert item_scans, plan
                for scan in item_scans:  # the searched rows are reached through the tenant, never around it
                    conditions = [scan.get("Index Cond", "")] + [c.get("Index Cond", "") for c in scan.get("Plans", [])]
                    assert any("tenant" in c for c in conditions), scan
    finally:
        engine.dispose()


def explain(conn: Any, statement: Any, params: dict[str, Any]) -> Any:
    expanded = statement.compile(dialect=conn.dialect).construct_expanded_state(params)
    return conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {expanded.statement}", expanded.parameters).scalar_one()


def walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def indexed_pks(conn: Any, tenant: str) -> set[int]:
    """The rows a tenant's FTS5 table holds (its docsize shadow table has one row per document)."""
    return set(conn.execute(text(f"SELECT id FROM {lexical_table(tenant)}_docsize")).scalars())


def item_pks(conn: Any, tenant: str) -> set[int]:
    return set(conn.execute(text("SELECT pk FROM item WHERE tenant = :t"), {"t": tenant}).scalars())


# ---------------------------------------------------------------- every write path


def check_in_step(engine: Engine, tenants: tuple[str, ...] = ("acme", "globex")) -> None:
    with engine.connect() as conn:
        for tenant in tenants:
            assert indexed_pks(conn, tenant) == item_pks(conn, tenant), tenant
            table = lexical_table(tenant)
            conn.execute(text(f"INSERT INTO {table}({table}) VALUES ('integrity-check')"))


GUIDE = '---\nacl: ["*"]\n---\n# Guide\n\n## Alpha\n\nalphaword section text.\n\n## Beta\n\nbetaword section text.\n\n## Gamma\n\ngammaword section text.\n'


def test_every_write_path_keeps_the_tenant_index_in_step(sqlite_store: Engine) -> None:
    engine = sqlite_store
    write(
        engine,
        "acme",
        [
            note("acme_note", "lyrebird first version"),
            {"id": "ent_a", "kind": "entity", "entity_type": "company", "name": "Lyrebird Alpha", "acl": ["*"]},
            {"id": "ent_b", "kind": "entity", "entity_type": "company", "name": "Lyrebird Beta", "acl": ["*"]},
        ],
    )
    write(engine, "globex", [note("globex_note", "lyrebird for globex")])
    check_in_step(engine)
    assert sorted(found(engine, "acme", "lyrebird")) == ["acme_note", "ent_a", "ent_b"]

    # Update of the text: the old words leave the index, the new ones enter.
    write(engine, "acme", [note("acme_note", "kookaburra second version")])
    check_in_step(engine)
    assert found(engine, "acme", "first") == [] and found(engine, "acme", "kookaburra") == ["acme_note"]
    assert found(engine, "globex", "lyrebird") == ["globex_note"]

    # A document, then a shorter version of it: the pieces beyond the new end are deleted.
    ingest_document(engine, "acme", parse_document("guide", GUIDE))
    check_in_step(engine)
    assert len(found(engine, "acme", "gammaword")) == 1 and len(found(engine, "acme", "betaword")) == 1
    shorter = GUIDE.split("## Beta")[0]
    report = ingest_document(engine, "acme", parse_document("guide", shorter))
    assert report["removed"] >= 2
    check_in_step(engine)
    assert found(engine, "acme", "gammaword") == [] and found(engine, "acme", "betaword") == []
    assert len(found(engine, "acme", "alphaword")) == 1

    # Merge and tombstone change the envelope, not the text: the index stays in step.
    assert merge(engine, "acme", "ent_a", "ent_b")["changed"]
    check_in_step(engine)
    assert mark_pending_deletion(engine, "acme", "ent_b")["changed"]
    check_in_step(engine)
    assert "ent_b" not in found(engine, "acme", "lyrebird")  # hidden by the pushdown, as before

    # A row written by other means (not through ingest) while the tenant had no table is indexed
    # when the table is created.
    with engine.begin() as conn:
        pk = conn.execute(
            insert(item_table)
            .values(  # type: ignore[attr-defined]
                tenant="initech", id="init_1", kind="memory", text="wombat burrow", tags=[], acl=["*"], scope=[], content_hash="h"
            )
            .returning(item_table.c.pk)
        ).scalar_one()  # type: ignore[attr-defined]
        conn.execute(insert(ItemPrincipal.__table__).values(item_pk=pk, principal="*"))  # type: ignore[attr-defined]
    assert search(engine, "initech", "wombat").status == "empty"
    write(engine, "initech", [note("init_2", "wombat second")])
    check_in_step(engine, ("acme", "globex", "initech"))
    assert sorted(found(engine, "initech", "wombat")) == ["init_1", "init_2"]


# ---------------------------------------------------------------- an existing store


def test_a_store_with_the_shared_index_moves_to_per_tenant_tables_at_open(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    open_store(url).dispose()  # the tables; then make it what an old release left behind
    raw = sqlite3.connect(tmp_path / "old.db")
    for name in [r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")]:
        raw.execute(f"DROP TRIGGER {name}")
    for name in [r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%'")]:
        raw.execute(f"DROP TABLE {name}")
    for statement in OLD_SHARED_FTS:
        raw.execute(statement)
    raw.execute("DROP TABLE alembic_version")  # an old release kept no schema revision
    raw.commit()
    raw.close()
    plain = create_engine(url)
    with plain.begin() as conn:
        for n, (tenant, words) in enumerate(
            [
                ("acme", "pricing discount"),
                ("acme", "pricing renewal"),
                ("globex", "pricing heliotrope"),
                ("o'brien", "heliotrope pricing"),
            ]
        ):
            pk = conn.execute(
                insert(item_table)
                .values(  # type: ignore[attr-defined]
                    tenant=tenant,
                    id=f"old_{n}",
                    kind="memory",
                    text=words,
                    tags=[],
                    acl=["*"],
                    scope=[],
                    content_hash=str(n),
                )
                .returning(item_table.c.pk)
            ).scalar_one()  # type: ignore[attr-defined]
            conn.execute(insert(ItemPrincipal.__table__).values(item_pk=pk, principal="*"))  # type: ignore[attr-defined]
        assert conn.execute(text("SELECT count(*) FROM item_fts WHERE item_fts MATCH 'pricing'")).scalar_one() == 4
    plain.dispose()

    engine = open_store(url)
    try:
        with engine.connect() as conn:
            names = set(conn.execute(text("SELECT name FROM sqlite_master")).scalars())
            assert not names & {"item_fts", "item_fts_insert", "item_fts_delete", "item_fts_update"}
            for tenant in ("acme", "globex", "o'brien"):
                assert lexical_table(tenant) in names
                assert indexed_pks(conn, tenant) == item_pks(conn, tenant)
        assert sorted(found(engine, "acme", "pricing")) == ["old_0", "old_1"]
        assert found(engine, "acme", "heliotrope") == []
        assert found(engine, "globex", "heliotrope") == ["old_2"]
        assert found(engine, "o'brien", "pricing") == ["old_3"]
        write(engine, "acme", [note("new_1", "pricing after the move")])
        assert sorted(found(engine, "acme", "pricing")) == ["new_1", "old_0", "old_1"]
    finally:
        engine.dispose()
    again = open_store(url)  # opening again changes nothing
    try:
        assert sorted(found(again, "acme", "pricing")) == ["new_1", "old_0", "old_1"]
        check_in_step(again, ("acme", "globex", "o'brien"))
    finally:
        again.dispose()


# ---------------------------------------------------------------- tenant names in DDL


ODD_TENANTS = ["o'brien", "x'); DROP TABLE item; --", 'say "hi"', "a.:b?c", "ümlaut-Ω", "t' OR '1'='1"]


def test_a_tenant_name_can_neither_break_nor_inject_into_the_ddl(sqlite_store: Engine) -> None:
    for n, tenant in enumerate(ODD_TENANTS):
        write(sqlite_store, tenant, [note(f"odd_{n}", f"platypus number{n}")])
    with sqlite_store.connect() as conn:
        ddl = "\n".join(conn.execute(text("SELECT coalesce(sql, '') FROM sqlite_master")).scalars())
        assert inspect(conn).has_table("item")
        for tenant in ODD_TENANTS:
            assert tenant not in ddl  # only hex digits of the tenant reach the DDL
            assert indexed_pks(conn, tenant) == item_pks(conn, tenant)
    for n, tenant in enumerate(ODD_TENANTS):
        assert found(sqlite_store, tenant, "platypus") == [f"odd_{n}"]
    with sqlite_store.begin() as conn, pytest.raises(ValueError):
        ensure_tenant_index(conn, "nul\x00tenant")


# ---------------------------------------------------------------- semantic lag


def test_lag_counts_one_tenant(store: Engine) -> None:
    write(store, "acme", [note(f"acme_{i}", f"note {i}") for i in range(3)])
    write(store, "globex", [note(f"globex_{i}", f"note {i}") for i in range(25)])
    assert lag(store, "some-model") == 28
    assert lag(store, "some-model", "acme") == 3
    assert lag(store, "some-model", "globex") == 25
    assert lag(store, "some-model", "initech") == 0


def test_semantic_lag_in_a_response_is_the_callers_tenant_only(gateway: Gateway) -> None:
    worker = gateway.client.app.state.context.connectors.semantic.worker  # type: ignore[attr-defined]
    assert worker is not None

    def paused() -> int:
        raise RuntimeError("embedding paused by the test")

    worker.step = paused  # nothing gets embedded: both tenants' items keep waiting
    gateway.ingest("acme", [note(f"acme_{i}", f"renewal pricing note {i}") for i in range(3)])
    gateway.ingest("globex", [note(f"globex_{i}", f"renewal pricing note {i}") for i in range(25)])
    worker.lag = worker.count()  # the store-wide count the worker keeps for its own pacing
    assert worker.lag == 28
    body = {"task": {"type": "research"}, "query": "renewal pricing", "sources": {"semantic": True}}
    acme = gateway.retrieve(gateway.key("agent"), body, semantic=True).json()
    assert acme["sources"]["semantic"]["lag"] == 3, acme["sources"]["semantic"]
    assert "3 items not embedded yet" in acme["sources"]["semantic"]["detail"]
    globex = gateway.retrieve(gateway.key("globex-agent", tenant="globex"), body, semantic=True).json()
    assert globex["sources"]["semantic"]["lag"] == 25
    initech = gateway.retrieve(gateway.key("initech-agent", tenant="initech"), body, semantic=True).json()
    assert not initech["sources"]["semantic"]["lag"]
