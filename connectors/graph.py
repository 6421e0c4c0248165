"""Graph connector: the edges reachable from the request's subjects, walked in one SQL query.

The walk is a single `WITH RECURSIVE` statement, the same on SQLite and PostgreSQL, with the
policy's constraints inside it:

- an edge is followed only if the shared pushdown (`permitted`) admits it, it is active, its
  relation is one the policy allows, and it leaves the node being expanded;
- the entity it leads to must be one the pushdown admits too, so the walk never enters nor
  passes through an entity hidden by ACL, sensitivity, scope, validity, status or tombstone;
- at most `graph_max_depth` hops (1..3) and at most `graph_fanout` edges (1..50) out of any one
  node: the best ones by confidence, then weight, then id;
- no node is visited twice on one path (the path is carried as a string such as '/a/b/').

Fan-out is a per-node top-k. Window functions are not allowed in SQLite's recursive term, so the
step keeps an edge only if its primary key is among the k best of the node being expanded:
`edge.pk IN (SELECT pk ... WHERE edge_from = walk.node ... ORDER BY ... LIMIT k)`. The subquery
refers to the walk row's column only (the CTE is never in its FROM), which both SQLite and
PostgreSQL accept in a recursive term. Because the k best are chosen among followable edges into
visible entities, a hidden edge or target never takes one of a node's slots.
"""

from __future__ import annotations

import time
from typing import Any

import anyio.to_thread
from sqlalchemy import CTE, ColumnElement, FromClause, Integer, Select, Text, cast, func, literal, null, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from connectors.base import Candidate, Constraints, RecallQuery, SourceResult
from connectors.pushdown import item, permitted, record_from_row
from gateway.errors import ConnectorError

MAX_DEPTH = 3
MAX_FANOUT = 50


def clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def skip_reason(constraints: Constraints) -> str | None:
    """Why no walk can start, or None."""
    if not constraints.subjects:
        return "no resolved entity to start from"
    if not constraints.graph_relations:
        return "the policy allows no relation for this task"
    if "edge" not in constraints.kinds:
        return "edges are not allowed for this task"
    return None


def best_first(edge: FromClause) -> tuple[Any, ...]:
    """The order in which a node's edges compete for its fan-out slots."""
    return (edge.c.confidence.desc().nulls_last(), edge.c.weight.desc().nulls_last(), edge.c.id)


def followable_edges(constraints: Constraints, node: ColumnElement[Any], fanout: int) -> Select[Any]:
    """Primary keys of the `fanout` best edges out of `node` that the walk may follow."""
    edge = item.alias("fan_edge")
    target = item.alias("fan_target")
    return (
        select(edge.c.pk)
        .select_from(edge)
        .join(target, (target.c.tenant == edge.c.tenant) & (target.c.id == edge.c.edge_to))
        .where(
            edge.c.tenant == constraints.tenant,
            edge.c.edge_from == node,
            edge.c.status == "active",
            edge.c.relation.in_(constraints.graph_relations),
            permitted(constraints, kinds=("edge",), table=edge),
            target.c.kind == "entity",
            permitted(constraints, kinds=("entity",), table=target),
        )
        .order_by(*best_first(edge))
        .limit(fanout)
    )


def not_on_path(path: ColumnElement[Any], node: ColumnElement[Any]) -> ColumnElement[bool]:
    """`node` is not a segment of `path`. replace() is literal (no LIKE wildcards such as '_')
    and behaves the same on SQLite and PostgreSQL."""
    return func.replace(path, "/" + node + "/", "") == path


def walk(constraints: Constraints) -> CTE:
    """walk(node, depth, path, edge_pk): every node reached, and the edge that reached it."""
    max_depth = clamp(constraints.graph_max_depth, 1, MAX_DEPTH)
    fanout = clamp(constraints.graph_fanout, 1, MAX_FANOUT)
    start = item.alias("start")
    # The subjects that have any edge at all; the caller has already verified them.
    anchor = (
        select(
            start.c.edge_from.label("node"),
            cast(literal(0), Integer).label("depth"),
            cast("/" + start.c.edge_from + "/", Text).label("path"),
            cast(null(), Integer).label("edge_pk"),
        )
        .where(start.c.tenant == constraints.tenant, start.c.kind == "edge", start.c.edge_from.in_(constraints.subjects))
        .distinct()
    )
    walked = anchor.cte("walk", recursive=True)
    edge = item.alias("walk_edge")
    step = (
        select(
            edge.c.edge_to,
            cast(walked.c.depth + 1, Integer),
            cast(walked.c.path + edge.c.edge_to + "/", Text),
            edge.c.pk,
        )
        .select_from(walked)
        .join(edge, (edge.c.tenant == constraints.tenant) & (edge.c.edge_from == walked.c.node))
        .where(
            walked.c.depth < max_depth,
            edge.c.pk.in_(followable_edges(constraints, walked.c.node, fanout).correlate(walked)),
            not_on_path(walked.c.path, edge.c.edge_to),
        )
    )
    return walked.union_all(step)


def reachable_edges(constraints: Constraints, limit: int) -> Select[Any]:
    """Each edge reached once, at its smallest depth, best first, at most `limit`."""
    walked = walk(constraints)
    reached = (
        select(walked.c.edge_pk, func.min(walked.c.depth).label("depth"))
        .where(walked.c.edge_pk.is_not(None))
        .group_by(walked.c.edge_pk)
        .subquery("reached")
    )
    return (
        select(item, reached.c.depth)
        .join(reached, reached.c.edge_pk == item.c.pk)
        .order_by(
            item.c.confidence.desc().nulls_last(),
            item.c.weight.desc().nulls_last(),
            reached.c.depth,
            item.c.id,
        )
        .limit(max(limit, 0))
    )


class SqlGraphConnector:
    """GraphConnector over the `item` table (edges are items of kind 'edge')."""

    name = "graph"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def search(self, constraints: Constraints, query: RecallQuery) -> SourceResult:
        started = time.perf_counter()
        reason = skip_reason(constraints)
        if reason is not None:
            return SourceResult(self.name, "skipped", detail=reason)
        candidates = await anyio.to_thread.run_sync(self._search, constraints, query, abandon_on_cancel=True)
        ms = (time.perf_counter() - started) * 1000
        return SourceResult(self.name, "ok" if candidates else "empty", candidates, ms)

    def _search(self, constraints: Constraints, query: RecallQuery) -> tuple[Candidate, ...]:
        statement = reachable_edges(constraints, query.limit)
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(statement).all()
        except SQLAlchemyError as exc:
            raise ConnectorError(f"graph walk failed: {type(exc).__name__}") from exc
        return tuple(
            Candidate(record_from_row(row), self.name, rank, float(row.confidence or 0.0))
            for rank, row in enumerate(rows, start=1)
        )
