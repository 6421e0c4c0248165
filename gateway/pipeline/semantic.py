"""The semantic half of recall: embed the query (off the event loop), then search the index."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import anyio.to_thread

from connectors.base import SemanticConnector
from core.constraints import ItemFilter
from core import work
from core.errors import ConnectorError
from core.records import RecallQuery, SourceResult
from gateway.writes.embeddings import Embedder
from gateway.writes.vectorize import EmbeddingWorker


@dataclass(frozen=True, slots=True)
class Semantic:
    """What semantic search needs; `unavailable` says why it cannot run when it cannot."""

    embedder: Embedder | None
    connector: SemanticConnector | None
    worker: EmbeddingWorker | None
    unavailable: str | None = None
    # Releases what the connector holds outside the process (Weaviate's connections) at shutdown.
    close: Callable[[], None] = lambda: None


async def semantic_search(semantic: Semantic, where: ItemFilter, query: RecallQuery) -> SourceResult:
    """One source result; the query embedding's time is part of its `ms` and reported in detail."""
    assert semantic.embedder is not None and semantic.connector is not None and query.text
    started = time.perf_counter()
    try:
        work.charge(chars=len(query.text))
        embed = work.timed(functools.partial(semantic.embedder.embed, [query.text]))
        vector = await anyio.to_thread.run_sync(embed, abandon_on_cancel=True)
    except Exception as exc:  # an embedder that fails degrades this source only
        raise ConnectorError(f"query embedding failed: {type(exc).__name__}") from exc
    embed_ms = (time.perf_counter() - started) * 1000
    result = await semantic.connector.search(
        where, replace(query, vector=tuple(float(x) for x in vector[0]), model=semantic.embedder.model_id)
    )
    # The caller's tenant's waiting items only: another tenant's ingest volume is not ours to see.
    worker = semantic.worker
    lag = worker.lag if worker is not None else None
    if worker is not None and lag:  # something waits somewhere: count the tenant's (cached briefly)
        # Not abandoned at the deadline: one indexed COUNT, and a thread left holding a pooled
        # connection would outlive the store it came from.
        lag = await anyio.to_thread.run_sync(worker.tenant_lag, where.tenant)
    details = [d for d in (result.detail, f"query embedded in {embed_ms:.1f} ms") if d]
    if lag:
        details.append(f"{lag} items not embedded yet")
    return replace(result, ms=(time.perf_counter() - started) * 1000, detail="; ".join(details), lag=lag, embed_ms=embed_ms)
