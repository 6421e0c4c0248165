"""Every call the client makes, as a value: how to ask (method, path, body), how to read the answer,
and whether a 503 may be asked again. The sync and async clients only send these and wait; the
building, the reading and the retry rule live here once."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Generic, Literal, TypedDict, TypeVar, Unpack
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from gateway.client.errors import ApiError, Retryable, UnexpectedAnswer, error_class
from gateway.client.models import (
    DeletionResult,
    DocumentReport,
    FeedbackReport,
    IngestReport,
    MergeResult,
    RetrieveResult,
    Task,
    Trace,
    TracePage,
    UsageReport,
    VerifyReport,
    name_of,
)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
TaskLike = Task | str | Mapping[str, Any]
Instant = datetime | str
ExportFormat = Literal["jsonl", "csv"]


class RetrieveFields(TypedDict, total=False):
    """A retrieve's keyword arguments: the body's fields as the API names them (`budget_bytes` is
    `budget.bytes`). Both clients take them as they are, so they are named here once."""

    mode: str | None
    entities: Sequence[Mapping[str, str]] | None
    kinds: Sequence[str] | None
    sources: Mapping[str, bool] | None
    graph: Mapping[str, Any] | None
    filters: Mapping[str, Any] | None
    fetch: Sequence[str] | None
    cursor: str | None
    depth: str | None
    budget_bytes: int | None
    limit: int | None
    as_of: Instant | None
    include_historical: bool | None
    synthesize: bool | None


class ReviewFilters(TypedDict, total=False):
    """The audit review's filters (query parameters of /v1/audit/traces and /v1/audit/export)."""

    actor: str | None
    task: str | None
    decision: str | None
    since: Instant | None
    until: Instant | None
    item: str | None
    limit: int | None
    cursor: str | None


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One HTTP exchange. `answers`: the statuses whose body is the answer (a document write with a
    rejected piece answers 422 with its report). `retry_unavailable`: a 503 may be asked again only
    when asking twice does what asking once does; a 429 always may, because admission refuses a call
    before it runs anything."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    json: Any = None
    content: bytes | None = None
    content_type: str | None = None
    params: Mapping[str, str] = field(default_factory=dict)
    answers: frozenset[int] = frozenset({200})
    retry_unavailable: bool = True


@dataclass(frozen=True, slots=True)
class Retry:
    """At most `max_attempts` sends; between them the gateway's Retry-After, else an exponential
    backoff from `backoff` seconds with jitter, never more than `max_wait` seconds at a time."""

    max_attempts: int = 3
    max_wait: float = 30.0
    backoff: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts: at least 1")
        if not self.max_wait >= 0 or not self.backoff >= 0:
            raise ValueError("max_wait, backoff: seconds, at least 0")

    def wait(self, error: ApiError, attempt: int, call: Call[Any]) -> float | None:
        """Seconds to wait before sending `call` again after `error` on attempt `attempt` (1-based),
        or None: raise it."""
        if attempt >= self.max_attempts or not isinstance(error, Retryable):
            return None
        if error.status == 503 and not call.retry_unavailable:
            return None
        told: float | None = error.retry_after
        if told is not None:
            return min(told, self.max_wait)
        step = self.backoff * 2.0 ** (attempt - 1)  # equal jitter: half fixed, half random, so retries spread out
        return min(self.max_wait, step / 2 + random.uniform(0, step / 2))


# ---------------------------------------------------------------- answers


def trace_id_of(response: httpx.Response) -> str | None:
    found: str | None = response.headers.get("x-trace-id")
    return found


def body_of(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise UnexpectedAnswer(
            f"{response.status_code}: the answer is not JSON", status=response.status_code, trace_id=trace_id_of(response)
        ) from exc


def model(kind: type[M]) -> Callable[[httpx.Response], M]:
    """A reader of a JSON answer into `kind`; a body of another shape is an UnexpectedAnswer naming the field."""

    def read(response: httpx.Response) -> M:
        try:
            return kind.model_validate(body_of(response))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "body"
            raise UnexpectedAnswer(
                f"{name_of(kind)}.{where}: {first['msg']}", status=response.status_code, trace_id=trace_id_of(response)
            ) from exc

    return read


def text(response: httpx.Response) -> str:
    return response.text


def retry_after(value: str | None) -> float | None:
    """Retry-After in seconds: delta-seconds, or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def error_from(response: httpx.Response) -> ApiError:
    """The typed error for an error answer. A body without the error envelope (a proxy's page, say)
    still becomes the status's type, its code `http_<status>`."""
    status, trace_id = response.status_code, trace_id_of(response)
    code, message = f"http_{status}", f"HTTP {status} without an error body"
    reasons: tuple[str, ...] = ()
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict):
        code = str(error.get("code") or code)
        message = str(error.get("message") or message)
        trace_id = error.get("trace_id") or trace_id
        reasons = tuple(str(r) for r in error.get("reasons") or ())
    kind = error_class(status)
    if issubclass(kind, Retryable):
        return kind(
            status, code, message, trace_id, reasons=reasons, retry_after=retry_after(response.headers.get("retry-after"))
        )
    return kind(status, code, message, trace_id, reasons=reasons)


def answer(call: Call[T], response: httpx.Response) -> T:
    """The call's answer, or its typed error raised."""
    if response.status_code in call.answers:
        return call.read(response)
    raise error_from(response)


# ---------------------------------------------------------------- requests


def task_body(task: TaskLike) -> dict[str, Any]:
    if isinstance(task, Task):
        return task.model_dump(exclude_none=True, include={"type", "scope"})
    if isinstance(task, str):
        return {"type": task}
    return plain(task)  # type: ignore[no-any-return]


def instant(value: Instant | None) -> str | None:
    """An instant as the gateway reads it (RFC3339 with its offset); a naive datetime is refused
    here rather than guessed at."""
    if value is None or isinstance(value, str):
        return value
    if value.tzinfo is None:
        raise ValueError("as_of, since, until: a datetime needs its timezone")
    return value.isoformat()


def segment(value: str, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name}: expected a non-empty string")
    return quote(value, safe="")


def retrieve(task: TaskLike, query: str | None = None, **fields: Unpack[RetrieveFields]) -> Call[RetrieveResult]:
    """POST /v1/retrieve with the body's fields as the API names them; `budget_bytes` is `budget.bytes`.
    Fields left None are not sent (the gateway's defaults apply). A retrieve is a read, so a 503 is
    asked again; an expand (a `cursor`) is not, because the gateway may have advanced the cursor."""
    known(fields, RetrieveFields, "retrieve")
    budget_bytes = fields.pop("budget_bytes", None)
    body: dict[str, Any] = {"task": task_body(task)}
    if query is not None:
        body["query"] = query
    if budget_bytes is not None:
        body["budget"] = {"bytes": budget_bytes}
    if fields.get("as_of") is not None:
        fields["as_of"] = instant(fields["as_of"])
    for name, value in fields.items():
        if value is not None:
            body[name] = plain(value)
    return Call("POST", "/v1/retrieve", model(RetrieveResult), json=body, retry_unavailable="cursor" not in body)


def known(arguments: Mapping[str, object], fields: type[Any], call: str) -> None:
    """A keyword the call does not take is a TypeError, as it is for a function that names its
    parameters: it is not sent to the gateway to be refused there."""
    unknown = sorted(set(arguments) - set(fields.__annotations__))
    if unknown:
        raise TypeError(f"{call}() got an unexpected keyword argument {unknown[0]!r}")


def plain(value: Any) -> Any:
    """A value as JSON takes it: any mapping a dict, any sequence but a string a list."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def expand(task: TaskLike, cursor: str, budget_bytes: int | None = None) -> Call[RetrieveResult]:
    if not isinstance(cursor, str) or not cursor:
        raise ValueError("cursor: expected the cursor of an earlier answer")
    return retrieve(task, cursor=cursor, budget_bytes=budget_bytes)


def ingest(items: Iterable[Mapping[str, Any]]) -> Call[IngestReport]:
    """PUT /v1/items. Idempotent by id, so a 503 is asked again: writing the same items twice
    leaves them as writing them once (the second time they count as unchanged)."""
    return Call("PUT", "/v1/items", model(IngestReport), json=[plain(item) for item in items])


def put_document(document_id: str, markdown: str | bytes) -> Call[DocumentReport]:
    """PUT /v1/documents/{id}: idempotent (the same bytes again change nothing)."""
    content = markdown.encode() if isinstance(markdown, str) else markdown
    return Call(
        "PUT",
        f"/v1/documents/{segment(document_id, 'document_id')}",
        model(DocumentReport),
        content=content,
        content_type="text/markdown",
        answers=frozenset({200, 422}),
    )


def put_entity(entity_id: str, entity: Mapping[str, Any]) -> Call[IngestReport]:
    """PUT /v1/entities/{id}: idempotent; a rejected entity answers 422 with its report."""
    return Call(
        "PUT",
        f"/v1/entities/{segment(entity_id, 'entity_id')}",
        model(IngestReport),
        json=plain(entity),
        answers=frozenset({200, 422}),
    )


def delete_entity(entity_id: str) -> Call[DeletionResult]:
    """DELETE /v1/entities/{id}: idempotent (a second deletion reports `changed` false)."""
    return Call("DELETE", f"/v1/entities/{segment(entity_id, 'entity_id')}", model(DeletionResult))


def merge_entity(entity_id: str, into: str) -> Call[MergeResult]:
    """POST /v1/entities/{id}/merge: idempotent (merging again reports `changed` false)."""
    return Call("POST", f"/v1/entities/{segment(entity_id, 'entity_id')}/merge", model(MergeResult), json={"into": into})


def put_edges(edges: Iterable[Mapping[str, Any]]) -> Call[IngestReport]:
    return Call("PUT", "/v1/edges", model(IngestReport), json=[plain(edge) for edge in edges])


def report_usage(trace_id: str, used: Sequence[str]) -> Call[UsageReport]:
    """Each report is an audit row of its own, so a 503 is not asked again (it could write two)."""
    return Call(
        "POST",
        f"/v1/traces/{segment(trace_id, 'trace_id')}/usage",
        model(UsageReport),
        json={"used": list(used)},
        retry_unavailable=False,
    )


def feedback(trace_id: str, rating: int, comment: str | None = None) -> Call[FeedbackReport]:
    body: dict[str, Any] = {"rating": rating}
    if comment is not None:
        body["comment"] = comment
    return Call(
        "POST", f"/v1/traces/{segment(trace_id, 'trace_id')}/feedback", model(FeedbackReport), json=body, retry_unavailable=False
    )


def review_params(**filters: Any) -> dict[str, str]:
    """The review filters as query parameters (actor, task, decision, since, until, item, limit, cursor)."""
    params: dict[str, str] = {}
    for name, value in filters.items():
        if value is not None:
            params[name] = str(instant(value)) if name in ("since", "until") else str(value)
    return params


def traces(**filters: Unpack[ReviewFilters]) -> Call[TracePage]:
    known(filters, ReviewFilters, "traces")
    return Call("GET", "/v1/audit/traces", model(TracePage), params=review_params(**filters))


def trace(trace_id: str) -> Call[Trace]:
    return Call("GET", f"/v1/audit/traces/{segment(trace_id, 'trace_id')}", model(Trace))


def verify() -> Call[VerifyReport]:
    return Call("GET", "/v1/audit/verify", model(VerifyReport))


def export(format: ExportFormat = "jsonl", **filters: Any) -> Call[str]:
    """GET /v1/audit/export: the whole document as text (JSON lines, or CSV with a header)."""
    return Call("GET", "/v1/audit/export", text, params={"format": format, **review_params(**filters)})


def json_lines(document: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in document.splitlines() if line.strip()]


# ---------------------------------------------------------------- sending


def request_of(call: Call[Any], base_url: str, token: str) -> tuple[str, str, dict[str, Any]]:
    """Method, URL and httpx keyword arguments for one send of `call`."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    if call.content_type:
        headers["Content-Type"] = call.content_type
    kwargs: dict[str, Any] = {"headers": headers, "params": dict(call.params) or None}
    if call.content is not None:
        kwargs["content"] = call.content
    elif call.json is not None:
        kwargs["json"] = call.json
    return call.method, base_url + call.path, kwargs


def checked_base_url(base_url: str) -> str:
    url = httpx.URL(base_url)
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError("base_url: expected an http:// or https:// address")
    return str(base_url).rstrip("/")


def checked_token(token: str) -> str:
    """The credential, refused (without being repeated) when it could not travel in a header."""
    if not isinstance(token, str) or not token or not token.isprintable() or any(c.isspace() for c in token):
        raise ValueError("token: expected an API key or JWT without spaces or control characters")
    return token
