"""Recall: the chosen connectors run concurrently, each under a deadline; one failure never sinks the rest."""

from __future__ import annotations

import logging
import time
from typing import Awaitable, Callable

import anyio
from opentelemetry.trace import Status, StatusCode

from core.errors import ConnectorError, where
from core.records import SourceResult
from core.request import RetrieveRequest
from gateway.telemetry import current as current_telemetry

log = logging.getLogger("gateway.pipeline.recall")

Search = Callable[[], Awaitable[SourceResult]]
SOURCES = ("exact", "graph", "lexical", "semantic")  # every response reports each of these

MODE_SOURCES = {
    "brief": {"exact", "graph", "lexical", "semantic"},
    "scout": {"exact", "lexical", "semantic"},
    "fetch": {"exact"},
    "filter": {"exact", "lexical"},
    "expand": set(),
}


def chosen_sources(request: RetrieveRequest) -> dict[str, bool]:
    """Mode defaults, then the caller's explicit switches; an explicit false always wins."""
    defaults = MODE_SOURCES[request.effective_mode]
    explicit = request.sources.model_dump()
    return {name: (explicit[name] if explicit[name] is not None else name in defaults) for name in SOURCES}


async def run_source(name: str, search: Search, deadline_ms: int) -> SourceResult:
    """One source under its deadline, in a retrieval span of its own (status and timing only: the
    candidates are not yet confirmed by the policy, so their ids stay off the span)."""
    telemetry = current_telemetry()
    with telemetry.layer(f"retrieval {name}", {"gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": name}) as span:
        result = await _search(name, search, deadline_ms)
        span.set_attribute("gateway.source.status", result.status)
        if result.status in ("error", "timeout"):
            span.set_status(Status(StatusCode.ERROR, result.status))
    telemetry.source_done(name, result.status, result.ms / 1000)
    return result


async def _search(name: str, search: Search, deadline_ms: int) -> SourceResult:
    """Connectors run their blocking work in threads they allow to be abandoned, so a late source is
    reported as a timeout at once while its thread finishes alone."""
    started = time.perf_counter()

    def elapsed() -> float:
        return (time.perf_counter() - started) * 1000

    try:
        with anyio.fail_after(deadline_ms / 1000):
            return await search()
    except TimeoutError:
        return SourceResult(name, "timeout", ms=elapsed(), detail=f"deadline {deadline_ms} ms")
    except ConnectorError as exc:
        log.warning("source %s failed: %s", name, exc.message)
        return SourceResult(name, "error", ms=elapsed(), detail=exc.message)
    except Exception as exc:  # a connector bug degrades its source, never the whole answer
        # The type and place only: a driver's message can quote query parameters.
        log.error("source %s crashed: %s", name, where(exc))
        return SourceResult(name, "error", ms=elapsed(), detail=f"unexpected {type(exc).__name__}")


async def recall(searches: dict[str, Search], deadline_ms: int) -> dict[str, SourceResult]:
    results: dict[str, SourceResult] = {}

    async def one(name: str, search: Search) -> None:
        results[name] = await run_source(name, search, deadline_ms)

    async with anyio.create_task_group() as group:
        for name, search in searches.items():
            group.start_soon(one, name, search)
    return {name: results[name] for name in searches}
