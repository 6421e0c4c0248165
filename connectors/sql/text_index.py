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
A tenant's index is built on its first search (at once when it is small, on the search's own
connection, which the search's deadline can interrupt; on a thread of its own when it is large, the
store's own engine answering meanwhile) or at start-up (`warm`). No build holds a snapshot for the
index's sake: on PostgreSQL the horizon is read first, the rows in a later statement, and what
commits in between is applied again by the next catch-up (`_build`).

The threads (large builds, bulk catch-ups, the start-up warm) are the index's own: `close`, at the
service's shutdown, interrupts their statements, stops their loops at the next chunk and waits for
them, and no thread starts after it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import tantivy
from sqlalchemy import func, select, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from connectors.sql.cancel import Cancelled, Watch, given_up, watched, watching
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
APPLY_CHUNK = 900  # log-named rows read back per statement by a catch-up (older SQLite binds at most 999)
Filter = tuple[tuple[str, ...], ...]
ADMITTED_KEPT = 64  # filters whose admitted rows a tenant's view keeps (each at most the semantic cutoff)
CLOSE_WAIT = 10.0  # seconds `close` waits for the index's threads to stop


class _Stopped(Exception):
    """A build or catch-up stopped between chunks: the service is closing, or the search gave up."""


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
        self._lock = threading.Lock()  # the map of tenants, the threads, `_closed`
        self._workers: dict[threading.Thread, Watch] = {}  # the threads running, each with its connection's watch
        self._closed = False

    def close(self, wait: float = CLOSE_WAIT) -> None:
        """Stop, for good (the service's shutdown, before its store is closed): no build or catch-up
        starts after this and no index is answered from; each thread's running statement is
        interrupted and its loop stops at the next chunk, as does a first build in a search's
        thread; they are waited for, `wait` seconds at most."""
        with self._lock:
            self._closed = True
            workers = list(self._workers.items())
            tenants = list(self._tenants.values())
        for _, watch in workers:
            watch.cancel()
        deadline = time.monotonic() + wait
        for thread, _ in workers:
            thread.join(max(0.0, deadline - time.monotonic()))
        while any(index.building for index in tenants) and time.monotonic() < deadline:
            time.sleep(0.01)  # a search's own build: it stops at its next chunk
        left = [thread.name for thread, _ in workers if thread.is_alive()]
        left += ["a search's build" for index in tenants if index.building]
        if left:
            log.warning("lexical index: still running %.0f s after close: %s", wait, ", ".join(left))

    def _check(self) -> None:
        """Raise `_Stopped` when the work should stop: the index is closed, or the search it runs for
        gave up (the deadline's cancel reaches only a running statement, not the loop between them)."""
        if self._closed or given_up():
            raise _Stopped

    def _spawn(self, name: str, work: Callable[[Connection], None], failed: str) -> bool:
        """Run `work` on a thread of the index's own, on a connection `close` can interrupt; False
        (nothing started) once closed."""
        watch = Watch()

        def run() -> None:
            try:
                with watching(watch), watched(self.engine) as conn:
                    work(conn)
            except Exception as exc:
                if self._closed:
                    log.debug("lexical index %s stopped at close (%s)", name, type(exc).__name__)
                else:
                    log.exception("lexical index %s failed; %s", name, failed)
            finally:
                with self._lock:
                    self._workers.pop(threading.current_thread(), None)

        thread = threading.Thread(target=run, name=f"text-index-{name}", daemon=True)
        with self._lock:
            if self._closed:
                return False
            self._workers[thread] = watch
            thread.start()  # under the lock: `close` never sees a thread it cannot join
        return True

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
                _apply(conn, tenant, index, {int(pk) for (pk,) in conn.execute(named)}, self._check if worker else None)
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
                pks = {int(r.item_pk) for r in found if r.seq is not None and int(r.seq) in fresh}
                _apply(conn, tenant, index, pks, self._check if worker else None)
                index.applied.update(fresh)
            index.applied = {seq: xid for seq, xid in index.applied.items() if xid >= horizon}
            index.seq = max(index.seq, horizon)
            return True

    def _later(self, tenant: str, index: TenantText) -> bool:
        """Start applying a large backlog on a thread (called with the index's lock held)."""
        index.catching_up = True

        def work(conn: Connection) -> None:
            try:
                self._catch_up(conn, tenant, index, worker=True)
            finally:
                index.catching_up = False

        if not self._spawn("catch-up", work, "the next search tries again"):
            index.catching_up = False
        return False

    def state(self, conn: Connection, tenant: str) -> TenantText | None:
        """The tenant's index when it is ready (caught up with the log), else None (and its build
        started: a small tenant's here, on `conn`, a large one's on a thread). None once closed."""
        if self._closed:
            return None
        index = self._tenants.get(tenant)
        if index is None or not index.ready:
            if index is not None and index.building:
                return None
            count = int(conn.execute(text("SELECT count(*) FROM item WHERE tenant = :t"), {"t": tenant}).scalar_one())
            with self._lock:
                if self._closed:
                    return None
                index = self._tenants.setdefault(tenant, TenantText())
                if not index.ready:
                    if index.building:
                        return None
                    index.building = True
            if not index.ready:
                if count > self.build_now_max:
                    built = index  # (a name the closure can hold, typed as never None)
                    if not self._spawn("build", lambda own: self._build(own, tenant, built), "the store's engine answers"):
                        index.building = False  # closed meanwhile
                    return None
                if not self._build_here(conn, tenant, index):
                    return None
        return index if self._catch_up(conn, tenant, index) else None

    def _build_here(self, conn: Connection, tenant: str, index: TenantText) -> bool:
        """A small tenant's build on the search's own connection (its deadline's cancel reaches it).
        False when it did not finish and the store's own engine should answer."""
        try:
            self._build(conn, tenant, index)
            return True
        except _Stopped:
            if given_up():
                raise Cancelled("the caller stopped waiting during the lexical index's build") from None
            return False  # closing: the store's own engine answers the calls still in flight
        except SQLAlchemyError:
            raise  # a statement interrupted by the deadline, or the store failing: the search fails as it would
        except Exception:
            log.exception("lexical index build failed; the store's own engine answers for the tenant")
            return False

    def warm(self) -> None:
        """Build every tenant's index off the request path (at start-up), on a thread of the index's
        own: small tenants one after another, each in a transaction of its own, large ones each on a
        thread. Returns at once; `close` stops it."""

        def work(conn: Connection) -> None:
            tenants = [t for (t,) in conn.execute(text("SELECT DISTINCT tenant FROM item"))]
            conn.rollback()
            for tenant in tenants:
                self._check()
                try:
                    self.state(conn, tenant)
                finally:
                    conn.rollback()  # no snapshot kept from one tenant to the next

        self._spawn("warm", work, "the first searches build the indexes")

    def _build(self, conn: Connection, tenant: str, index: TenantText) -> None:
        """The tenant's rows read on `conn` and indexed, from a log position they agree with; what is
        written meanwhile is applied by the next `state` (`_catch_up`). Stops between chunks when
        the index is closed or the search gave up (`_Stopped`); on any failure the tenant is
        forgotten (its next search builds again) and the exception raised.

        SQLite: the position and the rows are read in one transaction, one snapshot. PostgreSQL:
        the horizon (the oldest transaction running) is read first, in a statement of its own, and
        the rows in a later one, so no snapshot is held for the build (in READ COMMITTED each
        statement reads its own). Whatever the rows miss belongs to a transaction that had not
        committed when the horizon was read: it was running then (its id at or past the horizon,
        which is the oldest running) or had no id yet (it gets one past every id then given), so
        its log rows are at or past the horizon and the next catch-up, which reads from the horizon
        with nothing yet marked applied, applies them. A transaction that commits between the two
        statements is in the rows and applied again: a row is removed, then added as it is now."""
        started = time.perf_counter()
        try:
            if conn.dialect.name == "sqlite":
                index.seq = self._newest(conn, tenant)  # the rows below are read in the same transaction
            else:
                index.seq = _horizon(conn)
            index.open_writer()
            result = conn.execution_options(stream_results=True).execute(select(*INDEXED).where(item.c.tenant == tenant))
            try:
                while True:
                    self._check()
                    rows = result.fetchmany(READ_CHUNK)
                    if not rows:
                        break
                    for row in rows:
                        index.add(int(row.pk), row.text or "", tokens(row))
            except _Stopped:
                result.close()  # the connection stays usable: a search goes on with it
                raise
            index.publish()
            index.ready = True
        except BaseException:
            with self._lock:
                if self._tenants.get(tenant) is index:
                    del self._tenants[tenant]
            raise
        finally:
            index.building = False
        # A large tenant's build (on its own thread, minutes at a million items) is worth a line; a small one is not.
        level = logging.INFO if index.docs > self.build_now_max else logging.DEBUG
        log.log(level, "lexical index of a tenant built: %d items in %.1f s", index.docs, time.perf_counter() - started)

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


_XMIN = "pg_snapshot_xmin(pg_current_snapshot())::text::bigint"  # the oldest transaction running
_HORIZON = text(f"SELECT {_XMIN}")


def _horizon(conn: Connection) -> int:
    """PostgreSQL: the oldest transaction running now; every transaction that commits after this
    statement has an id at or past it."""
    return int(conn.execute(_HORIZON).scalar_one())


# The log rows of a tenant from a horizon on, and the horizon now, in one statement (one snapshot).
_SINCE_HORIZON = text(
    "SELECT h.horizon, c.seq, c.item_pk, c.xid "
    f"FROM (SELECT {_XMIN} AS horizon) AS h "
    "LEFT JOIN item_change AS c ON c.tenant = :t AND c.xid >= :h LIMIT :cap"
)


def tokens(row: Any) -> str:
    """A row's `vis` tokens, as core/store.py `visibility_tokens` computes them in SQL for FTS5."""
    scopes = " ".join(visibility_value("c", v) for v in row.scope or ()) if row.scoped else "u0"
    principals = " ".join(visibility_value("p", v) for v in row.acl or ())
    fixed = f"{visibility_value('k', row.kind or '')} {visibility_value('s', row.sensitivity or '')} {visibility_value('t', row.status or '')}"
    return f"{fixed} {scopes} {principals}"


def _apply(conn: Connection, tenant: str, index: TenantText, pks: set[int], check: Callable[[], None] | None = None) -> None:
    """Each of `pks` removed from the index and, when it is still the tenant's, added as it is now;
    `check` is called between chunks (it raises to stop: then nothing of this is published)."""
    ordered = sorted(pks)
    for pk in ordered:
        index.writer.delete_documents("key", str(pk))
    try:
        for start in range(0, len(ordered), APPLY_CHUNK):
            if check is not None:
                check()
            chunk = ordered[start : start + APPLY_CHUNK]
            for row in conn.execute(select(*INDEXED).where(item.c.tenant == tenant, item.c.pk.in_(chunk))):
                index.add(int(row.pk), row.text or "", tokens(row))
    except _Stopped:
        index.writer.rollback()  # back to the last commit: the position was not moved either
        raise
    index.publish()
