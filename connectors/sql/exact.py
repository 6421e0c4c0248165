"""Exact connector: entities by id or normalised identifier, and their properties and memories."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import ColumnElement, and_, bindparam, or_, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from connectors.sql.cancel import cancellable, watched
from connectors.sql.pushdown import bound, item, named, permitted, record_from_row, record_select, tagged
from core.constraints import ItemFilter
from core.errors import ConnectorError
from core.records import Candidate, Identifier, RecallQuery, Record, SkipReason, SourceResult

IDENTIFIER_COLUMNS = {
    "id": item.c.id,
    "email": item.c.email,
    "domain": item.c.domain,
    "phone": item.c.phone,
    "profile": item.c.profile,
}
# An email, phone or profile names a contact, a website a company; an id names whatever has it.
IDENTIFIER_TYPES = {"email": "contact", "phone": "contact", "profile": "contact", "domain": "company"}
SUBJECT_KINDS = ("property", "memory")
MAX_SECTION_PIECES = 200
MAX_ENTITIES = 50
# Built once: building a statement over the constraint's template (and its cache key) cost more than running it.
SECTION_PIECES = (
    select(item.c.pk, item.c.id, item.c.document, item.c.section)
    .where(
        permitted(("document",)),
        item.c.document.in_(bindparam("section_documents", expanding=True)),
        # `section || ''` keeps the index to (tenant, document): probing every document x section
        # pair of the two lists (10,000 for 100 hits) cost ~5x more than checking each row's section.
        item.c.section.concat("").in_(bindparam("section_names", expanding=True)),
    )
    .order_by(item.c.document, item.c.id)
    .limit(MAX_SECTION_PIECES * 4)
)
PIECE_ROWS = record_select().where(permitted(("document",)), item.c.pk.in_(bindparam("piece_pks", expanding=True)))


class SqlExactConnector:
    name = "exact"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def lookup(self, where: ItemFilter, identifiers: tuple[Identifier, ...]) -> tuple[Record, ...]:
        if not identifiers:
            return ()
        return await cancellable(self._lookup, where, identifiers)

    async def linked(self, tenant: str, ids: tuple[str, ...]) -> tuple[Record, ...]:
        """The tenant's entities with these ids, for the item policy's link check; never returned."""
        if not ids:
            return ()
        statement = record_select().where(item.c.kind == "entity", named(ids, tenant))
        return await cancellable(self._entities, statement, {}, "linked entity lookup")

    async def search(self, where: ItemFilter, query: RecallQuery) -> SourceResult:
        started = time.perf_counter()
        if not where.subjects and not query.ids and not query.tags:
            return SourceResult.skipped(self.name, SkipReason.NOTHING_TO_LOOK_UP)
        candidates = await cancellable(self._search, where, query)
        ms = (time.perf_counter() - started) * 1000
        return SourceResult(self.name, "ok" if candidates else "empty", candidates, ms)

    async def sections(
        self, where: ItemFilter, keys: tuple[tuple[str, str], ...], known: tuple[Record, ...] = ()
    ) -> tuple[Record, ...]:
        """Every permitted piece of the given (document, section) pairs, in document order; pieces
        among the `known` records are not read again (a one-piece section is its own hit)."""
        if not keys:
            return ()
        return await cancellable(self._sections, where, keys, known)

    def _sections(self, where: ItemFilter, keys: tuple[tuple[str, str], ...], known: tuple[Record, ...]) -> tuple[Record, ...]:
        # One IN over the indexed (tenant, document, section) columns; the exact pairs are picked
        # here, since an OR of fifty (document AND section) terms makes SQLite scan the tenant.
        # The pieces are found by their keys first; only those not already in hand are read whole.
        wanted = set(keys)
        values = {
            **bound(where),
            "section_documents": sorted({document for document, _ in keys}),
            "section_names": sorted({section for _, section in keys}),
        }
        try:
            with watched(self.engine) as conn:
                found = [row for row in conn.execute(SECTION_PIECES, values) if (row.document, row.section) in wanted]
                found = found[:MAX_SECTION_PIECES]
                have = {r.id: r for r in known if r.kind == "document"}
                missing = [row.pk for row in found if row.id not in have]
                if missing:
                    read = conn.execute(PIECE_ROWS, {**bound(where), "piece_pks": missing})
                    have.update((record.id, record) for record in map(record_from_row, read))
        except SQLAlchemyError as exc:
            raise ConnectorError(f"section lookup failed: {type(exc).__name__}") from exc
        # A piece whose row could not be read again (changed in between) is left out, never guessed.
        return tuple(have[row.id] for row in found if row.id in have)

    async def merged_into(self, where: ItemFilter, survivors: tuple[str, ...]) -> tuple[Record, ...]:
        """Entities merged into any of the survivors, inside the constraints."""
        if not survivors:
            return ()
        statement = (
            record_select()
            .where(permitted(("entity",)), item.c.merged_into.in_(survivors))
            .order_by(item.c.id)
            .limit(MAX_ENTITIES)
        )
        return await cancellable(self._entities, statement, bound(where), "merge lookup")

    async def sharing_domain(
        self, where: ItemFilter, domains: tuple[str, ...], exclude: tuple[str, ...], limit: int
    ) -> tuple[Record, ...]:
        """Other live, unmerged entities with one of the company domains, inside the constraints."""
        if not domains:
            return ()
        statement = (
            record_select()
            .where(
                permitted(("entity",)),
                item.c.domain.in_(domains),
                item.c.id.not_in(exclude),
                item.c.merged_into.is_(None),
            )
            .order_by(item.c.id)
            .limit(limit)
        )
        return await cancellable(self._entities, statement, bound(where), "alias lookup")

    def _lookup(self, where: ItemFilter, identifiers: tuple[Identifier, ...]) -> tuple[Record, ...]:
        matches = or_(
            *(
                and_(IDENTIFIER_COLUMNS[i.kind] == i.value, item.c.entity_type == IDENTIFIER_TYPES[i.kind])
                if i.kind in IDENTIFIER_TYPES
                else IDENTIFIER_COLUMNS[i.kind] == i.value
                for i in identifiers
                if i.kind in IDENTIFIER_COLUMNS
            )
        )
        statement = record_select().where(permitted(("entity",)), matches).order_by(item.c.id).limit(MAX_ENTITIES)
        return self._entities(statement, bound(where), "exact lookup")

    def _entities(self, statement: Any, values: dict[str, Any], what: str) -> tuple[Record, ...]:
        try:
            with watched(self.engine) as conn:
                return tuple(record_from_row(row) for row in conn.execute(statement, values))
        except SQLAlchemyError as exc:
            raise ConnectorError(f"{what} failed: {type(exc).__name__}") from exc

    def _search(self, where: ItemFilter, query: RecallQuery) -> tuple[Candidate, ...]:
        wanted: tuple[ColumnElement[bool], ...]
        if query.ids:
            wanted = (permitted(), named(query.ids))  # by the unique (tenant, id) index first
        elif where.subjects:
            wanted = (permitted(SUBJECT_KINDS), item.c.entity.in_(where.subjects))
        else:  # filter mode: whatever carries every tag
            wanted = (permitted(),)
        statement = (
            record_select()
            .where(*wanted, tagged(query.tags))
            .order_by(item.c.recorded_at.desc().nulls_last(), item.c.id)
            .limit(query.limit)
        )
        try:
            with watched(self.engine) as conn:
                rows = conn.execute(statement, bound(where)).all()
        except SQLAlchemyError as exc:
            raise ConnectorError(f"exact search failed: {type(exc).__name__}") from exc
        return tuple(Candidate(record_from_row(row), self.name, rank, 1.0 / rank) for rank, row in enumerate(rows, start=1))
