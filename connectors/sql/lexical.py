"""Lexical connector: BM25 top-k on Tantivy, the constraints inside the query.

A tenant's Tantivy index (connectors/sql/text_index.py) ranks once it is built, on SQLite and on
PostgreSQL; until then, or with `GATEWAY_LEXICAL_ENGINE=store`, the store's own engine does: the
tenant's FTS5 table with the same filter, or PostgreSQL's `ts_rank_cd` in one statement with the
constraints.

Only the caller's tenant is searched: on SQLite its own FTS5 table (its own BM25 statistics and
candidates; a tenant that never wrote has none, so nothing matches), on PostgreSQL an index that
leads with the tenant. Another tenant's data changes neither scores, timing nor status.
"""

from __future__ import annotations

import re
import time
from functools import cache, lru_cache
from typing import Any, Callable

import numpy as np
import numpy.typing as npt
from sqlalchemy import ColumnElement, Integer, bindparam, func, literal_column, select, text
from sqlalchemy.engine import Connection, Engine, Row
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql import Select

from connectors.sql.cancel import cancellable, watched
from connectors.sql.pushdown import bound, item, permitted, record_from_row, record_select, tagged
from connectors.sql.text_index import TextIndex
from connectors.sql.walk import walk
from core.constraints import ItemFilter
from core.errors import ConnectorError
from core.records import Candidate, RecallQuery, SkipReason, SourceResult
from core.store import lexical_table, tenant_index_exists, visibility_value

MAX_TERMS = 32
FIRST_WINDOW = 250
TANTIVY_WINDOW = 32
TERM = re.compile(r"[^\W_]+", re.UNICODE)


# Function words match nearly everything, so they would turn any question into a list of
# unrelated hits: they are not lexical evidence.
STOPWORDS = frozenset(
    "a an and are as at be been but by can could did do does for from had has have how i if in into is it its "
    "me my of on or our shall should so than that the their them then there these they this those to us was we "
    "were what when where which who whom why will with would you your about any all also just not no more most "
    "other some such only own same too very s t".split()
)


def query_terms(text_: str | None) -> list[str]:
    """Content words of a query, lower-cased and de-duplicated; punctuation never reaches the engine."""
    seen: dict[str, None] = {}
    for term in TERM.findall((text_ or "").lower()):
        if term not in STOPWORDS:
            seen.setdefault(term, None)
    return list(seen)[:MAX_TERMS]


def fts_match(terms: list[str]) -> str:
    """An FTS5 OR-query of quoted terms; the terms hold word characters only, so nothing else is syntax."""
    return " OR ".join(f'"{term}"' for term in terms)


def visibility_groups(where: ItemFilter) -> list[list[str]] | None:
    """The caller's filter as groups of `vis` tokens (core/store.py `visibility_tokens`): kind,
    sensitivity, status, scope and principals; a row is admitted when it holds a token of every
    group. None when the filter admits nothing. Tokens are hex: nothing in them is syntax."""
    groups = [
        [visibility_value("k", kind) for kind in where.kinds],
        [visibility_value("s", sensitivity) for sensitivity in where.sensitivities],
        [visibility_value("t", status) for status in where.statuses],
        ["u0", *(visibility_value("c", scope) for scope in where.scopes)],
        [visibility_value("p", principal) for principal in where.principals],
    ]
    return groups if all(groups) else None


def visible_match(terms: list[str], where: ItemFilter) -> str | None:
    """The caller's words in `text`, ANDed with its filter over the `vis` tokens. FTS5 then reads and
    scores only rows the filter may admit, so rows the caller may not see cost it no window, no
    walk and no score. None when the filter admits nothing."""
    groups = visibility_groups(where)
    return None if groups is None else _words_and_groups(terms, groups)


def _words_and_groups(terms: list[str], groups: list[list[str]]) -> str:
    return " AND ".join([f"text : ({fts_match(terms)})", *(f"vis : ({fts_match(group)})" for group in groups)])


@lru_cache(maxsize=1024)
def best_matches(fts: str) -> Select:  # type: ignore[type-arg]
    """A tenant's best `window` FTS5 matches by BM25 over `text` (pk, score), best first: the engine
    alone, built once per tenant table (building a statement cost more than running it). The `vis`
    column weighs nothing, so scores are those of the text alone."""
    return (
        select(literal_column("rowid").label("pk"), func.bm25(literal_column(fts), 1.0, 0.0).label("score"))
        .select_from(text(fts))
        .where(text(f"{fts} MATCH :match"))
        .order_by(literal_column("score"), literal_column("pk"))  # ties by pk, so a window's edge is stable
        .limit(bindparam("window", type_=Integer()))
    )


@cache
def _matched_rows() -> Select:  # type: ignore[type-arg]
    return record_select().where(permitted(), item.c.pk.in_(bindparam("walk_pks", expanding=True)))


def matched_rows(tags: tuple[str, ...]) -> Select:  # type: ignore[type-arg]
    """The rows of the pks bound as `walk_pks` that the filter (and the caller's tags) admit."""
    if not tags:
        return _matched_rows()
    return record_select().where(permitted(), tagged(tags), item.c.pk.in_(bindparam("walk_pks", expanding=True)))


class FullTextConnector:
    name = "lexical"

    def __init__(self, engine: Engine, engine_name: str = "tantivy") -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        # Tantivy ranks (top-k, the filter inside the query) once a tenant's index is built; the
        # store's own engine (FTS5, PostgreSQL's) answers until then, and always with `engine_name="store"`.
        self.text = TextIndex(engine) if engine_name == "tantivy" else None
        # Tenants whose FTS5 table was seen: a table is never dropped while the service runs, so it
        # is looked up until found, then no more (a statement less per call).
        self._indexed: set[str] = set()

    def admitted(self, conn: Connection, where: ItemFilter, cap: int) -> tuple[int, npt.NDArray[np.int64] | None] | None:
        """How many of the tenant's rows the filter's tokens admit, and their keys when at most `cap`
        (`TextIndex.admitted`); None when no Tantivy index of the tenant is ready to say. For the
        semantic search's plan: a superset of the permitted rows, each still checked when read."""
        if self.text is None:
            return None
        groups = visibility_groups(where)
        if groups is None:
            return 0, np.zeros(0, dtype=np.int64)
        index = self.text.state(conn, where.tenant)
        return None if index is None else self.text.admitted(index, groups, cap)

    def readiness(self) -> dict[str, Any]:
        """What ranks lexical search here, and how far the Tantivy indexes are built (`/readyz`)."""
        if self.text is not None:
            return self.text.readiness()
        return {"engine": "fts5" if self.dialect == "sqlite" else "postgres"}

    def warm(self) -> None:
        """Build every tenant's Tantivy index (start-up, on the index's own threads)."""
        if self.text is not None:
            self.text.warm()

    def close(self) -> None:
        """Stop the Tantivy indexes' builds and catch-ups and wait for their threads (at shutdown,
        before the store is closed); the store's own engine answers any search after it."""
        if self.text is not None:
            self.text.close()

    async def search(self, where: ItemFilter, query: RecallQuery) -> SourceResult:
        started = time.perf_counter()
        terms = query_terms(query.text)
        if not any(any(ch.isalpha() for ch in term) for term in terms):
            return SourceResult.skipped(self.name, SkipReason.NO_WORDS_TO_SEARCH)
        candidates = await cancellable(self._search, where, query, terms)
        ms = (time.perf_counter() - started) * 1000
        return SourceResult(self.name, "ok" if candidates else "empty", candidates, ms)

    def _postgres_statement(self, where: ItemFilter, query: RecallQuery, terms: list[str]) -> Select:  # type: ignore[type-arg]
        tsquery = func.websearch_to_tsquery("english", " or ".join(terms))
        tsv: ColumnElement[Any] = literal_column("item.tsv")
        score = func.ts_rank_cd(tsv, tsquery)
        return (
            select(item, score.label("score"))
            .where(tsv.op("@@")(tsquery), permitted(), tagged(query.tags))
            .order_by(score.desc(), item.c.pk)
            .limit(query.limit)
        )

    def _search(self, where: ItemFilter, query: RecallQuery, terms: list[str]) -> tuple[Candidate, ...]:
        try:
            with watched(self.engine) as conn:
                found = self._rows(conn, where, query, terms)
        except SQLAlchemyError as exc:
            raise ConnectorError(f"lexical search failed: {type(exc).__name__}") from exc
        return tuple(
            Candidate(record_from_row(row), self.name, rank, abs(score)) for rank, (row, score) in enumerate(found, start=1)
        )

    def _rows(self, conn: Connection, where: ItemFilter, query: RecallQuery, terms: list[str]) -> list[tuple[Row[Any], float]]:
        if self.dialect == "sqlite" and where.tenant not in self._indexed:
            if not tenant_index_exists(conn, where.tenant):
                return []  # the tenant never wrote an item: nothing of its can match
            self._indexed.add(where.tenant)
        try:
            return self._ranked_rows(conn, where, query, terms)
        except SQLAlchemyError:
            self._indexed.discard(where.tenant)  # a store restored under the service: look again
            raise

    def _ranked_rows(
        self, conn: Connection, where: ItemFilter, query: RecallQuery, terms: list[str]
    ) -> list[tuple[Row[Any], float]]:
        """Tantivy's ranking when the tenant's index is ready, else the store's own (FTS5, or
        PostgreSQL's in one statement with the constraints)."""
        groups = visibility_groups(where)
        if groups is None:
            return []
        text_index = self.text
        index = text_index.state(conn, where.tenant) if text_index is not None else None
        if text_index is not None and index is not None:
            # Tantivy prunes to the window, and its filter already excludes all the tokens can say:
            # only a clock's constraints or tags widen it.
            return self._walked(
                conn,
                where,
                query,
                lambda window: text_index.search(index, terms, groups, window),
                max(TANTIVY_WINDOW, query.limit * 2),
            )
        if self.dialect != "sqlite":
            rows = conn.execute(self._postgres_statement(where, query, terms), bound(where)).all()
            return [(row, float(row._mapping["score"])) for row in rows]
        best = best_matches(lexical_table(where.tenant))  # hex digits after a fixed prefix: safe to name in SQL
        match = _words_and_groups(terms, groups)

        def fts5(window: int) -> list[tuple[int, float]]:
            return [(int(pk), float(score)) for pk, score in conn.execute(best, {"match": match, "window": window})]

        return self._walked(conn, where, query, fts5, max(FIRST_WINDOW, query.limit * 5))  # FTS5 scores every match anyway

    @staticmethod
    def _walked(
        conn: Connection, where: ItemFilter, query: RecallQuery, ranked_by: Callable[[int], list[tuple[int, float]]], window: int
    ) -> list[tuple[Row[Any], float]]:
        """The best `window` matches (pk, score), best first, then the permitted rows among them,
        best first (ties by pk), until `limit` are found; the window widens until they are or every
        match has been seen. The answer is exactly the top `limit` of the permitted matches, and the
        constraints run only on the pks read (`walk`), not the window."""
        statement = matched_rows(query.tags)
        while True:
            ranked = ranked_by(window)
            done = walk(conn, statement, bound(where), [pk for pk, _ in ranked], query.limit)
            if len(done.rows) >= query.limit or len(ranked) < window:
                return [(row, float(ranked[position][1])) for row, position in done.rows]
            window *= 4

    @staticmethod
    def _match_count(conn: Connection, tenant: str, terms: list[str], cap: int) -> int:
        """How many of the tenant's rows match, counting no further than `cap`."""
        fts = lexical_table(tenant)
        capped = text(f"SELECT count(*) FROM (SELECT rowid FROM {fts} WHERE {fts} MATCH :match LIMIT :cap)")
        return int(conn.execute(capped, {"match": f"text : ({fts_match(terms)})", "cap": cap}).scalar_one())
