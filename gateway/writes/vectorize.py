"""Embedding in the background: ingest never waits for vectors.

Items are searchable lexically the moment they are written; this worker finds items whose vector
is missing, of another model, or made from older text, embeds them in batches and stores the
vectors. `lag` says how many items are still waiting, in the whole store or in one tenant; a
response reports only its caller's tenant (`EmbeddingWorker.tenant_lag`), never another tenant's
ingest volume.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sqlalchemy import and_, func, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from connectors.sql.pushdown import record_from_row
from core.store import writer
from core.tables import Item, ItemVector
from gateway.background import LAG_EVERY_S, Done, Limit, PendingWorker, next_tenant
from gateway.writes.claims import Claimer, claimed
from gateway.writes.embeddings import Embedder, Vectors, embed_many

item = Item.__table__  # type: ignore[attr-defined]
item_vector = ItemVector.__table__  # type: ignore[attr-defined]
EMBEDDED_KINDS = ("memory", "document", "property")
_COLUMNS = (item.c.pk, item.c.text, item.c.content_hash, item.c.section)
RUN_TEXTS = 8  # texts per model run in a background batch


def _stale(model: str):  # type: ignore[no-untyped-def]
    """Items of an embedded kind without a current vector of this model."""
    joined = item.outerjoin(item_vector, item_vector.c.item_pk == item.c.pk)
    condition = and_(
        item.c.kind.in_(EMBEDDED_KINDS),
        or_(
            item_vector.c.item_pk.is_(None),
            item_vector.c.model != model,
            item_vector.c.content_hash != item.c.content_hash,
        ),
    )
    return joined, condition


def waiting_rows(
    engine: Engine,
    joined: Any,
    condition: Any,
    columns: Sequence[Any],
    limit: int,
    after: int | None = None,
    tenant: str | None = None,
) -> list[Any]:
    """Up to `limit` waiting items (`joined` and `condition`: the items table joined with what they
    wait for, and which rows wait), `columns` of each, in key order, after the key `after` and of
    `tenant` when given. The one read of the background workers, embedding here and personal-data
    analysis."""
    where = condition if after is None else and_(condition, item.c.pk > after)
    if tenant is not None:
        where = and_(item.c.tenant == tenant, where)
    with engine.connect() as conn:
        return list(conn.execute(select(*columns).select_from(joined).where(where).order_by(item.c.pk).limit(limit)).all())


def forget_vectors(engine: Engine, model: str) -> int:
    """Drop every stored vector of `model` (its items wait for one again); returns how many. For an
    index that lost them or never had them: a Weaviate collection created new."""
    with writer(engine).begin() as conn:
        return int(conn.execute(item_vector.delete().where(item_vector.c.model == model)).rowcount or 0)


def lag(engine: Engine, model: str, tenant: str | None = None) -> int:
    """Items waiting for a vector of `model`: all of them, or one tenant's (read through the
    (tenant, kind) index, so the count costs the tenant's size, not the store's)."""
    joined, condition = _stale(model)
    if tenant is not None:
        condition = and_(item.c.tenant == tenant, condition)
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(joined).where(condition)).scalar_one())


Publish = Callable[[Engine, dict[int, list[float]]], None]


def publish_to_weaviate(connector: Any, engine: Engine, vectors: dict[int, list[float]]) -> None:
    """Copy freshly embedded items, envelope and vector, into Weaviate (one tenant per tenant).
    Runs before the vectors are stored, so a failed copy leaves the items waiting and is retried."""
    with engine.connect() as conn:
        rows = conn.execute(select(item).where(item.c.pk.in_(list(vectors)))).all()
    by_tenant: dict[str, list[tuple[Any, list[float]]]] = {}
    for row in rows:
        by_tenant.setdefault(row._mapping["tenant"], []).append((record_from_row(row), vectors[row._mapping["pk"]]))
    for tenant, records in by_tenant.items():
        connector.upsert(tenant, records)


def _publish_and_store(
    engine: Engine,
    embedder: Embedder,
    rows: Sequence[Any],
    vectors: Vectors,
    publish: Publish | None,
    claimer: Claimer | None = None,
) -> None:
    """Copy the vectors to the index first (with `publish`), then store them (and drop `claimer`'s
    claims on the rows): an item is never marked embedded while the index that serves it lacks its vector."""
    if publish is not None:
        publish(engine, {r.pk: [float(x) for x in v] for r, v in zip(rows, vectors)})
    _store(engine, embedder, rows, vectors, claimer)


def embed_pending(
    engine: Engine,
    embedder: Embedder,
    limit: Limit,
    publish: Publish | None = None,
    tenant: str | None = None,
    claimer: Claimer | None = None,
    side_by_side: int = 1,
) -> Done:
    """Embed the waiting items (of `tenant`, when named) that fit in `limit`, in key order; returns
    what was stored (and published, if asked). With `claimer`, only items no other worker holds,
    claimed first (gateway/writes/claims.py). `side_by_side`: the model runs the embedder makes at
    once (its sessions): a batch is cut in at least that many runs, so a small one uses every core."""
    joined, condition = _stale(embedder.model_id)
    if claimer is None:
        rows = limit.within(waiting_rows(engine, joined, condition, _COLUMNS, limit.items, tenant=tenant))
    else:
        rows = claimer.claim(engine, joined, condition, _COLUMNS, limit.items, tenant=tenant, fit=limit.within)
    if not rows:
        return Done()
    # A few texts a model run, length-sorted: a call's query embedded meanwhile on the same model
    # waits for one small run, not for the whole batch, and the batch pads little.
    run = max(1, min(RUN_TEXTS, -(-len(rows) // max(side_by_side, 1))))
    try:
        vectors = embed_many(embedder, [_passage(r.text, r.section) for r in rows], run)
        _publish_and_store(engine, embedder, rows, vectors, publish, claimer)
    except BaseException:
        if claimer is not None:  # a failed batch's items are free at once, for any worker's next try
            claimer.release_now(engine, [r.pk for r in rows])
        raise
    return Done.of(rows)


def _store(engine: Engine, embedder: Embedder, rows: Sequence[Any], vectors: Vectors, claimer: Claimer | None = None) -> None:
    """Row i's vector is vectors[i], stored against row i's item and the text hash it was made from
    (and `claimer`'s claims on the rows dropped in the same transaction)."""
    seq = time.time_ns()
    values = [
        {
            "item_pk": r.pk,
            "model": embedder.model_id,
            "dims": embedder.dims,
            "vector": np.asarray(v, dtype=np.float32).tobytes(),
            "content_hash": r.content_hash,
            "seq": seq,
        }
        for r, v in zip(rows, vectors, strict=True)
    ]
    with writer(engine).begin() as conn:
        conn.execute(upsert_vectors(engine.dialect.name, values))
        if claimer is not None:
            claimer.release(conn, [r.pk for r in rows])


def upsert_vectors(dialect: str, values: list[dict[str, Any]]) -> Any:
    """Insert or replace: two workers (or replicas) may embed the same item at the same time."""
    statement = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(item_vector).values(values)
    columns = ("model", "dims", "vector", "content_hash", "seq")
    return statement.on_conflict_do_update(
        index_elements=[item_vector.c.item_pk], set_={c: statement.excluded[c] for c in columns}
    )


def _passage(text: str, section: str | None) -> str:
    """A section's heading path is part of what it is about."""
    return f"{section}\n{text}" if section and not text.startswith(section) else text


def embed_all(
    engine: Engine,
    embedder: Embedder,
    batch: int = 32,
    progress: Callable[[int], None] | None = None,
    chunk: int = 512,
    publish: Publish | None = None,
    rate: float | None = None,
    claimer: Claimer | None = None,
) -> int:
    """Embed everything waiting (the CLI's `gateway embed`). Reads `chunk` waiting items at a time
    in key order, each read starting after the last key seen (so the store is not scanned again
    from its start for every chunk), embeds them length-sorted in batches of `batch`
    (`embed_many`) and stores each chunk in one transaction: memory holds one chunk, whatever the
    store's size. Passes repeat until one finds nothing, so an item rewritten behind the cursor
    meanwhile is embedded too. With `publish` (a Weaviate deployment), each chunk is copied there
    before its vectors are stored, as the background worker does: an item is never marked embedded
    while the index that serves it lacks its vector. With `rate` (items a second), chunks are about a
    second's worth and the loop sleeps to keep under the rate, leaving cores to a running service.
    Stopped at any point, a run loses at most its current chunk: the next run starts from what waits.
    Each chunk is claimed first (`claimer`, a new one by default): any number of runs, and the
    service's background workers, share the backlog without embedding an item twice; a run ends when
    nothing waits that another worker does not hold."""
    joined, condition = _stale(embedder.model_id)
    claimer = claimer or Claimer.of("embedding")
    total = 0
    if rate is not None:
        chunk = max(1, min(chunk, int(rate)))
    started = time.monotonic()
    try:
        while True:
            done = 0
            after: int | None = None
            while rows := claimer.claim(engine, joined, condition, _COLUMNS, chunk, after=after):
                after = rows[-1].pk
                vectors = embed_many(embedder, [_passage(r.text, r.section) for r in rows], batch, progress)
                _publish_and_store(engine, embedder, rows, vectors, publish, claimer)
                done += len(rows)
                if rate is not None:
                    time.sleep(max(0.0, (total + done) / rate - (time.monotonic() - started)))
            if not done:
                return total
            total += done
    finally:
        claimer.release_all(engine)  # what a failed or stopped run held is free at once


class EmbeddingWorker(PendingWorker):
    """Runs in the service's lifespan; `nudge()` after a write wakes it at once."""

    def __init__(
        self,
        engine: Engine,
        embedder: Embedder,
        idle_s: float = 2.0,
        publish: Publish | None = None,
        bulk: Embedder | None = None,
        claimer: Claimer | None = None,
        side_by_side: int = 1,
    ) -> None:
        """`bulk`: the same model with a session per core, for the batches (the calls' queries keep
        `embedder`'s own session, never waiting behind a batch's run); `claimer`: how this worker
        shares the backlog with others (any process's); `side_by_side`: the runs `bulk` makes at once."""
        self.publish = publish
        self.engine = engine
        self.embedder = embedder
        self.claimer = claimer or Claimer.of("embedding")
        self._tenant_lag: dict[str, tuple[int, float]] = {}  # tenant -> (waiting, when counted)
        joined, condition = _stale(embedder.model_id)
        batches = bulk or embedder
        super().__init__(
            "embedding",
            lambda tenant, limit: embed_pending(engine, batches, limit, publish, tenant, self.claimer, side_by_side),
            lambda: lag(engine, embedder.model_id),
            idle_s,
            lambda after: next_tenant(engine, joined, self.claimer.claimable(condition), item.c.tenant, after),
            lambda: claimed(engine, "embedding"),
        )

    def tenant_lag(self, tenant: str) -> int | None:
        """The tenant's items still waiting, as a response reports them. `self.lag` (the whole
        store, for the worker's own pacing) only decides whether to count: None before the worker
        has looked, 0 with no query when nothing waits anywhere; otherwise one COUNT of the
        tenant's items, kept for LAG_EVERY_S like the total; None if the count fails."""
        if not self.lag:
            return self.lag
        now = time.monotonic()
        cached = self._tenant_lag.get(tenant)
        if cached is not None and now - cached[1] < LAG_EVERY_S:
            return cached[0]
        try:
            waiting = lag(self.engine, self.embedder.model_id, tenant)
        except SQLAlchemyError:
            return None  # unknown, rather than failing the search it would decorate
        self._tenant_lag[tenant] = (waiting, now)
        return waiting
