"""The Weaviate semantic connector: its filter translation checked as data and against SQL, the
refusals it owes, and the connector contract against a live Weaviate when one is configured."""

from __future__ import annotations

import asyncio
import math
import random
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import Engine
from weaviate.classes.config import DataType, Tokenization, VectorDistances
from weaviate.collections.classes.filters import _FilterAnd, _FilterOr, _FilterValue, _Operator
from weaviate.collections.filters import _FilterToGRPC, _FilterToREST

from connectors.sql.pushdown import bound, item, permitted, record_from_row, tagged
from connectors.weaviate import (
    FILTERED,
    HANDLED_FIELDS,
    NOT_ITEM_FILTERS,
    NOTHING,
    SCHEMA,
    VECTOR,
    WeaviateConnector,
    _properties,
    constraints_filter,
    properties_of,
    record_of,
    schema_description,
    schema_problems,
    to_weaviate,
    weaviate_tenant,
)
from core.constraints import ItemFilter
from core.errors import ConnectorError
from core.instants import parse_rfc3339
from core.records import RecallQuery, Record
from core.store import open_store
from core.tables import KINDS, SENSITIVITIES, STATUSES
from gateway.pipeline.recall import run_source
from gateway.writes.items import ingest
from tests.connectors.test_contract import CONSTRAINTS, FORBIDDEN_VARIANTS, contract_rows
from tests.engines import Endpoint

MODEL = "test-embedding-v1"
DIMS = 16
AT = "2026-11-30T00:00:00Z"


def load(engine: Engine, rows_by_tenant: dict[str, list[dict[str, Any]]]) -> dict[str, list[Record]]:
    for tenant, rows in rows_by_tenant.items():
        assert ingest(engine, tenant, rows).rejected == []
    with engine.connect() as conn:
        records = [record_from_row(row) for row in conn.execute(select(item).order_by(item.c.pk))]
    return {tenant: [r for r in records if r.tenant == tenant] for tenant in rows_by_tenant}


@pytest.fixture
def contract_store(sqlite_url: str) -> Iterator[tuple[Engine, dict[str, list[Record]]]]:
    engine = open_store(sqlite_url)
    yield engine, load(engine, contract_rows())
    engine.dispose()


def dead_connector() -> WeaviateConnector:
    """Nothing listens on these ports: every call that reaches the network fails."""
    return WeaviateConnector("http://127.0.0.1:1", grpc_port=2, model=MODEL, dims=DIMS, timeout_s=2)


def vector_query(**overrides: Any) -> RecallQuery:
    return RecallQuery(**{"text": "pricing", "vector": (1.0,) + (0.0,) * (DIMS - 1), "model": MODEL, **overrides})


# ---------------------------------------------------------------- translation as data


def test_the_contract_constraints_translate_to_this_tree() -> None:
    assert constraints_filter(CONSTRAINTS) == {
        "all": [
            {"property": "kind", "op": "contains_any", "value": ["property", "memory", "document"]},
            {"property": "sensitivity", "op": "contains_any", "value": ["public", "internal", "confidential"]},
            {"property": "status", "op": "contains_any", "value": ["active", "superseded", "disputed"]},
            {
                "any": [
                    {"property": "valid_from", "op": "is_none", "value": True},
                    {"property": "valid_from", "op": "less_or_equal", "value": AT},
                ]
            },
            {
                "any": [
                    {"property": "valid_to", "op": "is_none", "value": True},
                    {"property": "valid_to", "op": "greater_than", "value": AT},
                ]
            },
            {"property": "acl", "op": "contains_any", "value": ["user:alice", "*", "group:sales", "role:agent"]},
            {
                "any": [
                    {"property": "scoped", "op": "equal", "value": False},
                    {"property": "scope", "op": "contains_any", "value": ["sales"]},
                ]
            },
            {
                "any": [
                    {"property": "attached_to", "op": "is_none", "value": True},
                    {"property": "attached_to", "op": "contains_any", "value": ["ent_jane"]},
                ]
            },
        ]
    }


@pytest.mark.parametrize(
    "change", [{"principals": ()}, {"kinds": ()}, {"sensitivities": ()}, {"statuses": ()}, {"principals": (" user:alice",)}]
)
def test_constraints_that_admit_nothing_translate_to_nothing_never_to_no_filter(change: dict[str, Any]) -> None:
    assert constraints_filter(replace(CONSTRAINTS, **change)) == NOTHING
    with pytest.raises(ConnectorError):
        to_weaviate(NOTHING)


def test_empty_scopes_and_subjects_keep_only_the_unscoped_and_unattached_branches() -> None:
    clauses = constraints_filter(replace(CONSTRAINTS, scopes=(), subjects=()))["all"]
    assert {"property": "scoped", "op": "equal", "value": False} in clauses
    assert {"property": "attached_to", "op": "is_none", "value": True} in clauses
    assert not any(c.get("property") in ("scope",) for c in clauses)


def test_caller_tags_are_anded_and_never_replace_the_constraints() -> None:
    plain = constraints_filter(CONSTRAINTS)["all"]
    tagged_tree = constraints_filter(CONSTRAINTS, ("pricing", "vip", "pricing"))["all"]
    assert tagged_tree[:-1] == plain
    assert tagged_tree[-1] == {"property": "tags", "op": "contains_all", "value": ["pricing", "vip"]}
    assert constraints_filter(replace(CONSTRAINTS, principals=()), ("pricing",)) == NOTHING
    assert constraints_filter(CONSTRAINTS, ("pricing", "")) == NOTHING  # no item carries an empty tag


@dataclass(frozen=True, slots=True)
class FutureConstraints(ItemFilter):
    region: str | None = None


def test_an_unknown_constraint_with_a_value_is_refused_never_dropped() -> None:
    base = {f.name: getattr(CONSTRAINTS, f.name) for f in fields(CONSTRAINTS)}
    assert constraints_filter(FutureConstraints(**base)) == constraints_filter(CONSTRAINTS)
    with pytest.raises(ConnectorError, match="region"):
        constraints_filter(FutureConstraints(**base, region="eu"))
    with pytest.raises(ConnectorError):
        asyncio.run(dead_connector().search(FutureConstraints(**base, region="eu"), vector_query()))


def test_every_constraints_field_is_accounted_for() -> None:
    """A new ItemFilter field fails here first: decide its translation, or that it filters no item."""
    assert {f.name for f in fields(ItemFilter)} == HANDLED_FIELDS | NOT_ITEM_FILTERS


def test_to_weaviate_builds_the_same_structure() -> None:
    built = to_weaviate(constraints_filter(CONSTRAINTS, ("pricing",)))
    assert isinstance(built, _FilterAnd) and len(built.filters) == 9
    kind = built.filters[0]
    assert isinstance(kind, _FilterValue)
    assert (kind.target, kind.operator, kind.value) == ("kind", _Operator.CONTAINS_ANY, ["property", "memory", "document"])
    valid_from = built.filters[3]
    assert isinstance(valid_from, _FilterOr)
    null, before = valid_from.filters
    assert isinstance(null, _FilterValue) and (null.target, null.operator, null.value) == ("valid_from", _Operator.IS_NULL, True)
    assert isinstance(before, _FilterValue) and before.operator == _Operator.LESS_THAN_EQUAL
    assert before.value == datetime(2026, 11, 30, tzinfo=timezone.utc)
    tags = built.filters[-1]
    assert isinstance(tags, _FilterValue) and (tags.target, tags.operator) == ("tags", _Operator.CONTAINS_ALL)
    # Both wire forms accept it (the client refuses e.g. empty lists here, before any server).
    assert _FilterToGRPC.convert(built) is not None
    assert _FilterToREST.convert(built)["operator"] == "And"
    lean = to_weaviate(constraints_filter(replace(CONSTRAINTS, scopes=(), subjects=())))
    assert _FilterToGRPC.convert(lean) is not None


@pytest.mark.parametrize(
    "tree",
    [
        {"all": []},
        {"any": []},
        {"property": "tenant", "op": "equal", "value": "acme"},
        {"property": "kind", "op": "like", "value": "m*"},
        {"property": "kind", "op": "contains_any", "value": []},
        {"property": "kind", "op": "less_or_equal", "value": AT},
        {"where": 1},
    ],
)
def test_to_weaviate_refuses_what_it_cannot_express(tree: dict[str, Any]) -> None:
    with pytest.raises(ConnectorError):
        to_weaviate(tree)


def test_tenant_names_map_one_to_one_onto_weaviate_tenants() -> None:
    names = ["acme", "acme_eu", "acme__eu", "acme.eu", "acme_deu", "a@b:c", "A-b", "x" * 64]
    mapped = [weaviate_tenant(n) for n in names]
    assert mapped[0] == "acme" and mapped[6] == "A-b"
    assert len(set(mapped)) == len(names)
    for bad in ("x" * 65, "a" * 40 + "." * 20, "café", ""):
        with pytest.raises(ConnectorError):
            weaviate_tenant(bad)


# ---------------------------------------------------------------- semantic equivalence with SQL


def holds(node: dict[str, Any], obj: dict[str, Any]) -> bool:
    """A reference reading of the filter tree over one object's properties, as Weaviate reads it with
    `field` tokenization: exact strings; a missing property is null and satisfies only is_none."""
    if node == NOTHING:
        return False
    if "all" in node:
        assert node["all"]
        return all(holds(child, obj) for child in node["all"])
    if "any" in node:
        assert node["any"]
        return any(holds(child, obj) for child in node["any"])
    prop, op, value = node["property"], node["op"], node["value"]
    have = obj.get(prop)
    if op == "is_none":
        return (have is None) is value
    if have is None:
        return False
    values = set(have) if isinstance(have, list) else {have}
    if op == "contains_any":
        assert value
        return bool(values & set(value))
    if op == "contains_all":
        assert value
        return set(value) <= values
    if op == "equal":
        return bool(have == value)
    instant, bound = parse_rfc3339(have), parse_rfc3339(value)
    return instant <= bound if op == "less_or_equal" else instant > bound


INSTANTS = ["2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z", AT, "2027-01-01T00:00:00Z"]
PRINCIPAL_POOL = ["*", "user:alice", "user:bob", "group:sales", "group:finance", "role:agent", "group:x"]
SCOPE_POOL = ["sales", "support", "eng"]
SUBJECT_POOL = ["ent_jane", "ent_other"]
TAG_POOL = ["pricing", "vip", "legal"]


def random_item(rng: random.Random, i: int) -> dict[str, Any]:
    kind = rng.choice(KINDS)
    row: dict[str, Any] = {
        "id": f"random_{i}",
        "kind": kind,
        "acl": rng.sample(PRINCIPAL_POOL, rng.randint(1, 3)),
        "sensitivity": rng.choice(SENSITIVITIES),
        "status": rng.choice(STATUSES),
        "scope": rng.sample(SCOPE_POOL, rng.randint(0, 2)),
        "tags": rng.sample(TAG_POOL, rng.randint(0, 2)),
    }
    row.update(
        {
            "memory": {"text": "a memory"},
            "document": {"text": "a page"},
            "property": {"name": "plan", "value": "gold"},
            "entity": {"entity_type": "company"},
            "edge": {"from": "ent_jane", "to": "ent_other", "relation": "knows"},
        }[kind]
    )
    start, end = rng.choice([None, *INSTANTS]), rng.choice([None, *INSTANTS])
    if start is not None and end is not None and end <= start:
        end = None
    row.update({k: v for k, v in (("valid_from", start), ("valid_to", end)) if v is not None})
    attached = rng.choice([None, None, *SUBJECT_POOL])
    if attached:
        row["attached_to"] = attached
    return row


def random_constraints(rng: random.Random) -> tuple[ItemFilter, tuple[str, ...]]:
    def some(pool: list[str] | tuple[str, ...], low: int = 0) -> tuple[str, ...]:
        return tuple(rng.sample(list(pool), rng.randint(low, len(pool))))

    constraints = ItemFilter(
        tenant="acme",
        principals=some(PRINCIPAL_POOL),
        sensitivities=some(SENSITIVITIES),
        scopes=some(SCOPE_POOL),
        valid_at=parse_rfc3339(rng.choice([*INSTANTS, "2026-03-15T12:30:00Z", "2026-11-29T23:59:59.999999Z"])),
        kinds=some(KINDS),
        statuses=some(STATUSES),
        subjects=some(SUBJECT_POOL),
        history=rng.random() < 0.3,
    )
    return constraints, some(TAG_POOL + ["absent"]) if rng.random() < 0.4 else ()


def sql_ids(engine: Engine, constraints: ItemFilter, tags: tuple[str, ...]) -> set[str]:
    """What the pushdown admits on the item's own envelope. The rules that read other rows (a linked
    entity the filter hides, a tombstone) cannot be written as a Weaviate filter; StoreConfirmed applies
    them when it re-reads the candidates (tests/connectors/test_confirm.py)."""
    with engine.connect() as conn:
        return set(conn.execute(select(item.c.id).where(permitted(links=False), tagged(tags)), bound(constraints)).scalars())


def tree_ids(records: list[Record], constraints: ItemFilter, tags: tuple[str, ...]) -> set[str]:
    tree = constraints_filter(constraints, tags)
    return {r.id for r in records if holds(tree, properties_of(r))}


NAMED_VARIANTS: dict[str, tuple[ItemFilter, tuple[str, ...]]] = {
    "contract": (CONSTRAINTS, ()),
    "tags": (CONSTRAINTS, ("pricing",)),
    "no principals": (replace(CONSTRAINTS, principals=()), ()),
    "no scopes": (replace(CONSTRAINTS, scopes=()), ()),
    "no subjects": (replace(CONSTRAINTS, subjects=()), ()),
    "all sensitivities": (replace(CONSTRAINTS, sensitivities=SENSITIVITIES), ()),
    "all statuses and kinds": (replace(CONSTRAINTS, statuses=STATUSES, kinds=KINDS), ()),
    "finance": (replace(CONSTRAINTS, principals=("group:finance",)), ()),
    "at expiry": (replace(CONSTRAINTS, valid_at=parse_rfc3339("2026-01-01T00:00:00Z")), ()),
    "at start": (replace(CONSTRAINTS, valid_at=parse_rfc3339("2027-01-01T00:00:00Z")), ()),
    "other subject": (replace(CONSTRAINTS, subjects=("ent_other",)), ()),
}


@pytest.mark.parametrize("variant", list(NAMED_VARIANTS))
def test_the_tree_admits_exactly_what_sql_admits_on_the_contract_data(
    contract_store: tuple[Engine, dict[str, list[Record]]], variant: str
) -> None:
    engine, records = contract_store
    constraints, tags = NAMED_VARIANTS[variant]
    expected = sql_ids(engine, constraints, tags)
    assert tree_ids(records["acme"], constraints, tags) == expected
    if variant == "contract":
        assert expected and all(i.startswith("permitted_") for i in expected)


def test_the_tree_admits_exactly_what_sql_admits_on_random_envelopes(sqlite_url: str) -> None:
    rng = random.Random(20261130)
    rows = contract_rows()
    rows["acme"] += [random_item(rng, i) for i in range(300)]
    rows["globex"] += [random_item(rng, i) for i in range(40)]
    engine = open_store(sqlite_url)
    try:
        records = load(engine, rows)
        nonempty = 0
        for _ in range(400):
            constraints, tags = random_constraints(rng)
            expected = sql_ids(engine, constraints, tags)
            assert tree_ids(records["acme"], constraints, tags) == expected, (constraints, tags)
            nonempty += bool(expected)
        assert nonempty > 40  # the variants exercise admitted rows, not only empty answers
    finally:
        engine.dispose()


# ---------------------------------------------------------------- records, schema


def test_a_record_survives_the_trip_through_weaviate_properties(contract_store: tuple[Engine, dict[str, list[Record]]]) -> None:
    _, records = contract_store
    for record in records["acme"]:
        back = record_of(properties_of(record), "acme")
        assert back == replace(record, name=None, entity_type=None, email=None, domain=None, phone=None)
        assert back.envelope() == record.envelope()
    assert set(properties_of(records["acme"][0])) <= set(SCHEMA)


def fake_config(**overrides: Any) -> SimpleNamespace:
    """A live collection config as the client reads it, built from what ensure_schema creates."""
    props = [
        SimpleNamespace(
            name=p.name, data_type=p.dataType, tokenization=p.tokenization, text_analyzer=None, index_filterable=p.indexFilterable
        )
        for p in _properties()
    ]
    hnsw = SimpleNamespace(distance_metric=VectorDistances.COSINE)
    config = SimpleNamespace(
        description=schema_description(MODEL, DIMS),
        properties=props,
        multi_tenancy_config=SimpleNamespace(enabled=True),
        inverted_index_config=SimpleNamespace(index_null_state=True),
        vector_config={VECTOR: SimpleNamespace(vector_index_config=hnsw)},
    )
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


def test_filtered_text_properties_are_created_with_field_tokenization() -> None:
    created = {p.name: p for p in _properties()}
    assert set(created) == set(SCHEMA)
    for name in FILTERED:
        assert created[name].indexFilterable is True
        if created[name].dataType in (DataType.TEXT, DataType.TEXT_ARRAY):
            assert created[name].tokenization == Tokenization.FIELD, name
    assert schema_problems(fake_config(), MODEL, DIMS) == []


def test_a_collection_built_otherwise_is_refused() -> None:
    assert schema_problems(fake_config(), "another-model", DIMS) != []
    assert schema_problems(fake_config(), MODEL, DIMS * 2) != []
    assert schema_problems(fake_config(multi_tenancy_config=SimpleNamespace(enabled=False)), MODEL, DIMS) != []
    assert schema_problems(fake_config(inverted_index_config=SimpleNamespace(index_null_state=False)), MODEL, DIMS) != []
    euclid = {VECTOR: SimpleNamespace(vector_index_config=SimpleNamespace(distance_metric=VectorDistances.L2_SQUARED))}
    assert schema_problems(fake_config(vector_config=euclid), MODEL, DIMS) != []
    word = fake_config()
    next(p for p in word.properties if p.name == "acl").tokenization = Tokenization.WORD
    assert schema_problems(word, MODEL, DIMS) == ["property 'acl' is not tokenized as field"]
    missing = fake_config()
    missing.properties = [p for p in missing.properties if p.name != "scoped"]
    assert schema_problems(missing, MODEL, DIMS) == ["property 'scoped' is missing or of another type"]


# ---------------------------------------------------------------- the connector without a server


@pytest.mark.parametrize(
    "query", [vector_query(model="another-model"), vector_query(model=None), vector_query(vector=(1.0, 0.0))]
)
def test_a_vector_of_another_model_or_length_is_refused(query: RecallQuery) -> None:
    with pytest.raises(ConnectorError):
        asyncio.run(dead_connector().search(CONSTRAINTS, query))


def test_no_vector_is_skipped_and_no_principals_is_empty_without_a_query() -> None:
    connector = dead_connector()  # a query would fail: these answers never reach the network
    skipped = asyncio.run(connector.search(CONSTRAINTS, RecallQuery(text="pricing")))
    assert skipped.status == "skipped" and skipped.candidates == ()
    empty = asyncio.run(connector.search(replace(CONSTRAINTS, principals=()), vector_query()))
    assert empty.status == "empty" and empty.candidates == ()


def test_an_unreachable_weaviate_is_an_error_status_not_a_crash() -> None:
    connector = dead_connector()
    try:
        result = asyncio.run(run_source(connector.name, lambda: connector.search(CONSTRAINTS, vector_query()), 5000))
        assert result.status == "error" and result.candidates == ()
        assert result.detail == "semantic search failed: WeaviateStartUpError"
        with pytest.raises(ConnectorError) as raised:
            asyncio.run(connector.search(CONSTRAINTS, vector_query()))
        assert raised.value.__cause__ is not None
        with pytest.raises(ConnectorError):
            connector.ensure_schema()
    finally:
        connector.close()


# ---------------------------------------------------------------- the contract against a live Weaviate


def unit(values: list[float]) -> tuple[float, ...]:
    norm = math.sqrt(sum(v * v for v in values))
    return tuple(v / norm for v in values)


@dataclass
class Loaded:
    connector: WeaviateConnector
    query: RecallQuery


@pytest.fixture
def weaviate_store(contract_store: tuple[Engine, dict[str, list[Record]]], weaviate_endpoint: Endpoint) -> Iterator[Loaded]:
    """The contract data in a fresh collection: random unit vectors, except that every forbidden and
    every globex item lies right next to the query vector, so a dropped filter would return them first."""
    _, records = contract_store
    client = weaviate_endpoint.client()
    collection = f"GatewayItemTest{secrets.token_hex(4)}"
    rng = random.Random(7)
    query = unit([rng.gauss(0, 1) for _ in range(DIMS)])

    def vector_for(record: Record) -> tuple[float, ...]:
        if record.id.startswith(("forbidden_", "globex_")):
            return unit([q + rng.gauss(0, 0.01) for q in query])
        return unit([rng.gauss(0, 1) for _ in range(DIMS)])

    try:
        connector = WeaviateConnector(client, collection=collection, model=MODEL, dims=DIMS)
        connector.ensure_schema()
        for tenant, tenant_records in records.items():
            assert connector.upsert(tenant, [(r, vector_for(r)) for r in tenant_records]) == len(tenant_records)
        yield Loaded(connector, RecallQuery(vector=query, model=MODEL))
    finally:
        client.collections.delete(collection)
        client.close()


def live_search(loaded: Loaded, constraints: ItemFilter, **overrides: Any) -> Any:
    return asyncio.run(loaded.connector.search(constraints, replace(loaded.query, **overrides)))


def test_live_returns_only_what_the_constraints_admit(weaviate_store: Loaded) -> None:
    result = live_search(weaviate_store, CONSTRAINTS, limit=100)
    ids = [c.record.id for c in result.candidates]
    assert result.status == "ok" and ids
    assert all(i.startswith("permitted_") for i in ids), ids
    scores = [c.score for c in result.candidates]
    assert scores == sorted(scores, reverse=True) and all(-1.0 <= s <= 1.0 + 1e-6 for s in scores)
    assert [c.rank for c in result.candidates] == list(range(1, len(ids) + 1))


def test_live_forbidden_nearest_neighbours_never_take_a_result_slot(weaviate_store: Loaded) -> None:
    everything = replace(
        CONSTRAINTS,
        principals=tuple(PRINCIPAL_POOL),
        sensitivities=SENSITIVITIES,
        statuses=STATUSES,
        kinds=KINDS,
        scopes=tuple(SCOPE_POOL),
        subjects=tuple(SUBJECT_POOL),
        valid_at=parse_rfc3339("2026-06-01T00:00:00Z"),
    )
    unfiltered = live_search(weaviate_store, everything, limit=1)
    assert unfiltered.candidates[0].record.id.startswith("forbidden_")  # the query is nearest to a forbidden item
    result = live_search(weaviate_store, CONSTRAINTS, limit=10)
    assert len(result.candidates) == 10
    assert all(c.record.id.startswith("permitted_") for c in result.candidates)


def test_live_caller_tags_narrow_and_never_replace_the_constraints(weaviate_store: Loaded) -> None:
    result = live_search(weaviate_store, CONSTRAINTS, tags=("pricing",), limit=100)
    assert {c.record.id for c in result.candidates} == {f"permitted_{i}" for i in range(12) if i % 2}


def test_live_another_tenant_sees_nothing_of_this_one(weaviate_store: Loaded) -> None:
    globex = live_search(weaviate_store, replace(CONSTRAINTS, tenant="globex", subjects=()), limit=100)
    assert globex.candidates and all(c.record.id.startswith("globex_") for c in globex.candidates)
    assert all(c.record.tenant == "globex" for c in globex.candidates)
    stranger = live_search(weaviate_store, replace(CONSTRAINTS, tenant="initech"), limit=100)
    assert stranger.status == "empty" and stranger.candidates == ()


def test_live_no_principals_means_nothing(weaviate_store: Loaded) -> None:
    result = live_search(weaviate_store, replace(CONSTRAINTS, principals=()), limit=100)
    assert result.candidates == () and result.status in ("empty", "skipped")


def test_live_records_come_back_whole(weaviate_store: Loaded, contract_store: tuple[Engine, dict[str, list[Record]]]) -> None:
    _, records = contract_store
    stored = {r.id: r for r in records["acme"]}
    result = live_search(weaviate_store, CONSTRAINTS, limit=100)
    for candidate in result.candidates:
        expected = stored[candidate.record.id]
        assert candidate.record == replace(expected, name=None, entity_type=None, email=None, domain=None, phone=None)


RELAXED: dict[str, dict[str, Any]] = {  # per forbidden variant: CONSTRAINTS widened in that one dimension only
    "acl": {"principals": CONSTRAINTS.principals + ("group:finance",)},
    "sensitivity": {"sensitivities": SENSITIVITIES},
    "expired": {"valid_at": parse_rfc3339("2025-06-01T00:00:00Z")},
    "future": {"valid_at": parse_rfc3339("2027-06-01T00:00:00Z")},
    "scope": {"scopes": CONSTRAINTS.scopes + ("support",)},
    "status": {"statuses": STATUSES},
    "attachment": {"subjects": CONSTRAINTS.subjects + ("ent_other",)},
    "kind": {"kinds": KINDS},
}


@pytest.mark.parametrize("variant", sorted(FORBIDDEN_VARIANTS))
def test_live_each_hard_filter_keeps_its_twins_on_the_query_vector_out(weaviate_store: Loaded, variant: str) -> None:
    """Each variant's items lie on the query's own vector: widened in that one dimension, Weaviate
    returns them first; with the constraints, it never returns one."""
    assert sorted(RELAXED) == sorted(FORBIDDEN_VARIANTS)
    twins = f"forbidden_{variant}_"
    widened = live_search(weaviate_store, replace(CONSTRAINTS, **RELAXED[variant]), limit=4)
    assert [c.record.id.startswith(twins) for c in widened.candidates] == [True] * 4, [c.record.id for c in widened.candidates]
    held = live_search(weaviate_store, CONSTRAINTS, limit=100)
    assert held.candidates and not any(c.record.id.startswith(twins) for c in held.candidates)
