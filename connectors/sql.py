"""Exact connector: entities by id or normalised identifier, and their properties and memories."""

from __future__ import annotations

import time

import anyio.to_thread
from sqlalchemy import or_, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from connectors.base import Candidate, Constraints, Identifier, Record, RecallQuery, SourceResult
from connectors.pushdown import item, permitted, record_from_row, tagged
from gateway.errors import ConnectorError

IDENTIFIER_COLUMNS = {"id": item.c.id, "email": item.c.email, "domain": item.c.domain, "phone": item.c.phone}
SUBJECT_KINDS = ("property", "memory")
MAX_SECTION_PIECES = 200


class SqlExactConnector:
    name = "exact"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def lookup(self, constraints: Constraints, identifiers: tuple[Identifier, ...]) -> tuple[Record, ...]:
        if not identifiers:
            return ()
        return await anyio.to_thread.run_sync(self._lookup, constraints, identifiers, abandon_on_cancel=True)

    async def search(self, constraints: Constraints, query: RecallQuery) -> SourceResult:
        started = time.perf_counter()
        if not constraints.subjects and not query.ids:
            return SourceResult(self.name, "skipped", detail="no resolved entity and no ids to fetch")
        candidates = await anyio.to_thread.run_sync(self._search, constraints, query, abandon_on_cancel=True)
        ms = (time.perf_counter() - started) * 1000
        return SourceResult(self.name, "ok" if candidates else "empty", candidates, ms)

    async def sections(self, constraints: Constraints, keys: tuple[tuple[str, str], ...]) -> tuple[Record, ...]:
        """Every permitted piece of the given (document, section) pairs, in document order."""
        if not keys:
            return ()
        return await anyio.to_thread.run_sync(self._sections, constraints, keys, abandon_on_cancel=True)

    def _sections(self, constraints: Constraints, keys: tuple[tuple[str, str], ...]) -> tuple[Record, ...]:
        # One IN over the indexed (tenant, document, section) columns; the exact pairs are picked
        # here, since an OR of fifty (document AND section) terms makes SQLite scan the tenant.
        wanted = set(keys)
        statement = (
            select(item)
            .where(
                permitted(constraints, kinds=("document",)),
                item.c.document.in_(sorted({document for document, _ in keys})),
                item.c.section.in_(sorted({section for _, section in keys})),
            )
            .order_by(item.c.document, item.c.id)
            .limit(MAX_SECTION_PIECES * 4)
        )
        try:
            with self.engine.connect() as conn:
                rows = [record_from_row(row) for row in conn.execute(statement)]
        except SQLAlchemyError as exc:
            raise ConnectorError(f"section lookup failed: {type(exc).__name__}") from exc
        return tuple(r for r in rows if (r.document, r.section) in wanted)[:MAX_SECTION_PIECES]

    def _lookup(self, constraints: Constraints, identifiers: tuple[Identifier, ...]) -> tuple[Record, ...]:
        matches = or_(*(IDENTIFIER_COLUMNS[i.kind] == i.value for i in identifiers if i.kind in IDENTIFIER_COLUMNS))
        statement = select(item).where(permitted(constraints, kinds=("entity",)), matches).limit(50)
        try:
            with self.engine.connect() as conn:
                return tuple(record_from_row(row) for row in conn.execute(statement))
        except SQLAlchemyError as exc:
            raise ConnectorError(f"exact lookup failed: {type(exc).__name__}") from exc

    def _search(self, constraints: Constraints, query: RecallQuery) -> tuple[Candidate, ...]:
        if query.ids:
            wanted = (permitted(constraints), item.c.id.in_(query.ids))
        else:
            wanted = (permitted(constraints, kinds=SUBJECT_KINDS), item.c.entity.in_(constraints.subjects))
        statement = (
            select(item)
            .where(*wanted, tagged(query.tags))
            .order_by(item.c.recorded_at.desc().nulls_last(), item.c.id)
            .limit(query.limit)
        )
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(statement).all()
        except SQLAlchemyError as exc:
            raise ConnectorError(f"exact search failed: {type(exc).__name__}") from exc
        return tuple(
            Candidate(record_from_row(row), self.name, rank, 1.0 / rank) for rank, row in enumerate(rows, start=1)
        )
