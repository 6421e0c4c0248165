"""AsyncGatewayClient: the gateway's HTTP API as typed coroutines (httpx), the twin of GatewayClient;
BaseClient holds what the two share."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, TypeVar, Unpack

import anyio
import httpx

import gateway.client.calls as calls
import gateway.client.models as models
from gateway.client.base import Again, BaseClient
from gateway.client.calls import ExportFormat, RetrieveFields, ReviewFilters, TaskLike

T = TypeVar("T")


class AsyncGatewayClient(BaseClient[httpx.AsyncClient]):
    __doc__ = BaseClient.__doc__

    def _new_http(self, timeout: float) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=timeout)

    async def __aenter__(self) -> AsyncGatewayClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owned:
            await self._http.aclose()

    async def send(self, call: calls.Call[T]) -> T:
        """Send `call`, asking again on 429 and 503 as the retry rule allows; its answer, or its typed error."""
        method, url, kwargs = self._request(call)
        attempt = 1
        while True:
            try:
                response: httpx.Response | httpx.TransportError = await self._http.request(method, url, **kwargs)
            except httpx.TransportError as exc:
                response = exc
            outcome = self._outcome(call, attempt, response)
            if not isinstance(outcome, Again):
                return outcome
            await anyio.sleep(outcome.seconds)
            attempt += 1

    # ------------------------------------------------------------ retrieve

    async def retrieve(self, task: TaskLike, query: str | None = None, **fields: Unpack[RetrieveFields]) -> models.RetrieveResult:
        """POST /v1/retrieve; the keywords are the body's fields (`budget_bytes` is `budget.bytes`)."""
        return await self.send(calls.retrieve(task, query, **fields))

    async def fetch(self, task: TaskLike, ids: Sequence[str], **fields: Any) -> models.RetrieveResult:
        """Named items (mode fetch), each still verified: a forbidden id looks like an unknown one."""
        return await self.retrieve(task, fetch=ids, **fields)

    async def expand(self, task: TaskLike, cursor: str, *, budget_bytes: int | None = None) -> models.RetrieveResult:
        """The next page of an earlier answer (the same task)."""
        return await self.send(calls.expand(task, cursor, budget_bytes))

    async def pages(self, task: TaskLike, query: str | None = None, **fields: Any) -> AsyncIterator[models.RetrieveResult]:
        """The answer to a retrieve, then every page after it, following `cursor` to the end."""
        first = await self.retrieve(task, query, **fields)
        yield first
        async for page in self.expand_pages(task, first.cursor, budget_bytes=fields.get("budget_bytes")):
            yield page

    async def expand_pages(
        self, task: TaskLike, cursor: str | None, *, budget_bytes: int | None = None
    ) -> AsyncIterator[models.RetrieveResult]:
        """Every page after `cursor`, to the last."""
        while cursor:
            page = await self.expand(task, cursor, budget_bytes=budget_bytes)
            yield page
            cursor = page.cursor

    # ------------------------------------------------------------ writes (the ingest role)

    async def ingest(self, items: Iterable[Mapping[str, Any]]) -> models.IngestReport:
        return await self.send(calls.ingest(items))

    async def put_document(self, document_id: str, markdown: str | bytes) -> models.DocumentReport:
        return await self.send(calls.put_document(document_id, markdown))

    async def put_entity(self, entity_id: str, entity: Mapping[str, Any]) -> models.IngestReport:
        return await self.send(calls.put_entity(entity_id, entity))

    async def delete_entity(self, entity_id: str) -> models.DeletionResult:
        return await self.send(calls.delete_entity(entity_id))

    async def merge_entity(self, entity_id: str, into: str) -> models.MergeResult:
        return await self.send(calls.merge_entity(entity_id, into))

    async def put_edges(self, edges: Iterable[Mapping[str, Any]]) -> models.IngestReport:
        return await self.send(calls.put_edges(edges))

    # ------------------------------------------------------------ reports about one's own calls

    async def report_usage(self, trace_id: str, used: Sequence[str]) -> models.UsageReport:
        return await self.send(calls.report_usage(trace_id, used))

    async def feedback(self, trace_id: str, rating: int, comment: str | None = None) -> models.FeedbackReport:
        return await self.send(calls.feedback(trace_id, rating, comment))

    # ------------------------------------------------------------ audit review (the auditor role)

    async def traces(self, **filters: Unpack[ReviewFilters]) -> models.TracePage:
        """One page of the tenant's traces, newest first (filters: actor, task, decision, since,
        until, item, limit, cursor)."""
        return await self.send(calls.traces(**filters))

    async def iter_traces(self, **filters: Any) -> AsyncIterator[models.TraceSummary]:
        """Every matching trace, newest first, page after page (`traces`' filters and `limit` per page)."""
        cursor = filters.pop("cursor", None)
        while True:
            page = await self.traces(**filters, cursor=cursor)
            for summary in page.traces:
                yield summary
            if not page.cursor:
                return
            cursor = page.cursor

    async def trace(self, trace_id: str) -> models.Trace:
        return await self.send(calls.trace(trace_id))

    async def verify(self) -> models.VerifyReport:
        return await self.send(calls.verify())

    async def export(self, format: ExportFormat = "jsonl", **filters: Any) -> str:
        """Every matching row, oldest first, as JSON lines or CSV (read whole)."""
        return await self.send(calls.export(format, **filters))

    async def export_rows(self, **filters: Any) -> list[dict[str, Any]]:
        return calls.json_lines(await self.export("jsonl", **filters))
