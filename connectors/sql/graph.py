"""Graph connector: the edges reachable from the request's subjects, walked in one recursive SQL query.

See docs/graph-walk.md for how the walk applies the filter, fan-out and depth.
"""

from __future__ import annotations

import time
from functools import cache
from typing import Any

from sqlalchemy import (
    CTE,
    ColumnElement,
    FromClause,
    Integer,
    ScalarSelect,
    Select,
    String,
    Text,
    and_,
    bindparam,
    case,
    cast,
    exists,
    func,
    literal,
    null,
    or_,
    select,
    tuple_,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from connectors.sql.cancel import cancellable, watched
from connectors.sql.pushdown import alias, bound, item, permitted, record_from_row, value
from core.constraints import GraphLimits, ItemFilter
from core.errors import ConnectorError
from core.records import Candidate, RecallQuery, SkipReason, SourceResult

MAX_DEPTH = 3
MAX_FANOUT = 50


def clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def skip_reason(where: ItemFilter, limits: GraphLimits) -> SkipReason | None:
    """Why no walk can start, or None."""
    if not where.subjects:
        return SkipReason.NO_START
    if not limits.relations:
        return SkipReason.NO_RELATION
    if "edge" not in where.kinds:
        return SkipReason.NO_EDGES
    return None


def followable_edge(edge: FromClause) -> tuple[ColumnElement[bool], ...]:
    """An edge the walk may follow (its target is checked by `visible_target`)."""
    return (
        edge.c.tenant == value("tenant"),
        edge.c.status == "active",
        edge.c.relation.in_(value("relations", many=True)),
        permitted(("edge",), edge),
    )


def visible_target(edge: FromClause, target: FromClause) -> tuple[ColumnElement[bool], ...]:
    """`target` is the entity the edge points at, and the actor may see it."""
    return (
        target.c.tenant == edge.c.tenant,
        target.c.id == edge.c.edge_to,
        target.c.kind == "entity",
        permitted(("entity",), target),
    )


def followable(edge: FromClause) -> ColumnElement[bool]:
    """The walk may follow `edge` into its target, tested on the same row by primary key (the
    join-order note in the module docstring says why)."""
    same, target = alias("follow_edge"), alias("follow_target")
    return exists(
        select(same.c.pk)
        .select_from(same)
        .join(target, and_(*visible_target(same, target)))
        .where(same.c.pk == edge.c.pk, *followable_edge(same))
    )


def rank_key(edge: FromClause) -> tuple[ColumnElement[Any], ...]:
    """Best first as one ascending row value: confidence desc, weight desc (nulls last), id."""
    return (
        case((edge.c.confidence.is_(None), 1), else_=0),
        func.coalesce(-edge.c.confidence, 0.0),
        case((edge.c.weight.is_(None), 1), else_=0),
        func.coalesce(-edge.c.weight, 0.0),
        edge.c.id,
    )


def last_slot(node: ColumnElement[Any], fanout: int) -> ScalarSelect[Any]:
    """The pk of `node`'s `fanout`-th best followable edge; NULL when it has fewer."""
    edge, target = alias("slot_edge"), alias("slot_target")
    return (
        select(edge.c.pk)
        .select_from(edge)
        .join(target, and_(*visible_target(edge, target)))
        .where(edge.c.edge_from == node, *followable_edge(edge))
        .order_by(*rank_key(edge))
        .limit(1)
        .offset(fanout - 1)
        .scalar_subquery()
    )


def on_path(path: ColumnElement[Any], node: ColumnElement[Any]) -> ColumnElement[bool]:
    """`node` is a segment of `path`. replace() is literal (ids may hold '_', a LIKE wildcard)
    and behaves the same on SQLite and PostgreSQL."""
    return func.replace(path, "/" + node + "/", "") != path


def starts(fanout: int) -> CTE:
    """The walk's anchor: one row per subject, at depth 0. The caller has verified the subjects;
    their entity rows are read only to have one row per subject, however many there are."""
    start = alias("start")
    anchor = select(
        cast(start.c.id, String).label("node"),
        cast(literal(0), Integer).label("depth"),
        cast("/" + start.c.id + "/", Text).label("path"),
        cast(null(), Integer).label("edge_pk"),
        cast(literal(0), Integer).label("closes"),
        cast(last_slot(start.c.id, fanout), Integer).label("cutoff"),
    ).where(start.c.tenant == value("tenant"), start.c.kind == "entity", start.c.id.in_(value("subjects", many=True)))
    return anchor.cte("walk", recursive=True)


def walk(max_depth: int, fanout: int) -> CTE:
    """walk(node, depth, path, edge_pk, closes, cutoff): each node reached, by which edge,
    whether that edge closed a cycle, and the node's fan-out cutoff (see the module docstring)."""
    walked = starts(fanout)
    edge, cut = alias("walk_edge"), alias("walk_cut")
    closes = on_path(walked.c.path, edge.c.edge_to)
    expandable = and_(walked.c.depth + 1 < max_depth, ~closes)
    step = (
        select(
            cast(edge.c.edge_to, String),
            cast(walked.c.depth + 1, Integer),
            cast(walked.c.path + edge.c.edge_to + "/", Text),
            edge.c.pk,
            cast(case((closes, 1), else_=0), Integer),
            cast(case((expandable, last_slot(edge.c.edge_to, fanout)), else_=null()), Integer),
        )
        .select_from(walked)
        .join(edge, and_(edge.c.tenant == value("tenant"), edge.c.edge_from == walked.c.node))
        .outerjoin(cut, cut.c.pk == walked.c.cutoff)
        .where(
            followable(edge),
            walked.c.depth < max_depth,
            walked.c.closes == 0,
            or_(walked.c.cutoff.is_(None), tuple_(*rank_key(edge)) <= tuple_(*rank_key(cut))),
        )
    )
    return walked.union_all(step)


def reachable_edges(limits: GraphLimits) -> Select[Any]:
    """Each edge reached once, at its smallest depth, best first, at most `pf_limit`; the filter's
    values, the relations and the limit are the statement's parameters (`walk_values`)."""
    return _reachable_edges(clamp(limits.max_depth, 1, MAX_DEPTH), clamp(limits.fanout, 1, MAX_FANOUT))


def walk_values(where: ItemFilter, limits: GraphLimits, limit: int) -> dict[str, Any]:
    return {**bound(where), "pf_relations": list(limits.relations), "pf_limit": max(limit, 0)}


@cache
def _reachable_edges(max_depth: int, fanout: int) -> Select[Any]:
    """One statement per depth and fan-out (at most MAX_DEPTH * MAX_FANOUT), built once."""
    walked = walk(max_depth, fanout)
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
        .limit(bindparam("pf_limit", type_=Integer()))
    )


class SqlGraphConnector:
    """GraphConnector over the `item` table (edges are items of kind 'edge')."""

    name = "graph"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def search(self, where: ItemFilter, limits: GraphLimits, query: RecallQuery) -> SourceResult:
        started = time.perf_counter()
        reason = skip_reason(where, limits)
        if reason is not None:
            return SourceResult.skipped(self.name, reason)
        candidates = await cancellable(self._search, where, limits, query)
        ms = (time.perf_counter() - started) * 1000
        return SourceResult(self.name, "ok" if candidates else "empty", candidates, ms)

    def _search(self, where: ItemFilter, limits: GraphLimits, query: RecallQuery) -> tuple[Candidate, ...]:
        try:
            with watched(self.engine) as conn:
                rows = conn.execute(reachable_edges(limits), walk_values(where, limits, query.limit)).all()
        except SQLAlchemyError as exc:
            raise ConnectorError(f"graph walk failed: {type(exc).__name__}") from exc
        return tuple(
            Candidate(record_from_row(row), self.name, rank, float(row.confidence or 0.0))
            for rank, row in enumerate(rows, start=1)
        )
