"""AsyncGatewayClient: the gateway's HTTP API as typed coroutines (httpx), the twin of GatewayClient."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import anyio
import httpx

from gateway.client import calls
from gateway.client.calls import ExportFormat, Instant, Retry, TaskLike
from gateway.client.errors import GatewayUnreachable, Retryable
from gateway.client.models import (
    DeletionResult,
    DocumentReport,
    FeedbackReport,
    IngestReport,
    MergeResult,
    RetrieveResult,
    Trace,
    TracePage,
    TraceSummary,
    UsageReport,
    VerifyReport,
)

T = TypeVar("T")


class AsyncGatewayClient:
    """One credential's view of one gateway. `token` is an API key or a JWT; it goes in the
    Authorization header and nowhere else (not in a repr, an error or a log line).

    A 429 is always sent again, after the gateway's Retry-After: admission refuses a call before it
    runs anything. A 503 is sent again only by calls that are safe to repeat: reads, and writes
    that are idempotent by id (ingest, documents, entities, edges); not an expand (its cursor may
    have advanced) nor a usage or feedback report (each is an audit row). At most `max_attempts`
    sends, no single wait longer than `max_wait` seconds; then the typed error is raised.

    `http`: an httpx.AsyncClient of your own (connection reuse, proxies, tests); it is left open on close."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        max_attempts: int = 3,
        max_wait: float = 30.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._base_url = calls.checked_base_url(base_url)
        self._token = calls.checked_token(token)
        self._retry = Retry(max_attempts=max_attempts, max_wait=max_wait)
        self._owned = http is None
        self._http = http or httpx.AsyncClient(timeout=timeout)

    def __repr__(self) -> str:
        return f"AsyncGatewayClient({self._base_url!r})"

    async def __aenter__(self) -> AsyncGatewayClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owned:
            await self._http.aclose()

    async def send(self, call: calls.Call[T]) -> T:
        """Send `call`, asking again on 429 and 503 as the retry rule allows; its answer, or its typed error."""
        method, url, kwargs = calls.request_of(call, self._base_url, self._token)
        attempt = 1
        while True:
            try:
                response = await self._http.request(method, url, **kwargs)
            except httpx.TransportError as exc:
                raise GatewayUnreachable(f"{method} {call.path}: no answer ({type(exc).__name__})") from exc
            try:
                return calls.answer(call, response)
            except Retryable as error:
                wait = self._retry.wait(error, attempt, call)
                if wait is None:
                    raise
            await anyio.sleep(wait)
            attempt += 1

    # ------------------------------------------------------------ retrieve

    async def retrieve(
        self,
        task: TaskLike,
        query: str | None = None,
        *,
        mode: str | None = None,
        entities: Sequence[Mapping[str, str]] | None = None,
        kinds: Sequence[str] | None = None,
        sources: Mapping[str, bool] | None = None,
        graph: Mapping[str, Any] | None = None,
        filters: Mapping[str, Any] | None = None,
        fetch: Sequence[str] | None = None,
        cursor: str | None = None,
        depth: str | None = None,
        budget_bytes: int | None = None,
        limit: int | None = None,
        as_of: Instant | None = None,
        include_historical: bool | None = None,
        synthesize: bool | None = None,
    ) -> RetrieveResult:
        """POST /v1/retrieve; the arguments are the body's fields (`budget_bytes` is `budget.bytes`)."""
        return await self.send(
            calls.retrieve(
                task,
                query,
                mode=mode,
                entities=entities,
                kinds=kinds,
                sources=sources,
                graph=graph,
                filters=filters,
                fetch=fetch,
                cursor=cursor,
                depth=depth,
                budget_bytes=budget_bytes,
                limit=limit,
                as_of=as_of,
                include_historical=include_historical,
                synthesize=synthesize,
            )
        )

    async def fetch(self, task: TaskLike, ids: Sequence[str], **fields: Any) -> RetrieveResult:
        """Named items (mode fetch), each still verified: a forbidden id looks like an unknown one."""
        return await self.retrieve(task, fetch=ids, **fields)

    async def expand(self, task: TaskLike, cursor: str, *, budget_bytes: int | None = None) -> RetrieveResult:
        """The next page of an earlier answer (the same task)."""
        return await self.send(calls.expand(task, cursor, budget_bytes))

    async def pages(self, task: TaskLike, query: str | None = None, **fields: Any) -> AsyncIterator[RetrieveResult]:
        """The answer to a retrieve, then every page after it, following `cursor` to the end."""
        first = await self.retrieve(task, query, **fields)
        yield first
        async for page in self.expand_pages(task, first.cursor, budget_bytes=fields.get("budget_bytes")):
            yield page

    async def expand_pages(
        self, task: TaskLike, cursor: str | None, *, budget_bytes: int | None = None
    ) -> AsyncIterator[RetrieveResult]:
        """Every page after `cursor`, to the last."""
        while cursor:
            page = await self.expand(task, cursor, budget_bytes=budget_bytes)
            yield page
            cursor = page.cursor

    # ------------------------------------------------------------ writes (the ingest role)

    async def ingest(self, items: Iterable[Mapping[str, Any]]) -> IngestReport:
        return await self.send(calls.ingest(items))

    async def put_document(self, document_id: str, markdown: str | bytes) -> DocumentReport:
        return await self.send(calls.put_document(document_id, markdown))

    async def put_entity(self, entity_id: str, entity: Mapping[str, Any]) -> IngestReport:
        return await self.send(calls.put_entity(entity_id, entity))

    async def delete_entity(self, entity_id: str) -> DeletionResult:
        return await self.send(calls.delete_entity(entity_id))

    async def merge_entity(self, entity_id: str, into: str) -> MergeResult:
        return await self.send(calls.merge_entity(entity_id, into))

    async def put_edges(self, edges: Iterable[Mapping[str, Any]]) -> IngestReport:
        return await self.send(calls.put_edges(edges))

    # ------------------------------------------------------------ reports about one's own calls

    async def report_usage(self, trace_id: str, used: Sequence[str]) -> UsageReport:
        return await self.send(calls.report_usage(trace_id, used))

    async def feedback(self, trace_id: str, rating: int, comment: str | None = None) -> FeedbackReport:
        return await self.send(calls.feedback(trace_id, rating, comment))

    # ------------------------------------------------------------ audit review (the auditor role)

    async def traces(
        self,
        *,
        actor: str | None = None,
        task: str | None = None,
        decision: str | None = None,
        since: Instant | None = None,
        until: Instant | None = None,
        item: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> TracePage:
        """One page of the tenant's traces, newest first."""
        return await self.send(
            calls.traces(
                actor=actor, task=task, decision=decision, since=since, until=until, item=item, limit=limit, cursor=cursor
            )
        )

    async def iter_traces(self, **filters: Any) -> AsyncIterator[TraceSummary]:
        """Every matching trace, newest first, page after page (`traces`' filters and `limit` per page)."""
        cursor = filters.pop("cursor", None)
        while True:
            page = await self.traces(**filters, cursor=cursor)
            for summary in page.traces:
                yield summary
            if not page.cursor:
                return
            cursor = page.cursor

    async def trace(self, trace_id: str) -> Trace:
        return await self.send(calls.trace(trace_id))

    async def verify(self) -> VerifyReport:
        return await self.send(calls.verify())

    async def export(self, format: ExportFormat = "jsonl", **filters: Any) -> str:
        """Every matching row, oldest first, as JSON lines or CSV (read whole)."""
        return await self.send(calls.export(format, **filters))

    async def export_rows(self, **filters: Any) -> list[dict[str, Any]]:
        return calls.json_lines(await self.export("jsonl", **filters))
