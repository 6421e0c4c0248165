"""Re-read an external index's candidates from the store, inside the filter, with their current envelopes."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Final, Protocol, runtime_checkable

import anyio.to_thread
from sqlalchemy import select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from connectors.base import SemanticConnector
from connectors.sql.pushdown import bound, item, permitted, record_from_row, record_select, tagged
from core.constraints import ItemFilter
from core.errors import ConnectorError
from core.records import Candidate, RecallQuery, SourceResult

WIDEN: Final = 4  # each further ask takes this many times as many candidates
MAX_ASKS: Final = 3  # the first ask and at most two wider ones
MAX_WINDOW: Final = 1_000
log = logging.getLogger("gateway.connectors")


@runtime_checkable
class Forgetting(Protocol):
    """An index that can drop its copies of items the store no longer holds."""

    def forget(self, tenant: str, ids: tuple[str, ...]) -> int: ...


class StoreConfirmed:
    """A semantic connector whose candidates are confirmed against the store.

    A candidate the store no longer admits (deleted, tombstoned, re-shared since the copy) still
    took one of the index's `limit` slots, so when any is dropped and the index had filled the page,
    the index is asked again for a wider window (x4, at most twice, at most 1,000), as the in-process
    index widens past forbidden neighbours: asking for 10 does not return 7 because stale copies
    were nearer. Copies of items the store does not hold at all any more (a document's removed
    pieces) are dropped from the index when met, if it can (`Forgetting`).
    """

    def __init__(self, inner: SemanticConnector, engine: Engine) -> None:
        self.inner = inner
        self.engine = engine
        self.name = inner.name

    async def search(self, where: ItemFilter, query: RecallQuery) -> SourceResult:
        window = query.limit
        for ask in range(MAX_ASKS):
            asked = replace(query, limit=window)
            result = await self.inner.search(where, asked)
            if not result.candidates:
                return result
            confirmed, gone = await anyio.to_thread.run_sync(
                self._confirm, where, query, result.candidates, abandon_on_cancel=True
            )
            if gone and isinstance(self.inner, Forgetting):
                try:
                    await anyio.to_thread.run_sync(self.inner.forget, where.tenant, gone, abandon_on_cancel=True)
                except ConnectorError as exc:  # the copies stay and are dropped again next time; the answer stands
                    log.warning("semantic: could not drop %d stale copies: %s", len(gone), exc.message)
            dropped = len(result.candidates) - len(confirmed)
            full = len(result.candidates) >= window
            if not dropped or not full or len(confirmed) >= query.limit or ask == MAX_ASKS - 1 or window >= MAX_WINDOW:
                kept = confirmed[: query.limit]
                return replace(result, candidates=kept, status="ok" if kept else "empty")
            window = min(window * WIDEN, MAX_WINDOW)
        raise AssertionError("unreachable")  # pragma: no cover - the loop always returns

    def _confirm(
        self, where: ItemFilter, query: RecallQuery, candidates: tuple[Candidate, ...]
    ) -> tuple[tuple[Candidate, ...], tuple[str, ...]]:
        """The candidates the store admits, with its envelopes, re-ranked; and the ids among the
        rest that the tenant's store does not hold at all."""
        wanted = [c.record.id for c in candidates]
        statement = record_select().where(item.c.id.in_(wanted), permitted(), tagged(query.tags))
        try:
            with self.engine.connect() as conn:
                current = {row._mapping["id"]: record_from_row(row) for row in conn.execute(statement, bound(where))}
                missing = [i for i in wanted if i not in current]
                held = (
                    set(conn.execute(select(item.c.id).where(item.c.tenant == where.tenant, item.c.id.in_(missing))).scalars())
                    if missing
                    else set()
                )
        except SQLAlchemyError as exc:
            raise ConnectorError(f"semantic confirmation failed: {type(exc).__name__}") from exc
        kept = [c for c in candidates if c.record.id in current]
        confirmed = tuple(replace(c, record=current[c.record.id], rank=rank) for rank, c in enumerate(kept, start=1))
        return confirmed, tuple(i for i in missing if i not in held)
