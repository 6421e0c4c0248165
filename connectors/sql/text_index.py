"""Lexical search with top-k pruning: a Tantivy index per tenant, mirrored from the store (SQLite or PostgreSQL).

FTS5 scores every permitted row that matches any query word, so a search's cost grows with the
corpus. Tantivy (a Lucene-like engine in Rust, its official Python bindings) answers a top-k query
without scoring every match and takes the caller's filter inside the query: the same `vis` tokens
FTS5 holds (core/store.py `visibility_tokens`: kind, sensitivity, status, scopes, principals) are
terms of a second field, and a search is the caller's words (BM25 over `text`) AND, per group, any
of the caller's tokens (scoring nothing). Rows the filter excludes are never ranked, so they take
no slot and widen no window. The constraints are still applied to every row read back, from `item`
itself (connectors/sql/lexical.py, `walk`): a stale or forged index entry can hide a row, never
show one.

Each process keeps its own index in memory, built from `item` and kept in step by the change log
(`item_change`: the writer logs the rows it inserts in the same transaction, triggers log updates of
the indexed columns and deletions). Before each search the tenant's log past its index's position is
read and applied (one indexed probe for the tenant when nothing changed), so a search sees every
write committed before it, as FTS5 did, and no other tenant's writes. On SQLite the position is a
log sequence number (one writer commits at a time); on PostgreSQL, where transactions commit in any
order, it is the oldest transaction still running at the last read (`_catch_up_by_transaction`).
A tenant's index is built on its first search (at once when it is small, on a thread of its own
when it is large, the store's own engine answering meanwhile) or at start-up (`warm`).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import tantivy
from sqlalchemy import func, select, text
from sqlalchemy.engine import Connection, Engine

from core.store import visibility_value
from core.tables import Item, ItemChange

log = logging.getLogger("gateway.lexical")
item_change = ItemChange.__table__  # type: ignore[attr-defined]
item = Item.__table__  # type: ignore[attr-defined]
INDEXED = (item.c.pk, item.c.text, item.c.kind, item.c.sensitivity, item.c.status, item.c.scoped, item.c.scope, item.c.acl)

# More waiting log rows than this (a bulk load) are applied on a thread, the store's own engine
# answering meanwhile: 7,500 rows took a search past its 250 ms deadline on PostgreSQL.
CATCH_UP_NOW_MAX = 1_000
BUILD_NOW_MAX = 20_000  # a tenant this small is indexed on its first search; a larger one on a thread
WRITER_HEAP = 32_000_000  # bytes a tenant's index writer buffers before it writes a segment
READ_CHUNK = 5_000
Filter = tuple[tuple[str, ...], ...]
ADMITTED_KEPT = 64  # filters whose admitted rows a tenant's view keeps (each at most the semantic cutoff)


def _schema() -> Any:
    builder = tantivy.SchemaBuilder()
    # en_stem: lower-cased, split on what is not a letter or digit, English stems (FTS5's porter unicode61).
    builder.add_text_field("text", stored=False, tokenizer_name="en_stem", index_option="freq")
    builder.add_text_field("vis", stored=False, tokenizer_name="raw", index_option="basic")
    # Stored, to name a ranked hit's row; fast (unsigned), to list a filter's rows in key order.
    builder.add_unsigned_field("pk", stored=True, indexed=False, fast=True)
    builder.add_text_field("key", stored=False, tokenizer_name="raw", index_option="basic")  # the pk as text, to delete by
    return builder.build()


SCHEMA = _schema()


def _index() -> Any:
    index = tantivy.Index(SCHEMA)  # in memory
    index.config_reader(reload_policy="Manual")  # reloaded when this process commits (OnCommit polls: ~100 ms late)
    return index


def _filter(groups: list[list[str]]) -> list[tuple[Any, Any]]:
    """Per group, any of its tokens: clauses that admit rows and score nothing."""
    return [
        (tantivy.Occur.Must, tantivy.Query.const_score_query(tantivy.Query.term_set_query(SCHEMA, "vis", group), 0.0))
        for group in groups
    ]


@dataclass
class TenantText:
    """One tenant's index: `ready` once built; `seq` is the log position it reflects."""

    index: Any = field(default_factory=lambda: _index())
    writer: Any = None
    searcher: Any = None
    ready: bool = False
    building: bool = False
    docs: int = 0
    seq: int = 0
    catching_up: bool = False  # a large backlog is being applied on a thread
    applied: dict[int, int] = field(default_factory=dict)  # PostgreSQL: log rows at or past the horizon already applied
    lock: threading.Lock = field(default_factory=threading.Lock)  # its writer and `seq`
    cache_lock: threading.Lock = field(default_factory=threading.Lock)  # the per-view caches
    _view: Any = None  # the searcher the caches below were counted on (held, so its identity is never reused)
    _covering: dict[tuple[str, ...], bool] = field(default_factory=dict)
    _admitted: dict[tuple[tuple[str, ...], ...], tuple[int, npt.NDArray[np.int64] | None]] = field(default_factory=dict)

    def open_writer(self) -> None:
        self.writer = self.index.writer(heap_size=WRITER_HEAP, num_threads=1)

    def add(self, pk: int, body: str, vis: str) -> None:
        doc = tantivy.Document()
        doc.add_text("text", body)
        for token in vis.lower().split():  # SQL's hex() is upper case
            doc.add_text("vis", token)
        doc.add_unsigned("pk", pk)
        doc.add_text("key", str(pk))
        self.writer.add_document(doc)

    def publish(self) -> None:
        self.writer.commit()
        self.index.reload()
        self.searcher = self.index.searcher()
        self.docs = self.searcher.num_docs

    def _seen(self, searcher: Any) -> None:
        if self._view is not searcher:
            self._view, self._covering, self._admitted = searcher, {}, {}  # a new view: the old answers no longer hold

    def known(self, searcher: Any, key: Filter, cap: int) -> tuple[int, npt.NDArray[np.int64] | None] | None:
        """What `keep` kept for this filter and view, if it answers for `cap`."""
        self._seen(searcher)
        known = self._admitted.get(key)
        if known is not None and known[0] > cap:
            return known[0], None
        return known if known is not None and known[1] is not None else None

    def keep(self, searcher: Any, key: Filter, answer: tuple[int, npt.NDArray[np.int64] | None]) -> None:
        """Keep a filter's admitted rows while the view lasts: the role's filter cached as its rows
        (Elasticsearch keeps a document-level-security filter as a bitset per segment), so a caller
        asking again pays for neither the count nor the list."""
        if self._view is not searcher:
            return  # the index changed meanwhile: the answer is already old
        if len(self._admitted) >= ADMITTED_KEPT:
            self._admitted.pop(next(iter(self._admitted)))  # the oldest
        self._admitted[key] = answer

    def narrowing(self, searcher: Any, groups: list[list[str]]) -> list[list[str]]:
        """The groups that exclude some row of `searcher`'s view. A group every row holds (all of a
        tenant's rows are documents, internal and active, say) excludes nothing but costs an
        intersection with the whole index: 10.8 -> 2.5 ms a search at a million rows. Counted once
        per group and view (a group whose doc frequencies sum to less than the index's size is
        known to narrow without a count)."""
        self._seen(searcher)
        cache = self._covering
        kept = []
        for group in groups:
            key = tuple(group)
            covers = cache.get(key)
            if covers is None:
                if sum(searcher.doc_freq("vis", token) for token in group) < searcher.num_docs:
                    covers = False
                else:
                    alone = tantivy.Query.boolean_query(_filter([group]))
                    covers = int(searcher.search(alone, 1, count=True).count) == searcher.num_docs
                cache[key] = covers
            if not covers:
                kept.append(group)
        return kept


class TextIndex:
    """The per-tenant Tantivy indexes of one store, for one process. Each follows the log of its
    own tenant only, from its own position: another tenant's writes never cost its searches."""

    def __init__(self, engine: Engine, build_now_max: int = BUILD_NOW_MAX) -> None:
        self.engine = engine
        self.build_now_max = build_now_max
        self._tenants: dict[str, TenantText] = {}
        self._lock = threading.Lock()  # the map of tenants

    @staticmethod
    def _newest(conn: Connection, tenant: str) -> int:
        """The tenant's last log position (the (tenant, seq) index: one probe)."""
        newest = select(func.coalesce(func.max(item_change.c.seq), 0)).where(item_change.c.tenant == tenant)
        return int(conn.execute(newest).scalar_one())

    def _catch_up(self, conn: Connection, tenant: str, index: TenantText, *, worker: bool = False) -> bool:
        """Apply the tenant's log past the index's position: each row it names is removed and, when
        it is still the tenant's, added as it is now (one indexed probe when nothing was written
        since). True when the index is current for this search; False when more than
        CATCH_UP_NOW_MAX rows wait (a bulk load): they are applied on a thread of their own
        (`worker`), and until then the store's own engine answers, so no search pays for them."""
        if index.catching_up and not worker:
            return False
        with index.lock:
            if conn.dialect.name == "sqlite":
                newest = self._newest(conn, tenant)
                if newest <= index.seq:
                    return True
                named = select(item_change.c.item_pk).where(
                    item_change.c.tenant == tenant, item_change.c.seq > index.seq, item_change.c.seq <= newest
                )
                if not worker:  # counted no further than the cap: a million waiting rows are not read here
                    waiting = select(func.count()).select_from(named.limit(CATCH_UP_NOW_MAX + 1).subquery())
                    if int(conn.execute(waiting).scalar_one()) > CATCH_UP_NOW_MAX:
                        return self._later(tenant, index)
                _apply(conn, tenant, index, {int(pk) for (pk,) in conn.execute(named)})
                index.seq = newest
                return True
            # PostgreSQL: transactions commit in any order, so `seq` alone could pass a row whose
            # transaction commits later. The log is read from the oldest transaction that was still
            # running at the last read (`index.seq` holds that horizon): rows of older transactions
            # were all settled then and applied; rows at or past it are read again until their
            # transactions are settled, each applied once (`index.applied`).
            cap = None if worker else CATCH_UP_NOW_MAX + len(index.applied) + 1  # read no further than needed to know
            found = conn.execute(_SINCE_HORIZON, {"t": tenant, "h": index.seq, "cap": cap}).all()
            horizon = int(found[0].horizon)
            fresh = {int(r.seq): int(r.xid) for r in found if r.seq is not None and int(r.seq) not in index.applied}
            if len(fresh) > CATCH_UP_NOW_MAX and not worker:
                return self._later(tenant, index)
            if fresh:
                _apply(conn, tenant, index, {int(r.item_pk) for r in found if r.seq is not None and int(r.seq) in fresh})
                index.applied.update(fresh)
            index.applied = {seq: xid for seq, xid in index.applied.items() if xid >= horizon}
            index.seq = max(index.seq, horizon)
            return True

    def _later(self, tenant: str, index: TenantText) -> bool:
        """Start applying a large backlog on a thread (called with the index's lock held)."""
        index.catching_up = True

        def run() -> None:
            try:
                with self.engine.connect() as conn:
                    self._catch_up(conn, tenant, index, worker=True)
            except Exception:
                log.exception("lexical index catch-up failed; the next search tries again")
            finally:
                index.catching_up = False

        threading.Thread(target=run, name="text-index-catch-up", daemon=True).start()
        return False

    def state(self, conn: Connection, tenant: str) -> TenantText | None:
        """The tenant's index when it is ready (caught up with the log), else None (and its build started)."""
        index = self._tenants.get(tenant)
        if index is None or not index.ready:
            if index is not None and index.building:
                return None
            count = int(conn.execute(text("SELECT count(*) FROM item WHERE tenant = :t"), {"t": tenant}).scalar_one())
            with self._lock:
                index = self._tenants.setdefault(tenant, TenantText())
                if not index.ready:
                    if index.building:
                        return None
                    index.building = True
            if not index.ready:
                if count > self.build_now_max:
                    threading.Thread(target=self._build, args=(tenant, index), name="text-index-build", daemon=True).start()
                    return None
                self._build(tenant, index)
                if not index.ready:
                    return None
        return index if self._catch_up(conn, tenant, index) else None

    def warm(self) -> None:
        """Build every tenant's index (at start-up, off the request path): small ones here, large on threads."""
        with self.engine.connect() as conn:
            tenants = [t for (t,) in conn.execute(text("SELECT DISTINCT tenant FROM item"))]
            for tenant in tenants:
                self.state(conn, tenant)

    def _build(self, tenant: str, index: TenantText) -> None:
        """The tenant's rows read and indexed in one transaction, so the rows and the log position
        agree; what is written meanwhile is applied by the next `state` (`_catch_up`)."""
        started = time.perf_counter()
        try:
            with self.engine.connect() as conn:
                if conn.dialect.name == "sqlite":
                    index.seq = self._newest(conn, tenant)  # the rows below are read in the same transaction
                else:  # one snapshot for the rows and the horizon (see `_catch_up_by_transaction`)
                    conn = conn.execution_options(isolation_level="REPEATABLE READ")
                    index.seq = int(
                        conn.execute(text("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")).scalar_one()
                    )
                index.open_writer()
                result = conn.execution_options(stream_results=True).execute(select(*INDEXED).where(item.c.tenant == tenant))
                for rows in iter(lambda: result.fetchmany(READ_CHUNK), []):
                    for row in rows:
                        index.add(int(row.pk), row.text or "", tokens(row))
                conn.rollback()
            index.publish()
            index.ready = True
            # A large tenant's build (on its own thread, minutes at a million items) is worth a line; a small one is not.
            level = logging.INFO if index.docs > self.build_now_max else logging.DEBUG
            log.log(level, "lexical index of a tenant built: %d items in %.1f s", index.docs, time.perf_counter() - started)
        except Exception:
            log.exception("lexical index build failed; FTS5 answers for the tenant")
            with self._lock:
                self._tenants.pop(tenant, None)
        finally:
            index.building = False

    # ------------------------------------------------------------------ searching

    def search(self, index: TenantText, terms: list[str], groups: list[list[str]], window: int) -> list[tuple[int, float]]:
        """The best `window` (pk, BM25) of the tenant's rows holding any of `terms` and, per group,
        any of its tokens; best first, ties by pk."""
        searcher = index.searcher
        if searcher is None or not terms:
            return []
        words = index.index.parse_query(" OR ".join(terms), ["text"])
        with index.cache_lock:
            narrowing = index.narrowing(searcher, groups)
        # With nothing to exclude, the words alone: a pure disjunction, which Tantivy prunes by block-max WAND.
        query = tantivy.Query.boolean_query([(tantivy.Occur.Must, words), *_filter(narrowing)]) if narrowing else words
        found = searcher.search(query, window, count=False)  # no count: a count visits every match
        ranked = [(int(searcher.doc(address)["pk"][0]), float(score)) for score, address in found.hits]
        ranked.sort(key=lambda pair: (-pair[1], pair[0]))
        return ranked

    def admitted(self, index: TenantText, groups: list[list[str]], cap: int) -> tuple[int, npt.NDArray[np.int64] | None]:
        """How many of the tenant's rows hold a token of every group, and their keys when at most
        `cap` do (None past it): the rows a filter may admit, counted and listed by the index,
        not by SQL, and kept per filter while the index does not change (`TenantText.keep`). A
        superset of what the filter admits (a clock's constraints are not tokens): whoever reads
        these rows applies the constraints to them."""
        searcher = index.searcher
        if searcher is None or searcher.num_docs == 0:
            return 0, np.zeros(0, dtype=np.int64)
        with index.cache_lock:
            narrowing = index.narrowing(searcher, groups)
            key = tuple(tuple(group) for group in narrowing)
            known = index.known(searcher, key, cap)
        if known is not None:
            return known
        query = tantivy.Query.boolean_query(_filter(narrowing)) if narrowing else tantivy.Query.all_query()
        count = int(searcher.search(query, 1, count=True).count)
        listed: npt.NDArray[np.int64] | None = None
        if count <= cap:
            found = searcher.search(query, count, count=False, order_by_field="pk") if count else None
            listed = np.fromiter((pk for pk, _ in found.hits), dtype=np.int64) if found else np.zeros(0, dtype=np.int64)
            listed.flags.writeable = False  # shared by every caller of this filter
        with index.cache_lock:
            index.keep(searcher, key, (count, listed))
        return count, listed

    def state_of(self, tenant: str) -> TenantText | None:
        """The tenant's index as it is (no log read, no build)."""
        return self._tenants.get(tenant)

    def readiness(self) -> dict[str, Any]:
        with self._lock:  # a first search may add a tenant meanwhile
            tenants = list(self._tenants.values())
        return {
            "engine": "tantivy",
            "tenants_ready": sum(1 for v in tenants if v.ready),
            "tenants_building": sum(1 for v in tenants if v.building),
        }


# The log rows of a tenant from a horizon on, and the horizon now, in one statement (one snapshot).
_SINCE_HORIZON = text(
    "SELECT h.horizon, c.seq, c.item_pk, c.xid "
    "FROM (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS horizon) AS h "
    "LEFT JOIN item_change AS c ON c.tenant = :t AND c.xid >= :h LIMIT :cap"
)


def tokens(row: Any) -> str:
    """A row's `vis` tokens, as core/store.py `visibility_tokens` computes them in SQL for FTS5."""
    scopes = " ".join(visibility_value("c", v) for v in row.scope or ()) if row.scoped else "u0"
    principals = " ".join(visibility_value("p", v) for v in row.acl or ())
    fixed = f"{visibility_value('k', row.kind or '')} {visibility_value('s', row.sensitivity or '')} {visibility_value('t', row.status or '')}"
    return f"{fixed} {scopes} {principals}"


def _apply(conn: Connection, tenant: str, index: TenantText, pks: set[int]) -> None:
    """Each of `pks` removed from the index and, when it is still the tenant's, added as it is now."""
    ordered = sorted(pks)
    for pk in ordered:
        index.writer.delete_documents("key", str(pk))
    for start in range(0, len(ordered), 900):
        chunk = ordered[start : start + 900]
        for row in conn.execute(select(*INDEXED).where(item.c.tenant == tenant, item.c.pk.in_(chunk))):
            index.add(int(row.pk), row.text or "", tokens(row))
    index.publish()
