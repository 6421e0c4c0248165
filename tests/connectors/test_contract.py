"""The connector contract, run by every backend (SQLite and PostgreSQL) of each connector kind:
constraints are applied inside the query, so forbidden rows are never returned, never take a
result slot, and caller filters narrow the constraints without replacing them."""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import pkgutil
import secrets
import typing
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

import connectors
from connectors.base import ExactConnector, GraphConnector, LexicalConnector, SemanticConnector
from connectors.confirm import StoreConfirmed
from connectors.sql.exact import SqlExactConnector
from connectors.sql.graph import SqlGraphConnector
from connectors.sql.lexical import FullTextConnector
from connectors.sql.pgvector import PgvectorConnector
from connectors.sql.vectors import StoredVectors, VectorConnector, VectorIndex
from connectors.weaviate import WeaviateConnector
from core.constraints import ItemFilter
from core.errors import ConnectorError
from core.records import Identifier, RecallQuery, SourceResult
from core.store import open_store
from gateway.pipeline.recall import run_source
from gateway.settings import load_settings
from gateway.writes.embeddings import load_embedder
from gateway.writes.items import ingest
from gateway.writes.vectorize import embed_all, publish_to_weaviate
from tests.engines import Endpoint

CONSTRAINTS = ItemFilter(
    tenant="acme",
    principals=("user:alice", "*", "group:sales", "role:agent"),
    sensitivities=("public", "internal", "confidential"),
    valid_at=datetime(2026, 11, 30, tzinfo=timezone.utc),
    scopes=("sales",),
    kinds=("property", "memory", "document"),
    statuses=("active", "superseded", "disputed"),
    subjects=("ent_jane",),
)


def note(item_id: str, text: str, **envelope: Any) -> dict[str, Any]:
    return {"id": item_id, "kind": "memory", "text": text, "acl": ["*"], "entity": "ent_jane", **envelope}


FORBIDDEN_VARIANTS: dict[str, dict[str, Any]] = {
    "acl": {"acl": ["group:finance"]},
    "sensitivity": {"sensitivity": "restricted"},
    "expired": {"valid_to": "2026-01-01T00:00:00Z"},
    "future": {"valid_from": "2027-01-01T00:00:00Z"},
    "scope": {"scope": ["support"]},
    "status": {"status": "retracted"},
    "attachment": {"attached_to": "ent_other"},
    "kind": {"kind": "edge", "from": "ent_jane", "to": "ent_other", "relation": "knows"},
}


def contract_rows() -> dict[str, list[dict[str, Any]]]:
    """The data set of the `store` fixture (and of test_weaviate's), by tenant."""
    strong = "pricing pricing pricing pricing discount"
    rows = [note(f"forbidden_{name}_{i}", strong, **variant) for name, variant in FORBIDDEN_VARIANTS.items() for i in range(4)]
    rows += [note(f"permitted_{i}", f"pricing note {i}", tags=["pricing"] if i % 2 else []) for i in range(12)]
    rows += [note("permitted_other_entity", "pricing for someone else", entity="ent_other")]
    rows += [
        {"id": "ent_jane", "kind": "entity", "entity_type": "contact", "email": "jane@globex.example", "acl": ["*"]},
        {"id": "ent_hidden", "kind": "entity", "entity_type": "contact", "email": "hidden@globex.example", "acl": ["group:x"]},
    ]
    return {"acme": rows, "globex": [note(f"globex_{i}", strong) for i in range(5)]}


@pytest.fixture
def store(database_url: str) -> Iterator[Engine]:
    engine = open_store(database_url)
    for tenant, rows in contract_rows().items():
        assert ingest(engine, tenant, rows).rejected == []
    yield engine
    engine.dispose()


def search(connector: ExactConnector | LexicalConnector, constraints: ItemFilter, query: RecallQuery) -> SourceResult:
    return asyncio.run(connector.search(constraints, query))


class ConnectorContract:
    """Every connector kind's backends run these."""

    def connector(self, store: Engine) -> Any:
        raise NotImplementedError

    def query(self, **overrides: Any) -> RecallQuery:
        raise NotImplementedError

    def test_returns_only_what_the_constraints_admit(self, store: Engine) -> None:
        result = search(self.connector(store), CONSTRAINTS, self.query(limit=100))
        ids = [c.record.id for c in result.candidates]
        assert result.status == "ok" and ids
        assert all(i.startswith("permitted_") for i in ids), ids

    def test_forbidden_rows_never_take_a_result_slot(self, store: Engine) -> None:
        result = search(self.connector(store), CONSTRAINTS, self.query(limit=10))
        assert len(result.candidates) == 10
        assert all(c.record.id.startswith("permitted_") for c in result.candidates)

    def test_caller_tags_narrow_and_never_replace_the_constraints(self, store: Engine) -> None:
        result = search(self.connector(store), CONSTRAINTS, self.query(tags=("pricing",), limit=100))
        ids = {c.record.id for c in result.candidates}
        assert ids == {f"permitted_{i}" for i in range(12) if i % 2}

    def test_another_tenant_sees_nothing_of_this_one(self, store: Engine) -> None:
        globex = replace(CONSTRAINTS, tenant="globex", subjects=())
        result = search(self.connector(store), globex, self.query(limit=100))
        assert all(c.record.tenant == "globex" for c in result.candidates)
        assert all(c.record.id.startswith("globex_") for c in result.candidates)

    def test_no_principals_means_nothing(self, store: Engine) -> None:
        result = search(self.connector(store), replace(CONSTRAINTS, principals=()), self.query(limit=100))
        assert result.candidates == ()
        assert result.status in ("empty", "skipped")

    def test_an_unreachable_store_is_an_error_status_not_a_crash(self) -> None:
        dead = create_engine("postgresql+psycopg://postgres@127.0.0.1:1/none", connect_args={"connect_timeout": 1})
        connector = self.connector(dead)
        result = asyncio.run(run_source(connector.name, lambda: connector.search(CONSTRAINTS, self.query()), 5000))
        assert result.status == "error" and result.candidates == ()
        with pytest.raises(ConnectorError):
            search(connector, CONSTRAINTS, self.query())


class TestLexicalContract(ConnectorContract):
    def connector(self, store: Engine) -> FullTextConnector:
        return FullTextConnector(store)

    def query(self, **overrides: Any) -> RecallQuery:
        return RecallQuery(text="pricing discount", **overrides)

    def test_query_without_words_runs_no_search(self, store: Engine) -> None:
        result = search(self.connector(store), CONSTRAINTS, RecallQuery(text="?? 42 --"))
        assert result.status == "skipped" and result.candidates == ()

    def test_query_syntax_is_never_passed_to_the_engine(self, store: Engine) -> None:
        hostile = "pricing\" OR * NEAR( ) AND -- '; DROP TABLE item; :*"
        result = search(self.connector(store), CONSTRAINTS, RecallQuery(text=hostile, limit=100))
        assert result.status == "ok"
        assert all(c.record.id.startswith("permitted_") for c in result.candidates)

    def test_ranks_better_matches_first(self, store: Engine) -> None:
        result = search(self.connector(store), CONSTRAINTS, RecallQuery(text="note 7", limit=5))
        assert result.candidates[0].record.id == "permitted_7"


class TestLexicalFts5Contract(TestLexicalContract):
    """The same contract with FTS5 ranking (`GATEWAY_LEXICAL_ENGINE=fts5`; Tantivy's default answers above)."""

    def connector(self, store: Engine) -> FullTextConnector:
        return FullTextConnector(store, engine_name="fts5")


class TestExactContract(ConnectorContract):
    def connector(self, store: Engine) -> SqlExactConnector:
        return SqlExactConnector(store)

    def query(self, **overrides: Any) -> RecallQuery:
        return RecallQuery(**overrides)

    def test_only_the_subjects_records(self, store: Engine) -> None:
        result = search(self.connector(store), CONSTRAINTS, RecallQuery(limit=100))
        ids = {c.record.id for c in result.candidates}
        assert "permitted_other_entity" not in ids and "permitted_3" in ids

    def test_fetch_by_id_stays_inside_the_constraints(self, store: Engine) -> None:
        ids = ("permitted_1", "forbidden_acl_0", "forbidden_scope_1", "globex_1", "unknown")
        result = search(self.connector(store), CONSTRAINTS, RecallQuery(ids=ids))
        assert [c.record.id for c in result.candidates] == ["permitted_1"]

    def test_lookup_resolves_only_permitted_entities(self, store: Engine) -> None:
        connector = self.connector(store)
        identifiers = (Identifier("email", "jane@globex.example"), Identifier("email", "hidden@globex.example"))
        found = asyncio.run(connector.lookup(CONSTRAINTS, identifiers))
        assert [r.id for r in found] == ["ent_jane"]


def test_lexical_widens_past_a_window_full_of_forbidden_matches(database_url: str) -> None:
    """Hundreds of forbidden rows outrank the permitted ones: the permitted ones still come back."""
    engine = open_store(database_url)
    strong = "walrus walrus walrus walrus walrus"
    rows = [note(f"forbidden_{i}", strong, acl=["group:finance"]) for i in range(600)]
    rows += [note(f"permitted_{i}", f"walrus and {i} other words to dilute the score") for i in range(3)]
    assert ingest(engine, "acme", rows).rejected == []
    result = search(FullTextConnector(engine), CONSTRAINTS, RecallQuery(text="walrus", limit=50))
    assert sorted(c.record.id for c in result.candidates) == ["permitted_0", "permitted_1", "permitted_2"]
    engine.dispose()


class TestSemanticContract(ConnectorContract):
    """The embedded vector index; exact search over the permitted subset (the tenant is small)."""

    ann_min_items = 1_000_000

    def connector(self, store: Engine) -> VectorConnector:
        embedder = minilm()
        if store.url.port != 1:  # the unreachable-store case has nothing to embed
            embed_all(store, embedder)
        return VectorConnector(VectorIndex(store, embedder.model_id, embedder.dims, ann_min_items=self.ann_min_items))

    def query(self, **overrides: Any) -> RecallQuery:
        embedder = minilm()
        vector = tuple(float(x) for x in embedder.embed(["pricing discount"])[0])
        return RecallQuery(text="pricing discount", vector=vector, model=embedder.model_id, **overrides)

    def test_scores_are_cosines_best_first(self, store: Engine) -> None:
        result = search(self.connector(store), CONSTRAINTS, self.query(limit=5))
        scores = [c.score for c in result.candidates]
        assert scores == sorted(scores, reverse=True) and all(-1.0 <= s <= 1.0 for s in scores)


def test_the_reranks_stored_vectors_admit_only_what_the_constraints_admit(store: Engine) -> None:
    """The rerank reads stored vectors of ids it is handed; its own pushdown holds even when it is
    handed every id of the store (the verify before it is the other layer)."""
    embedder = minilm()
    embed_all(store, embedder)
    stored = StoredVectors(store, embedder.model_id, embedder.dims)
    query = TestSemanticContract().query()
    every = [f"forbidden_{name}_{i}" for name in FORBIDDEN_VARIANTS for i in range(4)]
    every += [f"permitted_{i}" for i in range(12)] + ["permitted_other_entity", "globex_1", "unknown"]
    found = stored.similarities(CONSTRAINTS, query, every)
    assert set(found) == {f"permitted_{i}" for i in range(12)} | {"permitted_other_entity"}
    assert all(-1.0 <= score <= 1.0 for score in found.values())
    assert set(stored.similarities(CONSTRAINTS, replace(query, tags=("pricing",)), every)) == {
        f"permitted_{i}" for i in range(12) if i % 2
    }
    assert stored.similarities(replace(CONSTRAINTS, principals=()), query, every) == {}
    assert set(stored.similarities(replace(CONSTRAINTS, tenant="globex", subjects=()), query, every)) == {"globex_1"}
    # A vector made from text the item no longer has is not read; nor is one of another model.
    ingest(store, "acme", [note("permitted_3", "pricing note 3, rewritten")])
    assert "permitted_3" not in stored.similarities(CONSTRAINTS, query, every)
    # Blobs planted by someone with write access to the store (a wrong length, NaN, a huge value)
    # are left out of the rerank, never a failed call.
    planted = {"permitted_5": b"\x00" * 10, "permitted_6": np.full(embedder.dims, np.nan, np.float32).tobytes()}
    planted["permitted_7"] = np.full(embedder.dims, 1e30, np.float32).tobytes()
    with store.begin() as conn:
        for item_id, blob in planted.items():
            pk = conn.execute(text("SELECT pk FROM item WHERE tenant = 'acme' AND id = :i"), {"i": item_id}).scalar_one()
            conn.execute(text("UPDATE item_vector SET vector = :v WHERE item_pk = :pk"), {"v": blob, "pk": pk})
    found = stored.similarities(CONSTRAINTS, query, every)
    assert not set(planted) & set(found) and "permitted_8" in found
    other = StoredVectors(store, "another-model", embedder.dims)
    with pytest.raises(ConnectorError, match="another model"):
        other.similarities(CONSTRAINTS, query, every)
    assert other.similarities(CONSTRAINTS, replace(query, model="another-model"), every) == {}


class TestSemanticApproximateContract(TestSemanticContract):
    """The same index forced onto its HNSW path, widening its window past forbidden neighbours."""

    ann_min_items = 1


class TestWeaviateContract(TestSemanticContract):
    """The same contract on a live Weaviate (tests/engines.py), as the service serves it: the store's
    items embedded and copied there (`embed_all` with the publisher), behind `StoreConfirmed`."""

    @pytest.fixture(autouse=True)
    def _weaviate(self, weaviate_endpoint: Endpoint) -> Iterator[None]:
        self.endpoint = weaviate_endpoint
        self.made: list[WeaviateConnector] = []
        yield
        client = weaviate_endpoint.client()
        try:
            for connector in self.made:
                client.collections.delete(connector.collection)
                connector.close()
        finally:
            client.close()

    def weaviate(self, **overrides: Any) -> WeaviateConnector:
        embedder = minilm()
        options: dict[str, Any] = {
            "grpc_port": self.endpoint.grpc_port,
            "api_key": self.endpoint.api_key,
            "collection": f"GatewayItemContract{secrets.token_hex(4)}",
            **overrides,
        }
        connector = WeaviateConnector(
            options.pop("url", self.endpoint.url), model=embedder.model_id, dims=embedder.dims, timeout_s=3, **options
        )
        self.made.append(connector)
        return connector

    def connector(self, store: Engine) -> StoreConfirmed:  # type: ignore[override]
        weaviate = self.weaviate()
        embed_all(store, minilm(), publish=functools.partial(publish_to_weaviate, weaviate))
        return StoreConfirmed(weaviate, store)

    def test_an_unreachable_store_is_an_error_status_not_a_crash(self, store: Engine) -> None:  # type: ignore[override]
        dead_store = create_engine("postgresql+psycopg://postgres@127.0.0.1:1/none", connect_args={"connect_timeout": 1})
        served = self.connector(store)
        for connector in (
            StoreConfirmed(served.inner, dead_store),  # Weaviate answers, the store does not
            StoreConfirmed(self.weaviate(url="http://127.0.0.1:9", grpc_port=10), store),
        ):  # nor Weaviate
            result = asyncio.run(run_source(connector.name, lambda: connector.search(CONSTRAINTS, self.query()), 5000))
            assert result.status == "error" and result.candidates == ()
            with pytest.raises(ConnectorError):
                search(connector, CONSTRAINTS, self.query())


# ---------------------------------------------------------------- each backend has its protocol's methods

# Every connector class and the protocol (connectors/base.py) it stands in for. An isinstance check
# against a runtime_checkable Protocol only looks for attribute names, so it passes for a method whose
# parameters were renamed, reordered, or that stopped being async; these compare the signatures.
IMPLEMENTATIONS: list[tuple[type, type]] = [
    (ExactConnector, SqlExactConnector),
    (LexicalConnector, FullTextConnector),
    (SemanticConnector, VectorConnector),
    (SemanticConnector, PgvectorConnector),  # its contract runs in tests/connectors/test_pgvector.py (pgvector server)
    (SemanticConnector, StoreConfirmed),
    (SemanticConnector, WeaviateConnector),
    (GraphConnector, SqlGraphConnector),
]
PROTOCOLS = {ExactConnector, LexicalConnector, SemanticConnector, GraphConnector}


def protocol_methods(protocol: type) -> dict[str, Callable[..., Any]]:
    methods: dict[str, Callable[..., Any]] = {
        name: value for name, value in vars(protocol).items() if inspect.isfunction(value) and not name.startswith("_")
    }
    assert methods, protocol
    return methods


def parameters(function: Callable[..., Any]) -> list[tuple[str, str]]:
    """Each parameter's name and kind, in order (self included)."""
    return [(p.name, p.kind.name) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize(("protocol", "backend"), IMPLEMENTATIONS, ids=[f"{b.__name__}-{p.__name__}" for p, b in IMPLEMENTATIONS])
def test_each_backend_method_has_the_protocols_signature(protocol: type, backend: type) -> None:
    for name, declared in protocol_methods(protocol).items():
        implemented = getattr(backend, name, None)
        assert inspect.isfunction(implemented), f"{backend.__name__}.{name} is missing"
        assert parameters(implemented) == parameters(declared), f"{backend.__name__}.{name}: parameter names or order differ"
        assert inspect.iscoroutinefunction(implemented) == inspect.iscoroutinefunction(declared), (
            f"{backend.__name__}.{name}: async differs"
        )
        assert typing.get_type_hints(implemented) == typing.get_type_hints(declared), f"{backend.__name__}.{name}: types differ"


def test_every_connector_class_is_checked_against_its_protocol() -> None:
    """A new backend (any class under connectors/ with an async search) cannot skip the check above."""
    found = set()
    for module_info in pkgutil.walk_packages(connectors.__path__, "connectors."):
        module = importlib.import_module(module_info.name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and value.__module__ == module.__name__
                and value not in PROTOCOLS
                and inspect.iscoroutinefunction(getattr(value, "search", None))
            ):
                found.add(value)
    assert found == {backend for _, backend in IMPLEMENTATIONS}


def minilm() -> Any:
    """The default embedder (bge-small since it arrived; the name is the suite's history)."""
    embedder, reason = load_embedder(load_settings(environ={}))
    assert embedder is not None, reason
    return embedder
