"""The graph connector on SQLite and PostgreSQL: one recursive walk that stays inside the
constraints (relations, depth, fan-out, visibility of every edge and every entity it enters),
terminates on cycles, and returns each edge once, best first.

One store per backend serves the whole module (a fresh PostgreSQL schema costs about half a
second); each test writes its own small graph under its own id prefix, so tests stay independent.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

import pytest
from sqlalchemy import create_engine, insert, select, text
from sqlalchemy.engine import Engine

from connectors.base import GraphConnector
from connectors.sql.graph import SqlGraphConnector, reachable_edges, walk, walk_values
from core.constraints import GraphLimits, ItemFilter
from core.errors import ConnectorError
from core.records import RecallQuery, SourceResult
from core.store import open_store
from core.tables import EntityTombstone
from gateway.writes.items import ingest
from tests.conftest import BACKENDS, fresh_database

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
PAST = datetime(2020, 6, 1, tzinfo=timezone.utc)

CONSTRAINTS = ItemFilter(
    tenant="acme",
    principals=("user:alice", "*"),
    sensitivities=("public", "internal"),
    valid_at=NOW,
    scopes=("sales",),
    kinds=("property", "memory", "document", "edge"),
    statuses=("active", "superseded", "disputed"),
    subjects=("a",),
)
LIMITS = GraphLimits(relations=("knows", "works_at"), max_depth=3, fanout=10)


def split(**overrides: Any) -> tuple[ItemFilter, GraphLimits]:
    """Overrides of the filter and of the graph limits, each applied to its own value."""
    limits = {k: v for k, v in overrides.items() if k in ("relations", "max_depth", "fanout")}
    where = {k: v for k, v in overrides.items() if k not in limits}
    return replace(CONSTRAINTS, **where), replace(LIMITS, **limits)


# Envelopes that each hide an entity (or an edge) from the actor above.
HIDING: dict[str, dict[str, Any]] = {
    "acl": {"acl": ["group:finance"]},
    "sensitivity": {"sensitivity": "restricted"},
    "scope": {"scope": ["support"]},
    "expired": {"valid_to": "2026-01-01T00:00:00Z"},
    "status": {"status": "retracted"},
}


@pytest.fixture(scope="module", params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """A store shared by this module's tests, on SQLite or on a PostgreSQL schema of its own."""
    for url in fresh_database(request.param, tmp_path_factory.mktemp("graph")):
        engine = open_store(url)
        try:
            yield engine
        finally:
            engine.dispose()


def refresh_statistics(engine: Engine) -> None:
    """What autovacuum does on a live PostgreSQL (this test server runs without it). With no
    statistics at all, PostgreSQL takes every table for one row and may scan a whole tenant
    inside the walk's loops; SQLite never has statistics and is planned for that."""
    if engine.dialect.name == "postgresql":
        with engine.begin() as conn:
            conn.execute(text("ANALYZE item, item_principal, item_scope, entity_tombstone"))


@dataclass
class Graph:
    """One test's graph in the shared store: every id it writes or asks about is prefixed."""

    engine: Engine
    prefix: str

    def id(self, name: str) -> str:
        return f"{self.prefix}.{name}"

    def entity(self, name: str, **envelope: Any) -> dict[str, Any]:
        return {"id": self.id(name), "kind": "entity", "entity_type": "contact", "acl": ["*"], **envelope}

    def entities(self, *names: str) -> list[dict[str, Any]]:
        return [self.entity(name) for name in names]

    def edge(self, source: str, target: str, confidence: float | None = 0.5, **fields: Any) -> dict[str, Any]:
        """An edge named '<source>-<target>' unless `id` is given."""
        name = fields.pop("id", f"{source}-{target}")
        return {
            "id": self.id(name),
            "kind": "edge",
            "from": self.id(source),
            "to": self.id(target),
            "relation": "knows",
            "confidence": confidence,
            "acl": ["user:alice"],
            **fields,
        }

    def build(self, items: list[dict[str, Any]], tenant: str = "acme") -> None:
        report = ingest(self.engine, tenant, items)
        assert report.rejected == [], report.rejected
        refresh_statistics(self.engine)

    def tombstone(self, name: str) -> None:
        row = {"tenant": "acme", "entity_id": self.id(name), "deleted_at": NOW}
        with self.engine.begin() as conn:
            conn.execute(insert(EntityTombstone.__table__).values(**row))  # type: ignore[attr-defined]

    def walk(self, subjects: tuple[str, ...] = ("a",), limit: int = 50, **overrides: Any) -> SourceResult:
        where, limits = split(subjects=tuple(self.id(s) for s in subjects), **overrides)
        connector: GraphConnector = SqlGraphConnector(self.engine)
        return asyncio.run(connector.search(where, limits, RecallQuery(limit=limit)))

    def ids(self, result: SourceResult) -> list[str]:
        return [c.record.id.removeprefix(self.prefix + ".") for c in result.candidates]

    def found(self, **options: Any) -> list[str]:
        return self.ids(self.walk(**options))


@pytest.fixture
def graph(store: Engine, request: pytest.FixtureRequest) -> Graph:
    return Graph(store, re.sub(r"[^A-Za-z0-9_]", "_", request.node.originalname) + "_" + secrets.token_hex(3))


def test_depth_is_never_exceeded(graph: Graph) -> None:
    g = graph
    g.build(g.entities("a", "b", "c", "d") + [g.edge("a", "b", 0.9), g.edge("b", "c", 0.8), g.edge("c", "d", 0.7)])
    assert g.found(max_depth=1) == ["a-b"]
    assert g.found(max_depth=2) == ["a-b", "b-c"]
    assert g.found(max_depth=3) == ["a-b", "b-c", "c-d"]


def test_depth_is_clamped_to_one_to_three_hops(graph: Graph) -> None:
    g = graph
    chain = ["a", "b", "c", "d", "e"]
    g.build(g.entities(*chain) + [g.edge(s, t) for s, t in zip(chain, chain[1:])])
    assert sorted(g.found(max_depth=10)) == ["a-b", "b-c", "c-d"]
    assert g.found(max_depth=0) == ["a-b"]


def test_fanout_keeps_the_best_edges_out_of_each_node(graph: Graph) -> None:
    g = graph
    targets = [f"t{i:02d}" for i in range(15)]
    hub = [g.edge("a", t, confidence=i / 20) for i, t in enumerate(targets)]
    onward = [g.edge("t14", f"u{i}", confidence=i / 10) for i in range(6)]  # t14 is a's best neighbour
    g.build(g.entities("a", *targets, *(f"u{i}" for i in range(6))) + hub + onward)
    found = g.found(fanout=5, max_depth=2)
    assert [i for i in found if i.startswith("a-")] == ["a-t14", "a-t13", "a-t12", "a-t11", "a-t10"]
    assert sorted(i for i in found if i.startswith("t14-")) == ["t14-u1", "t14-u2", "t14-u3", "t14-u4", "t14-u5"]
    assert len(found) == 10
    assert g.found(fanout=0, max_depth=1) == ["a-t14"]  # clamped to 1


def test_fanout_is_clamped_to_fifty(graph: Graph) -> None:
    g = graph
    g.build(g.entities("a", "b") + [g.edge("a", "b", confidence=i / 100, id=f"e{i:02d}") for i in range(55)])
    found = g.found(fanout=500, limit=100)
    assert found == [f"e{i:02d}" for i in range(54, 4, -1)]


def test_hidden_edges_and_hidden_targets_never_take_a_fanout_slot(graph: Graph) -> None:
    g = graph
    g.build(
        g.entities("a", "v1", "v2", "v3", "h1")
        + [g.entity("h2", acl=["group:finance"])]
        + [g.edge("a", "h1", 0.99, acl=["group:finance"]), g.edge("a", "h2", 0.98)]
        + [g.edge("a", "v1", 0.3), g.edge("a", "v2", 0.2), g.edge("a", "v3", 0.1)]
    )
    assert g.found(fanout=3) == ["a-v1", "a-v2", "a-v3"]


def test_a_relation_outside_the_policy_is_never_followed(graph: Graph) -> None:
    g = graph
    g.build(
        g.entities("a", "b", "c", "x", "y")
        + [g.edge("a", "b"), g.edge("b", "c"), g.edge("a", "x", 0.9, relation="owns"), g.edge("x", "y", 0.9)]
    )
    assert sorted(g.found()) == ["a-b", "b-c"]
    assert sorted(g.found(relations=("knows", "owns"))) == ["a-b", "a-x", "b-c", "x-y"]


@pytest.mark.parametrize("hidden_by", sorted(HIDING))
def test_a_hidden_entity_stops_the_walk(graph: Graph, hidden_by: str) -> None:
    g = graph
    g.build(
        g.entities("a", "b", "c")
        + [g.entity("h", **HIDING[hidden_by])]
        + [g.edge("a", "b"), g.edge("a", "h", 0.9), g.edge("h", "c", 0.9)]
    )
    result = g.walk()
    assert g.ids(result) == ["a-b"]
    assert all(g.id("h") not in (c.record.edge_from, c.record.edge_to) for c in result.candidates)


@pytest.mark.parametrize("hidden_by", sorted(HIDING))
def test_a_hidden_edge_is_not_followed(graph: Graph, hidden_by: str) -> None:
    g = graph
    g.build(g.entities("a", "b", "c", "d") + [g.edge("a", "b", **HIDING[hidden_by]), g.edge("b", "c"), g.edge("a", "d")])
    assert g.found() == ["a-d"]


def test_an_edge_needs_an_entity_at_its_end(graph: Graph) -> None:
    g = graph
    note = {"id": g.id("n"), "kind": "memory", "text": "a note", "entity": g.id("a"), "acl": ["*"]}
    g.build(g.entities("a", "b") + [note, g.edge("a", "b", 0.1), g.edge("a", "ghost", 0.9), g.edge("a", "n", 0.9)])
    assert g.found() == ["a-b"]


def test_a_tombstoned_entity_stops_the_walk_and_hides_its_edges(graph: Graph) -> None:
    g = graph
    g.build(
        g.entities("a", "b", "t", "c") + [g.edge("a", "b"), g.edge("a", "t", 0.9), g.edge("t", "c", 0.9), g.edge("b", "t", 0.9)]
    )
    assert sorted(g.found()) == ["a-b", "a-t", "b-t", "t-c"]
    g.tombstone("t")
    assert g.found() == ["a-b"]
    assert g.found(subjects=("t",)) == []  # nor out of it, even as a start node


def test_an_edge_valid_only_in_the_past_is_followed_only_at_a_past_instant(graph: Graph) -> None:
    g = graph
    past = {"valid_from": "2020-01-01T00:00:00Z", "valid_to": "2021-01-01T00:00:00Z"}
    g.build(g.entities("a", "b", "c", "d") + [g.edge("a", "b", 0.9, **past), g.edge("b", "c"), g.edge("a", "d", 0.1)])
    assert g.found() == ["a-d"]
    assert g.found(valid_at=PAST) == ["a-b", "b-c", "a-d"]


def test_a_non_active_edge_is_not_followed_even_if_its_status_is_visible(graph: Graph) -> None:
    g = graph
    assert "superseded" in CONSTRAINTS.statuses
    g.build(
        g.entities("a", "b", "c", "d")
        + [g.edge("a", "b", 0.9, status="superseded"), g.edge("b", "c"), g.edge("a", "d", 0.1, status="active")]
    )
    assert g.found() == ["a-d"]


def test_a_cycle_terminates_and_returns_each_edge_once(graph: Graph) -> None:
    g = graph
    g.build(
        g.entities("a", "b", "c") + [g.edge("a", "b", 0.9), g.edge("b", "a", 0.8), g.edge("b", "c", 0.7), g.edge("c", "a", 0.6)]
    )
    result = g.walk(max_depth=3)
    assert g.ids(result) == ["a-b", "b-a", "b-c", "c-a"]
    assert [c.rank for c in result.candidates] == [1, 2, 3, 4]


def test_the_walk_never_continues_from_a_node_already_on_its_path(graph: Graph) -> None:
    g = graph
    g.build(g.entities("a", "b") + [g.edge("a", "b"), g.edge("b", "a")])
    where, limits = split(subjects=(g.id("a"),), max_depth=3)
    walked = walk(limits.max_depth, limits.fanout)
    with g.engine.connect() as conn:
        rows = conn.execute(
            select(walked.c.node, walked.c.depth, walked.c.closes).order_by(walked.c.depth), walk_values(where, limits, 50)
        ).all()
    strip = len(g.prefix) + 1
    assert [(node[strip:], depth, closes) for node, depth, closes in rows] == [("a", 0, 0), ("b", 1, 0), ("a", 2, 1)]


def test_ids_with_like_wildcards_do_not_confuse_the_cycle_check(graph: Graph) -> None:
    g = graph
    g.build(g.entities("nx1", "n_1", "z") + [g.edge("nx1", "n_1", 0.9), g.edge("n_1", "z", 0.8)])
    assert g.found(subjects=("nx1",)) == ["nx1-n_1", "n_1-z"]


def test_another_tenants_edges_never_appear(graph: Graph) -> None:
    g = graph
    g.build(g.entities("a", "b") + [g.edge("a", "b", 0.1)])
    g.build(g.entities("a", "b", "x") + [g.edge("a", "b", 0.99), g.edge("a", "x", 0.99), g.edge("b", "x")], tenant="globex")
    result = g.walk()
    assert [(c.record.id, c.record.tenant, c.record.confidence) for c in result.candidates] == [(g.id("a-b"), "acme", 0.1)]
    assert sorted(g.found(tenant="globex")) == ["a-b", "a-x", "b-x"]


def test_best_first_by_confidence_then_weight_then_depth_then_id(graph: Graph) -> None:
    g = graph
    g.build(
        g.entities("a", "b", "c", "d", "e", "f", "g", "h")
        + [
            g.edge("a", "b", 0.9, weight=1.0),
            g.edge("a", "c", 0.9, weight=5.0),
            g.edge("a", "d", 0.5),  # no weight: after any weight
            g.edge("a", "e", 0.5, weight=0.1),
            g.edge("b", "f", 0.95),  # depth 2, but the most confident
            g.edge("a", "g", 0.3, weight=1.0, id="z-late-id"),  # depth 1 beats depth 2 on a tie...
            g.edge("b", "h", 0.3, weight=1.0, id="a-early-id"),  # ...whatever the ids
            g.edge("c", "g", None),  # no confidence: last, score 0
        ]
    )
    result = g.walk()
    assert g.ids(result) == ["b-f", "a-c", "a-b", "a-e", "a-d", "z-late-id", "a-early-id", "c-g"]
    assert [c.score for c in result.candidates] == [0.95, 0.9, 0.9, 0.5, 0.5, 0.3, 0.3, 0.0]
    assert [c.rank for c in result.candidates] == list(range(1, 9))
    assert {c.connector for c in result.candidates} == {"graph"}
    assert result.status == "ok" and result.ms > 0


def test_the_callers_limit_caps_the_edges_returned(graph: Graph) -> None:
    g = graph
    g.build(g.entities("a", "b", "c", "d") + [g.edge("a", "b", 0.1), g.edge("a", "c", 0.3), g.edge("c", "d", 0.2)])
    assert g.found(limit=2) == ["a-c", "c-d"]


def test_every_subject_starts_a_walk(graph: Graph) -> None:
    g = graph
    g.build(g.entities("a", "b", "c", "d") + [g.edge("a", "b", 0.9), g.edge("b", "c", 0.8), g.edge("c", "d", 0.7)])
    assert g.found(max_depth=1, subjects=("a", "c")) == ["a-b", "c-d"]


def test_nothing_reachable_is_empty(graph: Graph) -> None:
    g = graph
    g.build(g.entities("a", "b") + [g.edge("b", "a")])
    result = g.walk()
    assert (result.status, result.candidates) == ("empty", ())


DEAD_STORE = "postgresql+psycopg://postgres@127.0.0.1:1/none"


def dead_walk(**overrides: Any) -> SourceResult:
    connector = SqlGraphConnector(create_engine(DEAD_STORE, connect_args={"connect_timeout": 1}))
    return asyncio.run(connector.search(*split(**overrides), RecallQuery()))


@pytest.mark.parametrize(
    ("overrides", "detail"),
    [
        ({"subjects": ()}, "no resolved entity to start from"),
        ({"relations": ()}, "the policy allows no relation for this task"),
        ({"kinds": ("property", "memory")}, "edges are not allowed for this task"),
    ],
)
def test_skipped_without_a_start_a_relation_or_edges(overrides: dict[str, Any], detail: str) -> None:
    """Skipped before any query: the store here is unreachable, yet no error comes back."""
    result = dead_walk(**overrides)
    assert (result.status, result.detail, result.candidates) == ("skipped", detail, ())


def test_an_unreachable_store_is_a_connector_error_without_values() -> None:
    with pytest.raises(ConnectorError) as raised:
        dead_walk()
    assert str(raised.value) == "graph walk failed: OperationalError"


def test_sqlite_expands_each_node_through_the_edge_from_index(sqlite_url: str) -> None:
    """SQLite assumes a recursive CTE holds a million rows; the step must still go from the walk
    row to its node's edges, not scan the tenant's edges and look the walk up for each."""
    engine = open_store(sqlite_url)
    statement = reachable_edges(LIMITS).params(walk_values(CONSTRAINTS, LIMITS, 50))
    sql = str(statement.compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        plan = [row[3] for row in conn.execute(text("EXPLAIN QUERY PLAN " + sql))]
    engine.dispose()
    step = plan[plan.index("RECURSIVE STEP") + 1 :]
    tables = [line for line in step if line.startswith(("SCAN", "SEARCH"))]
    assert tables[:2] == ["SCAN walk", "SEARCH walk_edge USING INDEX ix_item_tenant_edge_from (tenant=? AND edge_from=?)"], plan
    assert "SEARCH follow_edge USING INTEGER PRIMARY KEY (rowid=?)" in step, plan
