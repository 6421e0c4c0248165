"""Re-read an external index's candidates from the store, inside the filter, with their current envelopes."""

from __future__ import annotations

from dataclasses import replace

import anyio.to_thread
from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from connectors.base import SemanticConnector
from connectors.sql.pushdown import bound, item, permitted, record_from_row, tagged
from core.constraints import ItemFilter
from core.errors import ConnectorError
from core.records import Candidate, RecallQuery, SourceResult


class StoreConfirmed:
    """A semantic connector whose candidates are confirmed against the store."""

    def __init__(self, inner: SemanticConnector, engine: Engine) -> None:
        self.inner = inner
        self.engine = engine
        self.name = inner.name

    async def search(self, where: ItemFilter, query: RecallQuery) -> SourceResult:
        result = await self.inner.search(where, query)
        if not result.candidates:
            return result
        confirmed = await anyio.to_thread.run_sync(self._confirm, where, query, result.candidates, abandon_on_cancel=True)
        return replace(result, candidates=confirmed, status="ok" if confirmed else "empty")

    def _confirm(self, where: ItemFilter, query: RecallQuery, candidates: tuple[Candidate, ...]) -> tuple[Candidate, ...]:
        wanted = [c.record.id for c in candidates]
        statement = select(item).where(item.c.id.in_(wanted), permitted(), tagged(query.tags))
        try:
            with self.engine.connect() as conn:
                current = {row._mapping["id"]: record_from_row(row) for row in conn.execute(statement, bound(where))}
        except SQLAlchemyError as exc:
            raise ConnectorError(f"semantic confirmation failed: {type(exc).__name__}") from exc
        kept = [c for c in candidates if c.record.id in current]
        return tuple(
            replace(c, record=current[c.record.id], rank=rank) for rank, c in enumerate(kept, start=1)
        )
