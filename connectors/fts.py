"""Lexical connector: BM25 on SQLite FTS5, ts_rank_cd on PostgreSQL, constraints in the same WHERE."""

from __future__ import annotations

import re
import time

import anyio.to_thread
from sqlalchemy import func, literal_column, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql import Select

from connectors.base import Candidate, Constraints, RecallQuery, SourceResult
from connectors.pushdown import item, permitted, record_from_row, tagged
from gateway.errors import ConnectorError

MAX_TERMS = 32
TERM = re.compile(r"[^\W_]+", re.UNICODE)


def query_terms(text_: str | None) -> list[str]:
    """Word terms of a query, lower-cased and de-duplicated; punctuation never reaches the engine."""
    seen: dict[str, None] = {}
    for term in TERM.findall((text_ or "").lower()):
        seen.setdefault(term, None)
    return list(seen)[:MAX_TERMS]


class FullTextConnector:
    name = "lexical"

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name

    async def search(self, constraints: Constraints, query: RecallQuery) -> SourceResult:
        started = time.perf_counter()
        terms = query_terms(query.text)
        if not any(any(ch.isalpha() for ch in term) for term in terms):
            return SourceResult(self.name, "skipped", detail="query has no words to search")
        candidates = await anyio.to_thread.run_sync(self._search, constraints, query, terms)
        ms = (time.perf_counter() - started) * 1000
        return SourceResult(self.name, "ok" if candidates else "empty", candidates, ms)

    def _statement(self, constraints: Constraints, query: RecallQuery, terms: list[str]) -> Select:  # type: ignore[type-arg]
        where = (permitted(constraints), tagged(query.tags))
        if self.dialect == "sqlite":
            match = " OR ".join(f'"{term}"' for term in terms)
            score = func.bm25(literal_column("item_fts"))
            return (
                select(item, score.label("score"))
                .select_from(item.join(text("item_fts"), text("item_fts.rowid = item.pk")))
                .where(text("item_fts MATCH :match").bindparams(match=match), *where)
                .order_by(score, item.c.pk)
                .limit(query.limit)
            )
        tsquery = func.websearch_to_tsquery("english", " or ".join(terms))
        tsv = literal_column("item.tsv")
        score = func.ts_rank_cd(tsv, tsquery)
        return (
            select(item, score.label("score"))
            .where(tsv.op("@@")(tsquery), *where)
            .order_by(score.desc(), item.c.pk)
            .limit(query.limit)
        )

    def _search(self, constraints: Constraints, query: RecallQuery, terms: list[str]) -> tuple[Candidate, ...]:
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(self._statement(constraints, query, terms)).all()
        except SQLAlchemyError as exc:
            raise ConnectorError(f"lexical search failed: {type(exc).__name__}") from exc
        return tuple(
            Candidate(record_from_row(row), self.name, rank, abs(float(row._mapping["score"])))
            for rank, row in enumerate(rows, start=1)
        )
