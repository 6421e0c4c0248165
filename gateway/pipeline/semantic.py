"""The semantic half of recall: embed the query (off the event loop), then search the index."""

from __future__ import annotations

import functools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import anyio.to_thread

from connectors.base import SemanticConnector
from connectors.sql.cancel import cancellable
from connectors.sql.vectors import StoredVectors
from core import work
from core.constraints import ItemFilter
from core.errors import ConnectorError
from core.records import RecallQuery, SourceResult
from gateway.pipeline.stages import StageTimer
from gateway.writes.embeddings import Embedder
from gateway.writes.supplied import VectorIntake
from gateway.writes.vectorize import EmbeddingWorker


class QueryVectors:
    """The vectors of recent queries, so a query asked again is not embedded again: at most
    `size`, the least recently used dropped first. Keyed by the caller's tenant and principals as
    well as the model and the text, so how fast a query is answered never tells one caller that
    another asked it (a shared cache would: a hit skips the embedding's milliseconds)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._vectors: OrderedDict[tuple[Any, ...], tuple[float, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> tuple[float, ...] | None:
        with self._lock:
            vector = self._vectors.get(key)
            if vector is not None:
                self._vectors.move_to_end(key)
            return vector

    def clear(self) -> None:
        with self._lock:
            self._vectors.clear()

    def put(self, key: tuple[Any, ...], vector: tuple[float, ...]) -> None:
        with self._lock:
            self._vectors[key] = vector
            self._vectors.move_to_end(key)
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)


DEFAULT_FLOOR = 0.30  # a model without a calibrated floor (an HTTP endpoint's): MiniLM's
QUERY_VECTORS = 512  # recent query vectors kept per service (~5 MB at 384 dimensions)


@dataclass(frozen=True, slots=True)
class Semantic:
    """What semantic search needs; `unavailable` says why it cannot run when it cannot."""

    embedder: Embedder | None
    connector: SemanticConnector | None
    worker: EmbeddingWorker | None
    unavailable: str | None = None
    # Releases what the connector holds outside the process (Weaviate's connections) at shutdown.
    close: Callable[[], None] = lambda: None
    vectors: QueryVectors = field(default_factory=lambda: QueryVectors(QUERY_VECTORS))
    fallback: str | None = None  # why the embedder is not the configured model (said on every answer)
    stored: StoredVectors | None = None  # the stored vectors the rerank reads
    intake: VectorIntake | None = None  # what a vector an item carries must match (gateway/writes/supplied.py)

    def floor(self, configured: float | None) -> float:
        """The cosine a semantic-only hit needs: GATEWAY_SEMANTIC_FLOOR, else the model's own."""
        if configured is not None:
            return configured
        return getattr(self.embedder, "floor", DEFAULT_FLOOR)


async def semantic_search(semantic: Semantic, where: ItemFilter, query: RecallQuery) -> SourceResult:
    """One source result; the query embedding's time is part of its `ms` and reported in detail."""
    assert semantic.embedder is not None and semantic.connector is not None and query.text
    started = time.perf_counter()
    key = (where.tenant, where.principals, semantic.embedder.model_id, query.text)
    vector = semantic.vectors.get(key)
    reused = vector is not None
    if vector is None:
        try:
            work.charge(chars=len(query.text))
            embed = work.timed(functools.partial(semantic.embedder.embed, [query.text]))
            vector = tuple(float(x) for x in (await anyio.to_thread.run_sync(embed, abandon_on_cancel=True))[0])
        except ConnectorError as exc:  # an endpoint's reason (its status, a timeout): never a key or a text
            raise ConnectorError(f"query embedding failed: {exc.message}") from exc
        except Exception as exc:  # an embedder that fails degrades this source only
            raise ConnectorError(f"query embedding failed: {type(exc).__name__}") from exc
        semantic.vectors.put(key, vector)
    embed_ms = (time.perf_counter() - started) * 1000
    result = await semantic.connector.search(where, replace(query, vector=vector, model=semantic.embedder.model_id))
    # The caller's tenant's waiting items only: another tenant's ingest volume is not ours to see.
    worker = semantic.worker
    lag = worker.lag if worker is not None else None
    if worker is not None and lag:  # something waits somewhere: count the tenant's (cached briefly)
        # Not abandoned at the deadline: one indexed COUNT, and a thread left holding a pooled
        # connection would outlive the store it came from.
        lag = await anyio.to_thread.run_sync(worker.tenant_lag, where.tenant)
    embedded = "query embedding reused" if reused else f"query embedded in {embed_ms:.1f} ms"
    details = [d for d in (semantic.fallback, result.detail, embedded) if d]
    if lag:
        details.append(f"{lag} items not embedded yet")
    return replace(
        result,
        ms=(time.perf_counter() - started) * 1000,
        detail="; ".join(details),
        lag=lag,
        embed_ms=embed_ms,
        model=semantic.embedder.model_id,
        query_vector=vector,
    )


async def stored_similarities(
    semantic: Semantic, where: ItemFilter, result: SourceResult, ids: list[str], tags: tuple[str, ...]
) -> dict[str, float]:
    """Cosine of the query with the stored vectors of `ids` (the fused candidates the policy
    allowed), for the rerank; empty when the semantic search did not run. A failure to read them
    raises ConnectorError: the caller keeps the fusion as it was."""
    if semantic.stored is None or result.query_vector is None or not ids:
        return {}
    query = RecallQuery(text=None, tags=tags, vector=result.query_vector, model=result.model, limit=len(ids))
    return await cancellable(semantic.stored.similarities, where, query, ids)


async def rerank(
    semantic: Semantic,
    where: ItemFilter,
    results: dict[str, SourceResult],
    allowed: frozenset[str],
    tags: tuple[str, ...],
    timer: StageTimer,
) -> dict[str, float]:
    """The query's cosine with the stored vector of every candidate the policy allowed (the rerank,
    after the verify: nothing the caller may not see is read), or nothing when the semantic search
    did not run. A failure keeps plain fusion and says so on the semantic source."""
    result = results["semantic"]
    if result.query_vector is None:
        return {}
    ids = {c.record.id for r in results.values() for c in r.candidates if c.record.id in allowed}
    # The semantic search scored its own candidates with the same query and stored vectors: only
    # the others' vectors are read.
    similarity = {c.record.id: c.score for c in result.candidates if c.record.id in allowed}
    with timer.stage("rerank", "fuse_ms", {"gateway.rerank.candidates": len(ids)}):
        try:
            similarity |= await stored_similarities(semantic, where, result, sorted(ids - similarity.keys()), tags)
        except ConnectorError as exc:
            results["semantic"] = replace(result, detail=f"{result.detail}; not reranked: {exc.message}")
            return {}
    note = f"{len(similarity)} of {len(ids)} candidates reranked by stored vectors"
    results["semantic"] = replace(result, detail=f"{result.detail}; {note}" if result.detail else note)
    return similarity
