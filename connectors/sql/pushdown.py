"""The policy's constraints as one SQL condition, shared by every SQL connector (Datasette-style).

The condition is a template: its shape (which kinds, which table, whether linked entities are
checked) is built once per process, and the constraint's values (tenant, principals, instant, ...)
are named parameters bound when the statement runs, `conn.execute(statement, bound(where))`.
Building the condition for every call cost more than running it (a graph walk's statement, which
holds thirty of them, took ~50 ms of interpreter time to build), and that time was taken from every
other call in the process. A statement run without the values fails ("a value is required for bind
parameter 'pf_tenant'"): forgetting them can break a source, never widen what it returns.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Sequence

from sqlalchemy import (
    BindParameter,
    Boolean,
    ColumnElement,
    FromClause,
    Select,
    and_,
    bindparam,
    exists,
    false,
    or_,
    select,
    true,
)

from core.constraints import ItemFilter
from core.records import Record
from core.tables import EntityTombstone, Item, ItemPrincipal, ItemScope, ItemTag

item = Item.__table__  # type: ignore[attr-defined]
item_principal = ItemPrincipal.__table__  # type: ignore[attr-defined]
item_scope = ItemScope.__table__  # type: ignore[attr-defined]
item_tag = ItemTag.__table__  # type: ignore[attr-defined]
tombstone = EntityTombstone.__table__  # type: ignore[attr-defined]

# The columns `record_from_row` reads, in the table's order: what a connector selects for a candidate.
# Not `value`, `scoped`, `content_hash` or `updated_at`, which no record holds: the walks read about
# 130 rows a call, and a JSON column and a timestamp less a row cost ~15% of a walk (issue 57).
RECORD_COLUMNS = tuple(c for c in item.columns if c.name in Record.__slots__ or c.name == "pk")


def record_select() -> Select[Any]:
    """`SELECT` of the columns a Record is made of (and `pk`), from `item`."""
    return select(*RECORD_COLUMNS)


# Columns naming the entity an item belongs to, hangs off, or links: a tombstone on any of them
# hides the item from every connector in the same instant.
ENTITY_LINKS = ("entity", "attached_to", "edge_from", "edge_to")


def value(name: str, *, many: bool = False) -> BindParameter[Any]:
    """The constraint value `name` (see `bound`), as a parameter of the statement; `many` for a list."""
    return bindparam(f"pf_{name}", expanding=many)


def bound(where: ItemFilter) -> dict[str, Any]:
    """The values of `permitted`'s parameters for one filter."""
    return {
        "pf_tenant": where.tenant,
        "pf_kinds": list(where.kinds),
        "pf_principals": list(where.principals),
        "pf_sensitivities": list(where.sensitivities),
        "pf_statuses": list(where.statuses),
        "pf_scopes": list(where.scopes),
        "pf_subjects": list(where.subjects),
        "pf_valid_at": where.valid_at,
        "pf_history": where.history,
    }


@cache
def alias(name: str) -> FromClause:
    """The alias of `item` called `name`, built once per process (an alias builds its column
    collection on first use, which cost more than the statement). An alias is an immutable clause,
    safe to share between statements and threads."""
    built: FromClause = item.alias(name)
    built.c  # noqa: B018 - build the column collection now, not in the first statement
    return built


def permitted(kinds: Sequence[str] | None = None, table: FromClause | None = None, *, links: bool = True) -> ColumnElement[bool]:
    """Rows the filter (`bound(where)`) admits. `kinds` narrows (never widens) the filter's kinds,
    except that an entity stays an entity (an edge's ends are checked as entities whatever kinds
    the call reads); `table` is an alias of `item` when a query reads it twice (the graph walk).
    With `links`, a row that names an entity (ENTITY_LINKS) the filter hides is hidden too: an edge
    shows only when both its ends do."""
    return _permitted(None if kinds is None else tuple(kinds), item if table is None else table, links)


@cache
def _permitted(kinds: tuple[str, ...] | None, t: FromClause, links: bool) -> ColumnElement[bool]:
    if kinds is not None and not kinds:
        return false()
    return and_(*(clause for _, clause in _conjuncts(kinds, t, links)))


def conjuncts(kinds: Sequence[str] | None = None, *, links: bool = True) -> tuple[tuple[str, ColumnElement[bool]], ...]:
    """`permitted`'s condition as its named parts, ANDed in that order (for explain: which part
    excludes a row). The names: tenant, kind, sensitivity, status, valid_from, valid_to, acl,
    scope, attachment, and per column of ENTITY_LINKS `tombstone:<column>` and `linked_entity:<column>`."""
    return _conjuncts(None if kinds is None else tuple(kinds), item, links)


@cache
def _conjuncts(kinds: tuple[str, ...] | None, t: FromClause, links: bool) -> tuple[tuple[str, ColumnElement[bool]], ...]:
    kind: ColumnElement[bool] = t.c.kind.in_(value("kinds", many=True))
    if kinds is not None:
        kind = and_(t.c.kind.in_(kinds), or_(t.c.kind == "entity", kind) if "entity" in kinds else kind)
    tombstoned = select(tombstone.c.entity_id).where(tombstone.c.tenant == value("tenant")).scalar_subquery()
    return (
        ("tenant", t.c.tenant == value("tenant")),
        ("kind", kind),
        ("sensitivity", t.c.sensitivity.in_(value("sensitivities", many=True))),
        ("status", t.c.status.in_(value("statuses", many=True))),
        ("valid_from", or_(t.c.valid_from.is_(None), t.c.valid_from <= value("valid_at"))),
        ("valid_to", or_(bindparam("pf_history", type_=Boolean()), t.c.valid_to.is_(None), t.c.valid_to > value("valid_at"))),
        (
            "acl",
            exists(
                select(item_principal.c.item_pk).where(
                    item_principal.c.item_pk == t.c.pk,
                    item_principal.c.principal.in_(value("principals", many=True)),
                )
            ),
        ),
        (
            "scope",
            or_(
                t.c.scoped.is_(False),
                exists(
                    select(item_scope.c.item_pk).where(
                        item_scope.c.item_pk == t.c.pk,
                        item_scope.c.scope.in_(value("scopes", many=True)),
                    )
                ),
            ),
        ),
        ("attachment", or_(t.c.attached_to.is_(None), t.c.attached_to.in_(value("subjects", many=True)))),
        *((f"tombstone:{column}", or_(t.c[column].is_(None), t.c[column].not_in(tombstoned))) for column in ENTITY_LINKS),
        *(((f"linked_entity:{column}", _linked_entity_visible(t, column)) for column in ENTITY_LINKS) if links else ()),
    )


def _linked_entity_visible(t: FromClause, column: str) -> ColumnElement[bool]:
    """The entity a row names in `column` is admitted by the filter, or the store holds no such
    entity (a reference to nothing reveals nothing)."""
    entity = alias(f"linked_{column}")
    named = and_(entity.c.tenant == t.c.tenant, entity.c.id == t.c[column], entity.c.kind == "entity")
    return or_(
        t.c[column].is_(None),
        ~exists(select(entity.c.pk).where(named)),
        exists(select(entity.c.pk).where(named, permitted(("entity",), entity, links=False))),
    )


def named(ids: Any, tenant: Any = None) -> ColumnElement[bool]:
    """Rows whose id is among `ids` (a list, or an expanding parameter), of the filter's tenant (or
    of `tenant`), found by the unique (tenant, id) index first. Beside the constraints' `kind IN`
    an `id IN` made SQLite walk the tenant's (tenant, kind) index instead: ~130 ms for 10 ids among
    90,000 items (the exact source), 117 ms for the rerank's 40 at 100,000."""
    owner = value("tenant") if tenant is None else tenant
    found: ColumnElement[bool] = item.c.pk.in_(
        select(item.c.pk).where(item.c.tenant == owner, item.c.id.in_(ids)).scalar_subquery()
    )
    return found


def tagged(tags: Sequence[str]) -> ColumnElement[bool]:
    """The caller's tag filter: every tag must be present. ANDed with `permitted`, never instead."""
    return and_(
        true(),
        *(exists(select(item_tag.c.item_pk).where(item_tag.c.item_pk == item.c.pk, item_tag.c.tag == tag)) for tag in tags),
    )


def record_from_row(row: Any) -> Record:
    m = row._mapping
    return Record(
        id=m["id"],
        kind=m["kind"],
        tenant=m["tenant"],
        text=m["text"] or "",
        acl=tuple(m["acl"] or ()),
        sensitivity=m["sensitivity"],
        scope=tuple(m["scope"] or ()),
        authority=m["authority"],
        status=m["status"],
        valid_from=m["valid_from"],
        valid_to=m["valid_to"],
        recorded_at=m["recorded_at"],
        entity=m["entity"],
        section=m["section"],
        document=m["document"],
        name=m["name"],
        slot=m["slot"],
        attached_to=m["attached_to"],
        source_system=m["source_system"],
        source_uri=m["source_uri"],
        entity_type=m["entity_type"],
        email=m["email"],
        domain=m["domain"],
        phone=m["phone"],
        profile=m["profile"],
        merged_into=m["merged_into"],
        relation=m["relation"],
        edge_from=m["edge_from"],
        edge_to=m["edge_to"],
        confidence=m["confidence"],
        weight=m["weight"],
        tags=tuple(m["tags"] or ()),
    )
