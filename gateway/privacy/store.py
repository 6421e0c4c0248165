"""Personal data analysed once, after ingest, and stored with the item.

A background worker (like the embedding one) analyses items whose spans are missing, from older
text, or from another analyzer configuration, and stores `[type, start, end, score]` spans with
the configuration's version and the content hash. At retrieve time masking applies stored spans;
only text without current spans is analysed during the request.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
from sqlalchemy import and_, func, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from core.errors import where
from core.store import writer
from core.tables import Item, ItemPii
from gateway.background import Done, Gate, Limit, PendingWorker, next_tenant
from gateway.privacy.detect import Detector, Span
from gateway.writes.claims import Claimer, claimed
from gateway.writes.vectorize import waiting_rows

log = logging.getLogger("gateway.privacy.store")
item = Item.__table__  # type: ignore[attr-defined]
item_pii = ItemPii.__table__  # type: ignore[attr-defined]
ANALYSED_KINDS = ("entity", "property", "memory", "document", "edge")
_COLUMNS = (item.c.pk, item.c.text, item.c.content_hash)
RUN_TEXTS = 4  # texts per pass of the language model in a background batch


def _stale(version: str) -> tuple[Any, Any]:
    joined = item.outerjoin(item_pii, item_pii.c.item_pk == item.c.pk)
    condition = and_(
        item.c.kind.in_(ANALYSED_KINDS),
        or_(item_pii.c.item_pk.is_(None), item_pii.c.version != version, item_pii.c.content_hash != item.c.content_hash),
    )
    return joined, condition


def pending(engine: Engine, version: str) -> int:
    joined, condition = _stale(version)
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(joined).where(condition)).scalar_one())


def analyze_pending(
    engine: Engine,
    detector: Detector,
    limit: Limit,
    tenant: str | None = None,
    claimer: Claimer | None = None,
    pool: AnalysisPool | None = None,
) -> Done:
    """Analyse the waiting items (of `tenant`, when named) that fit in `limit`, in key order, and
    store their spans; returns what was analysed. With `claimer`, only items no other worker holds,
    claimed first (gateway/writes/claims.py); with `pool`, the texts are analysed in its processes."""
    joined, condition = _stale(detector.version)
    if claimer is None:
        rows = limit.within(waiting_rows(engine, joined, condition, _COLUMNS, limit.items, tenant=tenant))
    else:
        rows = claimer.claim(engine, joined, condition, _COLUMNS, limit.items, tenant=tenant, fit=limit.within)
    if not rows:
        return Done()
    texts = [r.text or "" for r in rows]
    try:
        if pool is not None:
            found = pool.analyze(texts)
        else:
            # spaCy's `pipe`, as `analyze` would one by one; a few texts at a time, so a call's own
            # analysis meanwhile waits for a few texts, not the batch
            found = [[s.as_json() for s in spans] for spans in detector.analyze_batch(texts, batch_size=RUN_TEXTS)]
        _store(engine, detector.version, rows, found, claimer)
    except BaseException:
        if claimer is not None:  # a failed batch's items are free at once, for any worker's next try
            claimer.release_now(engine, [r.pk for r in rows])
        raise
    return Done.of(rows)


class AnalysisPool:
    """Processes analysing texts beside this one (spawned at the first batch, each with its own
    analyzer of `version`): spaCy and Presidio hold the GIL, so a pool is how one process's
    background analysis uses every core, and leaves the serving process's interpreter to calls."""

    def __init__(self, version: str, processes: int) -> None:
        self.version = version
        self.processes = processes
        self._pool: ProcessPoolExecutor | None = None

    def analyze(self, texts: list[str]) -> list[list[Any]]:
        """Each text's spans (as JSON), the texts split in contiguous shares of about equal length, one a process."""
        pool = self.warm()
        futures = [pool.submit(_analyze_in_worker, share) for share in _shares(texts, self.processes)]
        return [spans for future in futures for spans in future.result()]

    @property
    def started(self) -> bool:
        return self._pool is not None

    def warm(self) -> ProcessPoolExecutor:
        """The pool, its processes started and their analyzers loaded (once): the first batch's
        time then measures analysis, not start-up, and sizes the next ones (`Pace`) right."""
        if self._pool is None:
            import multiprocessing

            context = multiprocessing.get_context("spawn")  # never fork a process holding a database pool
            pool = ProcessPoolExecutor(self.processes, mp_context=context, initializer=_start_worker, initargs=(self.version,))
            for future in [pool.submit(_analyze_in_worker, []) for _ in range(self.processes)]:
                future.result()
            self._pool = pool
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


def _shares(texts: list[str], parts: int) -> list[list[str]]:
    """`texts` cut into at most `parts` contiguous runs of about equal total length, none empty."""
    total = sum(len(t) for t in texts) or 1
    shares: list[list[str]] = [[]]
    spent = 0
    for text in texts:
        if shares[-1] and spent >= total * len(shares) / parts and len(shares) < parts:
            shares.append([])
        shares[-1].append(text)
        spent += len(text)
    return shares


def _upsert(dialect: str, values: list[dict[str, Any]]) -> Any:
    """Insert or replace: two workers (or replicas) may analyse the same item at once."""
    statement = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(item_pii).values(values)
    return statement.on_conflict_do_update(
        index_elements=[item_pii.c.item_pk], set_={c: statement.excluded[c] for c in ("version", "content_hash", "spans")}
    )


def analyze_all(
    engine: Engine,
    detector: Detector,
    batch: int = 64,
    progress: Callable[[int], None] | None = None,
    claimer: Claimer | None = None,
) -> int:
    """Analyse everything waiting (the CLI's `gateway pii analyze` with one process): each text as
    `Detector.analyze` would, `batch` at a time through spaCy's `pipe` (`Detector.analyze_batch`).
    Each batch is claimed first (`claimer`, a new one by default), as `embed_all` does: runs and the
    service's workers share the backlog; a run ends when nothing waits that no other worker holds."""
    claimer = claimer or Claimer.of("pii")
    total = 0
    try:
        while True:  # passes, until one finds nothing (an item rewritten behind the cursor is analysed too)
            done = 0
            for rows in _waiting(engine, detector.version, batch, claimer):
                found = detector.analyze_batch([r.text or "" for r in rows])
                _store(engine, detector.version, rows, [[s.as_json() for s in spans] for spans in found], claimer)
                done += len(rows)
                if progress:
                    progress(len(rows))
            if not done:
                return total
            total += done
    finally:
        claimer.release_all(engine)


def analyze_all_processes(
    engine: Engine, version: str, processes: int, batch: int = 64, progress: Callable[[int], None] | None = None
) -> int:
    """`analyze_all` with the analysis in `processes` worker processes (spaCy and Presidio hold
    the GIL, so threads would not share the cores). This process reads waiting items, hands each
    worker `batch` texts at a time (at most two batches a worker in flight, so memory holds a few
    batches whatever the store's size) and stores results in the order they were read. A worker
    whose analyzer is another configuration than `version` refuses to start."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")  # never fork a process holding a database pool
    claimer = Claimer.of("pii")
    total = 0
    with ProcessPoolExecutor(processes, mp_context=context, initializer=_start_worker, initargs=(version,)) as pool:
        while True:
            done = 0
            inflight: deque[tuple[list[Any], Future[list[list[Any]]]]] = deque()

            def settle() -> int:
                rows, future = inflight.popleft()
                _store(engine, version, rows, future.result(), claimer)
                if progress:
                    progress(len(rows))
                return len(rows)

            for rows in _waiting(engine, version, batch, claimer):
                inflight.append((rows, pool.submit(_analyze_in_worker, [r.text or "" for r in rows])))
                if len(inflight) >= 2 * processes:
                    done += settle()
            while inflight:
                done += settle()
            if not done:
                claimer.release_all(engine)
                return total
            total += done


_WORKER: list[Detector] = []  # the worker process's own analyzer


def _start_worker(version: str) -> None:
    _exit_with_parent()
    detector = Detector()
    if detector.version != version:
        raise RuntimeError(f"analyzer {detector.version} in a worker, {version} expected")
    _WORKER.append(detector)


def _exit_with_parent() -> None:
    """An analysing process ends when the process that started it is gone, however that ended (a
    SIGKILL runs no shutdown): a thread watches for the parent's pid to change."""
    import os
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _analyze_in_worker(texts: list[str]) -> list[list[Any]]:
    return [[s.as_json() for s in spans] for spans in _WORKER[0].analyze_batch(texts)]


def _waiting(engine: Engine, version: str, size: int, claimer: Claimer) -> Iterator[list[Any]]:
    """Waiting items no other worker holds, `size` at a time in key order, each batch claimed for
    `claimer` as it is read; each read starts after the last key seen."""
    joined, condition = _stale(version)
    after: int | None = None
    while rows := claimer.claim(engine, joined, condition, _COLUMNS, max(size, 1), after=after):
        after = rows[-1].pk
        yield rows


def _store(engine: Engine, version: str, rows: Sequence[Any], spans: Sequence[list[Any]], claimer: Claimer | None = None) -> None:
    """Row i's spans, stored with the text hash they were found in (and `claimer`'s claims on the
    rows dropped in the same transaction)."""
    values = [
        {"item_pk": r.pk, "version": version, "content_hash": r.content_hash, "spans": found}
        for r, found in zip(rows, spans, strict=True)
    ]
    with writer(engine).begin() as conn:
        conn.execute(_upsert(engine.dialect.name, values))
        if claimer is not None:
            claimer.release(conn, [r.pk for r in rows])


def stored_spans(engine: Engine, tenant: str, ids: Iterable[str], version: str) -> dict[str, tuple[Span, ...]]:
    """Current spans of the given items (analysed from their present text by this configuration)."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    statement = (
        select(item.c.id, item_pii.c.spans)
        .select_from(item.join(item_pii, item_pii.c.item_pk == item.c.pk))
        .where(
            item.c.tenant == tenant,
            item.c.id.in_(wanted),
            item_pii.c.version == version,
            item_pii.c.content_hash == item.c.content_hash,
        )
    )
    with engine.connect() as conn:
        return {row.id: tuple(Span.from_json(s) for s in row.spans) for row in conn.execute(statement)}


class AnalysisWorker(PendingWorker):
    """Runs in the service's lifespan (and in `gateway work`); its batches are claimed, so workers in
    any number of processes share the backlog. With `processes` > 0 the texts are analysed in that
    many processes beside this one (`AnalysisPool`), else in this process."""

    def __init__(
        self, engine: Engine, detector: Detector, idle_s: float = 2.0, processes: int = 0, claimer: Claimer | None = None
    ) -> None:
        self.engine = engine
        self.detector = detector
        self.claimer = claimer or Claimer.of("pii")
        self.pool = AnalysisPool(detector.version, processes) if processes > 0 else None
        joined, condition = _stale(detector.version)
        super().__init__(
            "pii analysis",
            lambda tenant, limit: analyze_pending(engine, detector, limit, tenant, self.claimer, self.pool),
            lambda: pending(engine, detector.version),
            idle_s,
            lambda after: next_tenant(engine, joined, self.claimer.claimable(condition), item.c.tenant, after),
            lambda: claimed(engine, "pii"),
        )

    async def _batch(self, gate: Gate | None) -> int:
        """A batch, the pool started first (once something waits, and outside any batch: its
        start-up is neither charged to a tenant's turn nor taken by `Pace` for analysis time)."""
        if self.pool is not None and not self.pool.started and await anyio.to_thread.run_sync(self.count) > 0:
            try:
                await anyio.to_thread.run_sync(self.pool.warm)
            except Exception as exc:  # the batch tries again, and its failure is logged there
                log.warning("pii analysis pool failed to start: %s", where(exc))
        return await super()._batch(gate)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


@dataclass(frozen=True, slots=True)
class Privacy:
    """The service's detector and its background worker, or why personal data is not detected."""

    detector: Detector | None
    worker: AnalysisWorker | None = None
    unavailable: str | None = None


def load_privacy(engine: Engine, mode: str, background: bool, processes: int = 0) -> Privacy:
    """`processes`: the background analysis's processes beside this one (0: in this process)."""
    if mode == "none":
        return Privacy(None, None, "personal data detection is switched off (GATEWAY_PII=none)")
    detector = Detector()
    return Privacy(detector, AnalysisWorker(engine, detector, processes=processes) if background else None)
