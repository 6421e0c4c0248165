"""GatewayClient: the gateway's HTTP API as typed, blocking calls (httpx); BaseClient holds what it
shares with AsyncGatewayClient."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, Unpack

import httpx

import gateway.client.calls as calls
import gateway.client.models as models
from gateway.client.base import Again, BaseClient
from gateway.client.calls import ExportFormat, RetrieveFields, ReviewFilters, TaskLike

T = TypeVar("T")


class GatewayClient(BaseClient[httpx.Client]):
    __doc__ = BaseClient.__doc__

    def _new_http(self, timeout: float) -> httpx.Client:
        return httpx.Client(timeout=timeout)

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self._http.close()

    def send(self, call: calls.Call[T]) -> T:
        """Send `call`, asking again on 429 and 503 as the retry rule allows; its answer, or its typed error."""
        method, url, kwargs = self._request(call)
        attempt = 1
        while True:
            try:
                response: httpx.Response | httpx.TransportError = self._http.request(method, url, **kwargs)
            except httpx.TransportError as exc:
                response = exc
            outcome = self._outcome(call, attempt, response)
            if not isinstance(outcome, Again):
                return outcome
            time.sleep(outcome.seconds)
            attempt += 1

    # ------------------------------------------------------------ retrieve

    def retrieve(self, task: TaskLike, query: str | None = None, **fields: Unpack[RetrieveFields]) -> models.RetrieveResult:
        """POST /v1/retrieve; the keywords are the body's fields (`budget_bytes` is `budget.bytes`)."""
        return self.send(calls.retrieve(task, query, **fields))

    def fetch(self, task: TaskLike, ids: Sequence[str], **fields: Any) -> models.RetrieveResult:
        """Named items (mode fetch), each still verified: a forbidden id looks like an unknown one."""
        return self.retrieve(task, fetch=ids, **fields)

    def expand(self, task: TaskLike, cursor: str, *, budget_bytes: int | None = None) -> models.RetrieveResult:
        """The next page of an earlier answer (the same task)."""
        return self.send(calls.expand(task, cursor, budget_bytes))

    def pages(self, task: TaskLike, query: str | None = None, **fields: Any) -> Iterator[models.RetrieveResult]:
        """The answer to a retrieve, then every page after it, following `cursor` to the end."""
        first = self.retrieve(task, query, **fields)
        yield first
        yield from self.expand_pages(task, first.cursor, budget_bytes=fields.get("budget_bytes"))

    def expand_pages(
        self, task: TaskLike, cursor: str | None, *, budget_bytes: int | None = None
    ) -> Iterator[models.RetrieveResult]:
        """Every page after `cursor`, to the last."""
        while cursor:
            page = self.expand(task, cursor, budget_bytes=budget_bytes)
            yield page
            cursor = page.cursor

    # ------------------------------------------------------------ writes (the ingest role)

    def ingest(self, items: Iterable[Mapping[str, Any]]) -> models.IngestReport:
        return self.send(calls.ingest(items))

    def put_document(self, document_id: str, markdown: str | bytes) -> models.DocumentReport:
        return self.send(calls.put_document(document_id, markdown))

    def put_entity(self, entity_id: str, entity: Mapping[str, Any]) -> models.IngestReport:
        return self.send(calls.put_entity(entity_id, entity))

    def delete_entity(self, entity_id: str) -> models.DeletionResult:
        return self.send(calls.delete_entity(entity_id))

    def merge_entity(self, entity_id: str, into: str) -> models.MergeResult:
        return self.send(calls.merge_entity(entity_id, into))

    def put_edges(self, edges: Iterable[Mapping[str, Any]]) -> models.IngestReport:
        return self.send(calls.put_edges(edges))

    # ------------------------------------------------------------ reports about one's own calls

    def report_usage(self, trace_id: str, used: Sequence[str]) -> models.UsageReport:
        return self.send(calls.report_usage(trace_id, used))

    def feedback(self, trace_id: str, rating: int, comment: str | None = None) -> models.FeedbackReport:
        return self.send(calls.feedback(trace_id, rating, comment))

    # ------------------------------------------------------------ audit review (the auditor role)

    def traces(self, **filters: Unpack[ReviewFilters]) -> models.TracePage:
        """One page of the tenant's traces, newest first (filters: actor, task, decision, since,
        until, item, limit, cursor)."""
        return self.send(calls.traces(**filters))

    def iter_traces(self, **filters: Any) -> Iterator[models.TraceSummary]:
        """Every matching trace, newest first, page after page (`traces`' filters and `limit` per page)."""
        cursor = filters.pop("cursor", None)
        while True:
            page = self.traces(**filters, cursor=cursor)
            yield from page.traces
            if not page.cursor:
                return
            cursor = page.cursor

    def trace(self, trace_id: str) -> models.Trace:
        return self.send(calls.trace(trace_id))

    def verify(self) -> models.VerifyReport:
        return self.send(calls.verify())

    def export(self, format: ExportFormat = "jsonl", **filters: Any) -> str:
        """Every matching row, oldest first, as JSON lines or CSV (read whole)."""
        return self.send(calls.export(format, **filters))

    def export_rows(self, **filters: Any) -> list[dict[str, Any]]:
        return calls.json_lines(self.export("jsonl", **filters))
