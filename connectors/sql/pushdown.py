"""The policy's constraints as one SQL condition, shared by every SQL connector (Datasette-style)."""

from __future__ import annotations

from typing import Any, Sequence

from sqlalchemy import ColumnElement, FromClause, and_, exists, false, or_, select, true

from core.constraints import ItemFilter
from core.records import Record
from core.tables import EntityTombstone, Item, ItemPrincipal, ItemScope, ItemTag

item = Item.__table__  # type: ignore[attr-defined]
item_principal = ItemPrincipal.__table__  # type: ignore[attr-defined]
item_scope = ItemScope.__table__  # type: ignore[attr-defined]
item_tag = ItemTag.__table__  # type: ignore[attr-defined]
tombstone = EntityTombstone.__table__  # type: ignore[attr-defined]

# Columns naming the entity an item belongs to, hangs off, or links: a tombstone on any of them
# hides the item from every connector in the same instant.
ENTITY_LINKS = ("entity", "attached_to", "edge_from", "edge_to")


def permitted(
    where: ItemFilter, kinds: Sequence[str] | None = None, table: FromClause | None = None, *, links: bool = True
) -> ColumnElement[bool]:
    """Rows the filter admits. `kinds` narrows (never widens) the filter's kinds; `table` is an alias
    of `item` when a query reads it twice (the graph walk). With `links`, a row that names an entity
    (ENTITY_LINKS) the filter hides is hidden too: an edge shows only when both its ends do."""
    allowed_kinds = tuple(where.kinds if kinds is None else (k for k in kinds if k in where.kinds or k == "entity"))
    if not where.principals or not allowed_kinds:
        return false()
    t = item if table is None else table
    tombstoned = select(tombstone.c.entity_id).where(tombstone.c.tenant == where.tenant).scalar_subquery()
    return and_(
        t.c.tenant == where.tenant,
        t.c.kind.in_(allowed_kinds),
        t.c.sensitivity.in_(where.sensitivities),
        t.c.status.in_(where.statuses),
        or_(t.c.valid_from.is_(None), t.c.valid_from <= where.valid_at),
        true() if where.history else or_(t.c.valid_to.is_(None), t.c.valid_to > where.valid_at),
        exists(
            select(item_principal.c.item_pk).where(
                item_principal.c.item_pk == t.c.pk,
                item_principal.c.principal.in_(where.principals),
            )
        ),
        or_(
            t.c.scoped.is_(False),
            exists(
                select(item_scope.c.item_pk).where(
                    item_scope.c.item_pk == t.c.pk,
                    item_scope.c.scope.in_(where.scopes),
                )
            ),
        ),
        or_(t.c.attached_to.is_(None), t.c.attached_to.in_(where.subjects)),
        *(or_(t.c[column].is_(None), t.c[column].not_in(tombstoned)) for column in ENTITY_LINKS),
        *((_linked_entity_visible(where, t, column) for column in ENTITY_LINKS) if links else ()),
    )


def _linked_entity_visible(where: ItemFilter, t: FromClause, column: str) -> ColumnElement[bool]:
    """The entity a row names in `column` is admitted by the filter, or the store holds no such
    entity (a reference to nothing reveals nothing)."""
    entity = item.alias(f"linked_{column}")
    named = and_(entity.c.tenant == t.c.tenant, entity.c.id == t.c[column], entity.c.kind == "entity")
    return or_(
        t.c[column].is_(None),
        ~exists(select(entity.c.pk).where(named)),
        exists(select(entity.c.pk).where(named, permitted(where, kinds=("entity",), table=entity, links=False))),
    )


def tagged(tags: Sequence[str]) -> ColumnElement[bool]:
    """The caller's tag filter: every tag must be present. ANDed with `permitted`, never instead."""
    return and_(
        true(),
        *(
            exists(select(item_tag.c.item_pk).where(item_tag.c.item_pk == item.c.pk, item_tag.c.tag == tag))
            for tag in tags
        )
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
