"""pgvector as the semantic connector, on a real PostgreSQL 18 with pgvector 0.8 (tests/embedded_pg.py):
the shared connector contract, planted forbidden items that are the query's nearest neighbours
(through the HNSW index and through the IVFFlat one), a crowd of near-copies, the mirror kept in
step with item_vector, and the gateway's choice of index."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import Engine

import tests.connectors.test_contract as contract
from connectors.sql.pgvector import EXACT_UP_TO, INDEXES, PgvectorConnector, index_name, lists_for, prepare
from connectors.sql.vectors import VectorConnector, VectorIndex
from core.errors import ConfigurationError
from core.records import RecallQuery
from core.store import open_store
from gateway.settings import load_settings
from gateway.writes.items import ingest
from gateway.writes.vectorize import embed_all
from tests.conftest import make_gateway, open_gateway
from tests.connectors.test_contract import CONSTRAINTS, note, store  # noqa: F401 - `store` is a fixture
from tests.embedded_pg import embedded_postgres, fresh_schema, pgvector_url  # noqa: F401 - fixtures

DIMS = 384
PLANTED = "planted-model"


@pytest.fixture
def database_url(pgvector_url: str) -> str:  # noqa: F811 - the contract's stores, on the pgvector server
    return pgvector_url


class TestPgvectorContract(contract.TestSemanticContract):
    """The semantic contract (every filter, tags, tenants, no principals, dead store) on pgvector."""

    def connector(self, store: Engine) -> PgvectorConnector:  # type: ignore[override]  # noqa: F811 - the contract fixture
        embedder = contract.minilm()
        if store.url.port != 1:  # the unreachable-store case has nothing to embed
            assert prepare(store, embedder.dims) is None
            embed_all(store, embedder)
        return PgvectorConnector(store, embedder.model_id, embedder.dims)


# ---------------------------------------------------------------- planted nearest neighbours


def unit(rng: np.random.Generator, n: int) -> np.ndarray[Any, Any]:
    return normalized(rng.standard_normal((n, DIMS)))


def normalized(m: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)


def put_vectors(engine: Engine, tenant: str, vectors: dict[str, np.ndarray[Any, Any]]) -> None:
    """Store vectors for items by id, through item_vector (the trigger fills the mirror)."""
    with engine.begin() as conn:
        pks: dict[str, int] = dict(conn.execute(text("SELECT id, pk FROM item WHERE tenant = :t"), {"t": tenant}).all())
        hashes: dict[int, str] = dict(
            conn.execute(text("SELECT pk, content_hash FROM item WHERE tenant = :t"), {"t": tenant}).all()
        )
        conn.execute(
            text(
                "INSERT INTO item_vector (item_pk, model, dims, vector, content_hash, seq) VALUES (:pk, :m, :d, :v, :h, 1) "
                "ON CONFLICT (item_pk) DO UPDATE SET vector = EXCLUDED.vector, content_hash = EXCLUDED.content_hash"
            ),
            [
                {"pk": pks[i], "m": PLANTED, "d": DIMS, "v": v.astype(np.float32).tobytes(), "h": hashes[pks[i]]}
                for i, v in vectors.items()
            ],
        )


HIDING: dict[str, dict[str, Any]] = {  # every way the policy hides an item, each planted at the query's own vector
    **contract.FORBIDDEN_VARIANTS,
    "hidden_entity": {"entity": "ent_hidden"},
    "tombstoned_entity": {"entity": "ent_gone"},
    "untagged": {},  # permitted, but the caller asks for a tag it lacks
}


@contextmanager
def indexed_store(admin_url: str) -> Iterator[Engine]:
    """A store of its own on the pgvector server, its mirror made (HNSW until `index_built`)."""
    schema = fresh_schema(admin_url)
    url = next(schema)
    engine = open_store(url)
    assert prepare(engine, DIMS) is None
    try:
        yield engine
    finally:
        engine.dispose()
        next(schema, None)  # drops the schema


def index_built(engine: Engine, index: str) -> None:
    """The vector index `index` made over the rows now there (IVFFlat's lists from their count), as
    a gateway started on this store with GATEWAY_PGVECTOR_INDEX=`index` makes it; then statistics."""
    assert prepare(engine, DIMS, index) is None
    with engine.begin() as conn:  # as autovacuum would soon: without statistics the planner guesses one row a table
        conn.execute(text("ANALYZE"))


@pytest.fixture(scope="module", params=INDEXES)
def planted(request: pytest.FixtureRequest, embedded_postgres: str) -> Iterator[tuple[Engine, np.ndarray[Any, Any], str]]:  # noqa: F811
    """~1,900 items: 1,800 forbidden ones (of every kind) sitting on the query vector, 60 permitted
    ones scattered (a 3% selectivity for the permitted-and-tagged), and another tenant's copies;
    served by each vector index in turn."""
    index: str = request.param
    with indexed_store(embedded_postgres) as engine:
        yield from _planted(engine, index)


def _planted(engine: Engine, index: str) -> Iterator[tuple[Engine, np.ndarray[Any, Any], str]]:
    rng = np.random.default_rng(17)
    q = unit(rng, 1)[0]
    rows = [
        {"id": "ent_jane", "kind": "entity", "entity_type": "contact", "acl": ["*"]},
        {"id": "ent_hidden", "kind": "entity", "entity_type": "contact", "acl": ["group:x"]},
        {"id": "ent_gone", "kind": "entity", "entity_type": "contact", "acl": ["*"]},
    ]
    rows += [note(f"forbidden_{name}_{i}", f"x {name} {i}", **variant) for name, variant in HIDING.items() for i in range(150)]
    rows += [note(f"permitted_{i}", f"y {i}", tags=["t"]) for i in range(60)]
    assert ingest(engine, "acme", rows).rejected == []
    assert ingest(engine, "globex", [note(f"globex_{i}", f"z {i}", tags=["t"]) for i in range(300)]).rejected == []
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO entity_tombstone (tenant, entity_id, deleted_at) VALUES ('acme', 'ent_gone', :at)"),
            {"at": datetime(2026, 1, 1, tzinfo=timezone.utc)},
        )
    near = q + 0.001 * unit(rng, 1)[0]
    put_vectors(
        engine,
        "acme",
        {
            **{f"forbidden_{name}_{i}": near for name in HIDING for i in range(150)},
            **dict(zip((f"permitted_{i}" for i in range(60)), normalized(0.3 * q + unit(rng, 60)))),
        },
    )
    put_vectors(engine, "globex", {f"globex_{i}": q for i in range(300)})
    index_built(engine, index)
    yield engine, q, index


def run(connector: PgvectorConnector, where: Any, q: np.ndarray[Any, Any], limit: int, tags: tuple[str, ...] = ("t",)) -> Any:
    query = RecallQuery(text="q", vector=tuple(float(x) for x in q), model=PLANTED, tags=tags, limit=limit)
    return asyncio.run(connector.search(where, query))


# The 60 admitted rows are ranked exactly (they are fewer than `exact_up_to`), or, with a cap below
# their count, searched through the vector index first, with a scan budget ample or spent (then the
# exact fallback finds them). 1,800 identical vectors at the query are more than pgvector's graph
# walks past here, so the iterative scan may give up even with the ample budget: either way the
# answer is the exact one. IVFFlat's budget is spent by reading one list, the crowd's, and no more.
PLANS: dict[str, dict[str, int]] = {
    "admitted ranked exactly": {"exact_up_to": EXACT_UP_TO},
    "index first": {"exact_up_to": 0},
    "index gives up, exact fallback": {"exact_up_to": 0, "max_scan_tuples": 200, "probes": 1, "max_probes": 1},
}


def connector(engine: Engine, index: str, **knobs: Any) -> PgvectorConnector:
    return PgvectorConnector(engine, PLANTED, DIMS, index=index, **knobs)


@pytest.mark.parametrize("plan", PLANS)
def test_forbidden_nearest_neighbours_never_come_back_and_k_permitted_do(
    planted: tuple[Engine, np.ndarray[Any, Any], str], plan: str
) -> None:
    engine, q, index = planted
    result = run(connector(engine, index, ef_search=40, **PLANS[plan]), CONSTRAINTS, q, 10)
    assert result.detail in (
        ("exact search",) if plan == "admitted ranked exactly" else ("exact search", f"{index} iterative search")
    )
    ids = [c.record.id for c in result.candidates]
    assert len(ids) == 10 and all(i.startswith("permitted_") for i in ids), ids
    # The exact answer over the permitted items, computed here from the same vectors.
    with engine.connect() as conn:
        stored = conn.execute(
            text(
                "SELECT i.id, v.vector FROM item_vector v JOIN item i ON i.pk = v.item_pk "
                "WHERE i.tenant = 'acme' AND i.id LIKE 'permitted_%'"
            )
        ).all()
    scores = {row.id: float(np.frombuffer(row.vector, dtype=np.float32) @ q) for row in stored}
    expected = sorted(scores, key=lambda i: -scores[i])[:10]
    # IVFFlat held to one list (of 8) answers from it when it holds 10 permitted rows (where k-means
    # put the scattered ones varies from build to build): permitted, scored right, not the exact 10.
    if not (index == "ivfflat" and PLANS[plan].get("max_probes") == 1 and result.detail != "exact search"):
        assert set(ids) == set(expected)
    got = [c.score for c in result.candidates]
    assert got == sorted(got, reverse=True)
    assert got == pytest.approx([scores[i] for i in ids], abs=1e-5)


def test_the_index_first_plan_goes_through_the_index_built(planted: tuple[Engine, np.ndarray[Any, Any], str]) -> None:
    """The mirror holds the one index chosen, and the index plan's statement reads it."""
    engine, q, index = planted
    with engine.connect() as conn:
        names = set(
            conn.execute(
                text("SELECT indexname FROM pg_indexes WHERE tablename = 'item_pgvector' AND schemaname = current_schema()")
            ).scalars()
        )
    assert index_name(index) in names and not names & {index_name(other) for other in INDEXES if other != index}, names
    with statements(engine) as seen:
        run(connector(engine, index, exact_up_to=0), CONSTRAINTS, q, 10)
    assert index_name(index) in explained(engine, seen)


@pytest.mark.parametrize("exact_up_to", [EXACT_UP_TO, 0])
def test_every_permitted_item_and_nothing_else_at_a_large_k(
    planted: tuple[Engine, np.ndarray[Any, Any], str], exact_up_to: int
) -> None:
    engine, q, index = planted
    result = run(connector(engine, index, exact_up_to=exact_up_to), CONSTRAINTS, q, 500)
    assert sorted(c.record.id for c in result.candidates) == sorted(f"permitted_{i}" for i in range(60))


@pytest.mark.parametrize("exact_up_to", [EXACT_UP_TO, 0])
def test_the_untagged_ask_sees_the_untagged_but_still_no_forbidden(
    planted: tuple[Engine, np.ndarray[Any, Any], str], exact_up_to: int
) -> None:
    engine, q, index = planted
    result = run(connector(engine, index, exact_up_to=exact_up_to), CONSTRAINTS, q, 10, tags=())
    assert [c.record.id.rsplit("_", 1)[0] for c in result.candidates] == ["forbidden_untagged"] * 10


@pytest.mark.parametrize("exact_up_to", [EXACT_UP_TO, 0])
def test_another_tenant_never_leaks_in(planted: tuple[Engine, np.ndarray[Any, Any], str], exact_up_to: int) -> None:
    engine, q, index = planted
    globex = replace(CONSTRAINTS, tenant="globex", subjects=())
    result = run(connector(engine, index, exact_up_to=exact_up_to), globex, q, 50)
    assert len(result.candidates) == 50 and all(c.record.id.startswith("globex_") for c in result.candidates)


# ---------------------------------------------------------------- the plan for a caller who may read half a tenant


@pytest.fixture(scope="module", params=INDEXES)
def halved(request: pytest.FixtureRequest, embedded_postgres: str) -> Iterator[tuple[Engine, np.ndarray[Any, Any], str]]:  # noqa: F811
    """3,000 items, every other one readable by group:even only; the 300 nearest the query are all
    forbidden to that group. At this size the planner, left alone, listed the 1,500 the ACL admits
    and sorted them (an exact search that grows with the tenant) instead of using the vector index."""
    index: str = request.param
    with indexed_store(embedded_postgres) as engine:
        rng = np.random.default_rng(23)
        q = unit(rng, 1)[0]
        rows = [note(f"n{i}", f"n {i}", acl=["group:even" if i % 2 == 0 else "group:odd"], entity=None) for i in range(3000)]
        assert ingest(engine, "halves", rows).rejected == []
        vectors = normalized(0.2 * q + unit(rng, 3000))
        vectors[1:600:2] = normalized(q + 0.01 * unit(rng, 300))  # the nearest neighbours: odd, forbidden to group:even
        put_vectors(engine, "halves", {f"n{i}": vectors[i] for i in range(3000)})
        index_built(engine, index)
        yield engine, q, index


HALF = replace(CONSTRAINTS, tenant="halves", principals=("user:eve", "group:even"), subjects=())


@contextmanager
def statements(engine: Engine) -> Iterator[list[tuple[str, Any]]]:
    """Every statement the engine runs inside the block, with its parameters."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def explained(engine: Engine, seen: list[tuple[str, Any]]) -> str:
    """EXPLAIN of the first search statement of `seen` that is not the count of admitted rows (the
    index's, ahead of any exact fallback), as it ran: with the settings made before it, the same values."""
    at = next(n for n, (sql, _) in enumerate(seen) if "item_pgvector" in sql and "pgv_listed" not in sql)
    with engine.connect() as conn, conn.begin():
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        for sql, parameters in seen[:at]:
            if sql.startswith("SELECT set_config"):
                cursor.execute(sql, parameters)
        cursor.execute("EXPLAIN " + seen[at][0], seen[at][1])
        return "\n".join(row[0] for row in cursor.fetchall())


def test_half_a_tenant_is_searched_through_the_vector_index_and_no_forbidden_row_comes_back(
    halved: tuple[Engine, np.ndarray[Any, Any], str],
) -> None:
    engine, q, index = halved
    connector = PgvectorConnector(engine, PLANTED, DIMS, exact_up_to=500, index=index)
    with statements(engine) as first:
        result = run(connector, HALF, q, 20, tags=())
    with statements(engine) as second:
        again = run(connector, HALF, q, 20, tags=())
    ids = [c.record.id for c in result.candidates]
    assert len(ids) == 20 and all(int(i[1:]) % 2 == 0 for i in ids), ids
    assert result.detail == again.detail == f"{index} iterative search"
    assert [c.record.id for c in again.candidates] == ids
    # The first search counted the admitted rows (more than 500), the second went straight to the index.
    searches = [(sql, parameters) for sql, parameters in first if "item_pgvector" in sql]
    assert len(searches) == 2 and "pgv_listed" in searches[0][0] and "pgv_listed" not in searches[1][0]
    assert [sql for sql, _ in second if "item_pgvector" in sql] == [searches[1][0]]
    # The statement that ran, as it ran (same settings, same values), reads the index built and sorts nothing.
    plan = explained(engine, first)
    assert index_name(index) in plan and "Sort" not in plan, plan
    # The scores are the stored vectors' own; the k nearest admitted rows, as an exact search ranks
    # them, for the graph. (These vectors are noise around the query, with no cells for IVFFlat to
    # find: it reads 8 of its 11 lists and returns the best of those; crowds are tested below.)
    with engine.connect() as conn:
        stored = conn.execute(
            text("SELECT i.id, v.vector FROM item_vector v JOIN item i ON i.pk = v.item_pk WHERE i.tenant = 'halves'")
        ).all()
    scores = {row.id: float(np.frombuffer(row.vector, dtype=np.float32) @ q) for row in stored if int(row.id[1:]) % 2 == 0}
    assert [c.score for c in result.candidates] == pytest.approx([scores[i] for i in ids], abs=1e-5)
    if index == "hnsw":
        expected = sorted(scores, key=lambda i: -scores[i])[:20]
        assert len(set(ids) & set(expected)) >= 18, (ids, expected)


def test_every_search_is_planned_with_its_own_values_even_where_the_server_would_reuse_a_generic_plan(
    halved: tuple[Engine, np.ndarray[Any, Any], str],
) -> None:
    """psycopg prepares a statement run 5 times on a connection, and PostgreSQL may then take a
    generic plan, made without the query vector's and the caller's values: at 100,000 bench items
    it did from the 11th search on a connection, and each search went from milliseconds to
    seconds. Here the connection's own setting asks for generic plans from the start (as the server
    chose there); every search is still planned for its own values."""
    engine, q, index = halved
    own = open_store(engine.url.render_as_string(hide_password=False))  # one connection, used in turn
    with own.connect() as conn:
        conn.execute(text("SET plan_cache_mode = force_generic_plan"))  # the session's, from the commit on
        conn.commit()
    connector = PgvectorConnector(own, PLANTED, DIMS, exact_up_to=500, index=index)
    query = RecallQuery(text="q", vector=tuple(float(x) for x in q), model=PLANTED, limit=20)
    for _ in range(12):  # in this thread, on the pool's one connection (a search's own thread may open another)
        assert connector._search(HALF, query)[1] == f"{index} iterative"
    with own.connect() as conn:
        assert conn.execute(text("SHOW plan_cache_mode")).scalar() == "force_generic_plan"  # the same session
        plans = conn.execute(
            text("SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%item_pgvector%'")
        ).all()
    own.dispose()
    assert plans and max(custom for _, custom in plans) >= 5, plans  # prepared on this connection, and run since
    assert all(generic == 0 for generic, _ in plans), plans


def test_a_caller_admitted_to_few_rows_has_them_ranked_exactly_in_one_statement(
    halved: tuple[Engine, np.ndarray[Any, Any], str],
) -> None:
    engine, q, index = halved
    with statements(engine) as seen:
        result = run(PgvectorConnector(engine, PLANTED, DIMS, index=index), HALF, q, 20, tags=())
    assert result.detail == "exact search" and len(result.candidates) == 20
    assert len([sql for sql, _ in seen if "item_pgvector" in sql]) == 1


# ---------------------------------------------------------------- a crowd of near-copies


@pytest.fixture(scope="module")
def crowd(embedded_postgres: str) -> Iterator[tuple[Engine, np.ndarray[Any, Any]]]:  # noqa: F811
    """4,000 items: 400 near-copies of one text (its vector nudged a little for each, as versions
    or quoted threads are) and 3,600 others scattered; every other item, copies included, readable
    by group:even only. The query is one more near-copy. An IVFFlat index over them (15 lists)."""
    with indexed_store(embedded_postgres) as engine:
        rng = np.random.default_rng(31)
        centre = unit(rng, 1)[0]
        vectors = unit(rng, 4000)
        vectors[:400] = normalized(centre + 0.1 * unit(rng, 400))
        rows = [note(f"c{i}", f"c {i}", acl=["group:even" if i % 2 == 0 else "group:odd"], entity=None) for i in range(4000)]
        assert ingest(engine, "crowd", rows).rejected == []
        put_vectors(engine, "crowd", {f"c{i}": vectors[i] for i in range(4000)})
        index_built(engine, "ivfflat")
        yield engine, normalized((centre + 0.1 * unit(rng, 1)[0])[None, :])[0]


CROWD_PROBES = 8  # fewer than the crowd's 15 lists: the index reads some, not all


def test_among_near_copies_ivfflat_returns_what_exact_search_does(crowd: tuple[Engine, np.ndarray[Any, Any]]) -> None:
    """The crowd lies in a list or two, read whole and ranked exactly: the k nearest admitted
    copies are exactly exact search's, though the index reads fewer lists than it has."""
    engine, q = crowd
    with engine.connect() as conn:
        lists = conn.execute(
            text(
                "SELECT option_value::int FROM pg_class c, pg_options_to_table(c.reloptions) "
                "WHERE c.oid = to_regclass('ix_item_pgvector_ivfflat') AND option_name = 'lists'"
            )
        ).scalar()
        stored = conn.execute(
            text("SELECT i.id, v.vector FROM item_vector v JOIN item i ON i.pk = v.item_pk WHERE i.tenant = 'crowd'")
        ).all()
    assert lists == lists_for(4000) > CROWD_PROBES
    scores = {row.id: float(np.frombuffer(row.vector, dtype=np.float32) @ q) for row in stored if int(row.id[1:]) % 2 == 0}
    crowded = replace(HALF, tenant="crowd")
    for limit in (10, 50):
        result = run(
            PgvectorConnector(engine, PLANTED, DIMS, exact_up_to=0, index="ivfflat", probes=CROWD_PROBES),
            crowded,
            q,
            limit,
            tags=(),
        )
        assert result.detail == "ivfflat iterative search"
        ids = [c.record.id for c in result.candidates]
        exact = sorted(scores, key=lambda i: -scores[i])[:limit]
        # Exact search's k, up to ties in float arithmetic (pgvector's distance and numpy's products
        # differ in the 7th digit): nothing below its k-th score, everything above it.
        kth = scores[exact[-1]]
        assert len(ids) == limit and all(scores[i] >= kth - 1e-6 for i in ids), (ids, exact)
        assert {i for i in exact if scores[i] > kth + 1e-6} <= set(ids), (ids, exact)
        assert [c.score for c in result.candidates] == pytest.approx([scores[i] for i in ids], abs=1e-5)


# ---------------------------------------------------------------- the mirror follows item_vector


def test_the_mirror_holds_exactly_the_stored_float32_and_follows_updates_and_deletes(pgvector_url: str) -> None:  # noqa: F811
    engine = open_store(pgvector_url)
    assert prepare(engine, DIMS) is None
    assert ingest(engine, "acme", [note("a", "first"), note("b", "second")]).rejected == []
    v = unit(np.random.default_rng(3), 1)[0]
    v[0], v[1], v[2] = 1e-40, -0.0, -3.5e30  # a subnormal, a negative zero, a large exponent
    put_vectors(engine, "acme", {"a": v, "b": v})
    mirrored = "SELECT m.embedding::real[], m.content_hash FROM item_pgvector m JOIN item i ON i.pk = m.item_pk WHERE i.id = :id"
    with engine.connect() as conn:
        stored, _ = conn.execute(text(mirrored), {"id": "a"}).one()
    assert np.array_equal(np.array(stored, dtype=np.float32), v)
    put_vectors(engine, "acme", {"a": -v})  # an update in place
    with engine.connect() as conn:
        stored, _ = conn.execute(text(mirrored), {"id": "a"}).one()
    assert np.array_equal(np.array(stored, dtype=np.float32), -v)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM item WHERE id = 'b'"))
        assert conn.execute(text("SELECT count(*) FROM item_pgvector")).scalar() == 1
        # A vector of another size has no place in the column: its mirror row goes.
        conn.execute(text("UPDATE item_vector SET dims = 3, vector = :v"), {"v": np.ones(3, np.float32).tobytes()})
        assert conn.execute(text("SELECT count(*) FROM item_pgvector")).scalar() == 0
    engine.dispose()


def test_an_existing_store_is_backfilled_and_prepare_is_idempotent(pgvector_url: str) -> None:  # noqa: F811
    engine = open_store(pgvector_url)
    assert ingest(engine, "acme", [note(f"n{i}", f"text {i}") for i in range(5)]).rejected == []
    put_vectors(engine, "acme", {f"n{i}": unit(np.random.default_rng(i), 1)[0] for i in range(5)})
    assert prepare(engine, DIMS) is None and prepare(engine, DIMS) is None
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM item_pgvector")).scalar() == 5
        indexes = set(conn.execute(text("SELECT indexdef FROM pg_indexes WHERE tablename = 'item_pgvector'")).scalars())
    assert any("hnsw (embedding vector_cosine_ops)" in i for i in indexes), indexes
    assert "item_pgvector.embedding is vector(384)" in (prepare(engine, 768) or "")
    engine.dispose()


def indexes(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(
            conn.execute(
                text(
                    "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'item_pgvector' AND schemaname = current_schema()"
                )
            ).all()
        )


def test_switching_the_index_swaps_it_and_ivfflat_takes_its_lists_from_the_rows(pgvector_url: str) -> None:  # noqa: F811
    engine = open_store(pgvector_url)
    assert ingest(engine, "acme", [note(f"n{i}", f"text {i}") for i in range(800)]).rejected == []
    put_vectors(engine, "acme", {f"n{i}": v for i, v in enumerate(unit(np.random.default_rng(5), 800))})
    assert prepare(engine, DIMS) is None and set(indexes(engine)) == {
        "item_pgvector_pkey",
        "ix_item_pgvector_tenant",
        "ix_item_pgvector_hnsw",
    }
    assert prepare(engine, DIMS, "ivfflat") is None
    built = indexes(engine)
    assert (
        "ix_item_pgvector_hnsw" not in built
        and "ivfflat (embedding vector_cosine_ops) WITH (lists='3')" in built["ix_item_pgvector_ivfflat"]
    )
    assert prepare(engine, DIMS, "ivfflat") is None and indexes(engine) == built  # ready: nothing rebuilt
    assert prepare(engine, DIMS, "hnsw") is None
    assert set(indexes(engine)) == {"item_pgvector_pkey", "ix_item_pgvector_tenant", "ix_item_pgvector_hnsw"}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM item_pgvector")).scalar() == 800
    engine.dispose()


def test_an_ivfflat_build_short_of_maintenance_work_mem_says_what_to_raise(pgvector_url: str) -> None:  # noqa: F811
    engine = open_store(pgvector_url)
    assert prepare(engine, DIMS) is None
    assert ingest(engine, "acme", [note(f"n{i}", f"text {i}") for i in range(1000)]).rejected == []
    put_vectors(engine, "acme", {f"n{i}": v for i, v in enumerate(unit(np.random.default_rng(7), 1000))})
    engine.dispose()
    starved = open_store(pgvector_url.replace("?options=", "?options=-cmaintenance_work_mem%3D1MB%20"))
    reason = prepare(starved, DIMS, "ivfflat") or ""
    assert "maintenance_work_mem" in reason and "GATEWAY_PGVECTOR_INDEX=hnsw" in reason, reason
    assert "ix_item_pgvector_hnsw" in indexes(starved)  # the build failed whole: the graph still serves
    starved.dispose()


def test_prepare_analyzes_the_searched_tables_a_fresh_load_left_without_statistics(pgvector_url: str) -> None:  # noqa: F811
    """Loaded just before start-up, before autovacuum's ANALYZE: without statistics the planner
    expected one item and had the count of admitted rows read every ACL row once per item."""
    engine = open_store(pgvector_url)
    assert ingest(engine, "acme", [note(f"n{i}", f"text {i}") for i in range(50)]).rejected == []
    never = "SELECT count(*) FROM pg_class WHERE oid IN (to_regclass('item'), to_regclass('item_principal')) AND reltuples < 0"
    with engine.begin() as conn:  # as a migrated store is until its first ANALYZE (autovacuum may have come by)
        conn.execute(text("UPDATE pg_class SET reltuples = -1 WHERE oid IN (to_regclass('item'), to_regclass('item_principal'))"))
        assert conn.execute(text(never)).scalar() == 2
    assert prepare(engine, DIMS) is None
    with engine.connect() as conn:
        assert conn.execute(text(never)).scalar() == 0
        assert conn.execute(text("SELECT reltuples FROM pg_class WHERE oid = to_regclass('item')")).scalar() == 50
    engine.dispose()


def test_a_store_without_the_extension_is_refused_with_the_reason(sqlite_url: str) -> None:
    engine = open_store(sqlite_url)
    assert prepare(engine, DIMS) == "the store is not PostgreSQL"
    engine.dispose()


# ---------------------------------------------------------------- the gateway's choice of index


def live_vector_indexes(engine: Engine) -> list[VectorIndex]:
    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, VectorIndex) and o.engine is engine]


def test_auto_on_pgvector_holds_no_vector_state_and_searches_in_the_store(pgvector_url: str, tmp_path: Path) -> None:  # noqa: F811
    for gateway in make_gateway(pgvector_url, tmp_path, background_embedding=False):
        semantic = gateway.client.app.state.context.connectors.semantic  # type: ignore[attr-defined]
        assert isinstance(semantic.connector, PgvectorConnector)
        assert not hasattr(semantic.connector, "warm") and live_vector_indexes(gateway.store) == []
        jane = {"id": "ent_jane", "kind": "entity", "entity_type": "contact", "email": "jane@globex.example", "acl": ["*"]}
        gateway.ingest("acme", [jane, note("kiwi", "kiwi fruit harvest in the orchard"), note("bolt", "steel bolts and nuts")])
        gateway.embed_all()
        key = gateway.key("alice", groups=("sales",), clearance="confidential")
        ask = {
            "task": {"type": "account_followup", "scope": "sales"},
            "query": "fruit harvest",
            "entities": [{"email": "jane@globex.example"}],
        }
        response = gateway.retrieve(key, ask, semantic=True)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["sources"]["semantic"]["status"] == "ok", body["sources"]
        assert body["sources"]["semantic"]["detail"].startswith(("hnsw iterative search", "exact search"))
        assert "semantic" in next(i["found_by"] for i in body["items"] if i["id"] == "kiwi")
        assert live_vector_indexes(gateway.store) == []


def test_memory_keeps_the_in_process_index(pgvector_url: str, tmp_path: Path) -> None:  # noqa: F811
    with open_gateway(pgvector_url, tmp_path, vector_index="memory", background_embedding=False) as gateway:
        assert isinstance(gateway.client.app.state.context.connectors.semantic.connector, VectorConnector)  # type: ignore[attr-defined]


def test_pgvector_on_sqlite_refuses_to_start_and_says_why(sqlite_url: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="GATEWAY_VECTOR_INDEX=pgvector: the store is not PostgreSQL"):
        with open_gateway(sqlite_url, tmp_path, vector_index="pgvector"):
            pass


def test_ivfflat_is_built_and_searched_by_the_gateway_and_hnsw_comes_back_when_the_setting_does(
    pgvector_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    with open_gateway(pgvector_url, tmp_path, pgvector_index="ivfflat", background_embedding=False) as gateway:
        semantic = gateway.client.app.state.context.connectors.semantic.connector  # type: ignore[attr-defined]
        assert isinstance(semantic, PgvectorConnector) and semantic.index == "ivfflat"
        assert "ix_item_pgvector_ivfflat" in indexes(gateway.store) and "ix_item_pgvector_hnsw" not in indexes(gateway.store)
    with open_gateway(pgvector_url, tmp_path, background_embedding=False) as gateway:
        semantic = gateway.client.app.state.context.connectors.semantic.connector  # type: ignore[attr-defined]
        assert isinstance(semantic, PgvectorConnector) and semantic.index == "hnsw"
        assert "ix_item_pgvector_hnsw" in indexes(gateway.store) and "ix_item_pgvector_ivfflat" not in indexes(gateway.store)


@pytest.mark.parametrize("value", ["ivf", "HNSW", "flat"])
def test_an_unknown_pgvector_index_is_refused_naming_the_setting(value: str) -> None:
    with pytest.raises(ConfigurationError, match="GATEWAY_PGVECTOR_INDEX: expected hnsw or ivfflat"):
        load_settings(environ={"GATEWAY_PGVECTOR_INDEX": value})
    assert load_settings(environ={}).pgvector_index == "hnsw"
    assert load_settings(environ={"GATEWAY_PGVECTOR_INDEX": "ivfflat"}).pgvector_index == "ivfflat"
