"""Personal data analysed once, after ingest, and stored with the item.

A background worker (like the embedding one) analyses items whose spans are missing, from older
text, or from another analyzer configuration, and stores `[type, start, end, score]` spans with
the configuration's version and the content hash. At retrieve time masking applies stored spans;
only text without current spans is analysed during the request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from core.store import writer
from core.tables import Item, ItemPii
from gateway.background import Done, Limit, PendingWorker, next_tenant
from gateway.privacy.detect import Detector, Span
from gateway.writes.vectorize import scan_waiting, waiting_rows

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


def analyze_pending(engine: Engine, detector: Detector, limit: Limit, tenant: str | None = None) -> Done:
    """Analyse the waiting items (of `tenant`, when named) that fit in `limit`, in key order, and
    store their spans; returns what was analysed."""
    rows = limit.within(waiting_rows(engine, *_stale(detector.version), _COLUMNS, limit.items, tenant=tenant))
    if not rows:
        return Done()
    # spaCy's `pipe`, as `analyze` would one by one; a few texts at a time, so a call's own analysis
    # meanwhile waits for a few texts, not the batch
    found = detector.analyze_batch([r.text or "" for r in rows], batch_size=RUN_TEXTS)
    values = [
        {"item_pk": r.pk, "version": detector.version, "content_hash": r.content_hash, "spans": [s.as_json() for s in spans]}
        for r, spans in zip(rows, found, strict=True)
    ]
    with writer(engine).begin() as conn:
        conn.execute(_upsert(engine.dialect.name, values))
    return Done.of(rows)


def _upsert(dialect: str, values: list[dict[str, Any]]) -> Any:
    """Insert or replace: two workers (or replicas) may analyse the same item at once."""
    statement = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(item_pii).values(values)
    return statement.on_conflict_do_update(
        index_elements=[item_pii.c.item_pk], set_={c: statement.excluded[c] for c in ("version", "content_hash", "spans")}
    )


def analyze_all(engine: Engine, detector: Detector, batch: int = 64, progress: Callable[[int], None] | None = None) -> int:
    """Analyse everything waiting (the CLI's `gateway pii analyze` with one process): each text as
    `Detector.analyze` would, `batch` at a time through spaCy's `pipe` (`Detector.analyze_batch`)."""
    total = 0
    while True:  # passes, until one finds nothing (an item rewritten behind the cursor is analysed too)
        done = 0
        for rows in _waiting(engine, detector.version, batch):
            _store(
                engine,
                detector.version,
                rows,
                [[s.as_json() for s in spans] for spans in detector.analyze_batch([r.text or "" for r in rows])],
            )
            done += len(rows)
            if progress:
                progress(len(rows))
        if not done:
            return total
        total += done


def analyze_all_processes(
    engine: Engine, version: str, processes: int, batch: int = 64, progress: Callable[[int], None] | None = None
) -> int:
    """`analyze_all` with the analysis in `processes` worker processes (spaCy and Presidio hold
    the GIL, so threads would not share the cores). This process reads waiting items, hands each
    worker `batch` texts at a time (at most two batches a worker in flight, so memory holds a few
    batches whatever the store's size) and stores results in the order they were read. A worker
    whose analyzer is another configuration than `version` refuses to start."""
    import multiprocessing
    from concurrent.futures import Future, ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")  # never fork a process holding a database pool
    total = 0
    with ProcessPoolExecutor(processes, mp_context=context, initializer=_start_worker, initargs=(version,)) as pool:
        while True:
            done = 0
            inflight: deque[tuple[list[Any], Future[list[list[Any]]]]] = deque()

            def settle() -> int:
                rows, future = inflight.popleft()
                _store(engine, version, rows, future.result())
                if progress:
                    progress(len(rows))
                return len(rows)

            for rows in _waiting(engine, version, batch):
                inflight.append((rows, pool.submit(_analyze_in_worker, [r.text or "" for r in rows])))
                if len(inflight) >= 2 * processes:
                    done += settle()
            while inflight:
                done += settle()
            if not done:
                return total
            total += done


_WORKER: list[Detector] = []  # the worker process's own analyzer


def _start_worker(version: str) -> None:
    detector = Detector()
    if detector.version != version:
        raise RuntimeError(f"analyzer {detector.version} in a worker, {version} expected")
    _WORKER.append(detector)


def _analyze_in_worker(texts: list[str]) -> list[list[Any]]:
    return [[s.as_json() for s in spans] for spans in _WORKER[0].analyze_batch(texts)]


def _waiting(engine: Engine, version: str, size: int) -> Iterator[list[Any]]:
    """Waiting items, `size` at a time in key order; each read starts after the last key seen."""
    return scan_waiting(engine, *_stale(version), _COLUMNS, size)


def _store(engine: Engine, version: str, rows: Sequence[Any], spans: Sequence[list[Any]]) -> None:
    """Row i's spans, stored with the text hash they were found in."""
    values = [
        {"item_pk": r.pk, "version": version, "content_hash": r.content_hash, "spans": found}
        for r, found in zip(rows, spans, strict=True)
    ]
    with writer(engine).begin() as conn:
        conn.execute(_upsert(engine.dialect.name, values))


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
    def __init__(self, engine: Engine, detector: Detector, idle_s: float = 2.0) -> None:
        self.engine = engine
        self.detector = detector
        super().__init__(
            "pii analysis",
            lambda tenant, limit: analyze_pending(engine, detector, limit, tenant),
            lambda: pending(engine, detector.version),
            idle_s,
            lambda after: next_tenant(engine, *_stale(detector.version), item.c.tenant, after),
        )


@dataclass(frozen=True, slots=True)
class Privacy:
    """The service's detector and its background worker, or why personal data is not detected."""

    detector: Detector | None
    worker: AnalysisWorker | None = None
    unavailable: str | None = None


def load_privacy(engine: Engine, mode: str, background: bool) -> Privacy:
    if mode == "none":
        return Privacy(None, None, "personal data detection is switched off (GATEWAY_PII=none)")
    detector = Detector()
    return Privacy(detector, AnalysisWorker(engine, detector) if background else None)
