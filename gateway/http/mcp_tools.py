"""The MCP tools: retrieve, fetch, expand, report_usage and feedback, each the HTTP route it stands
for. A tool's arguments are a model built from `RetrieveRequest`'s own fields, and what they become
is validated again by `parse_retrieve`, as an HTTP body is; a call runs the route's own handler
through `governed` (gateway/http/traced.py), with the credential of the HTTP request that carried
it, and its answer becomes a tool result (the HTTP body as structured content and as text)."""

from __future__ import annotations

import json
from copy import copy
from dataclasses import dataclass
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Callable, Literal, Mapping

from mcp.server import Server, ServerRequestContext
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)
from pydantic import BaseModel, Field, ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from starlette.requests import Request

from api.wire import Wire
from audit.record import Channel, TraceBuilder
from core.errors import BadRequest, NotFound, SchemaError, Unauthenticated
from core.request import IDENTITY_FIELDS, RetrieveRequest, Strict
from core.validation import describe_validation_error
from gateway.http.mcp_resource import REALM
from gateway.http.routes.audit import report_feedback, report_usage
from gateway.http.routes.retrieve import handle as retrieve_handler
from gateway.http.traced import Answer, Call, Handler, governed, unrendered

CHANNEL = "mcp"
TRACE_META = "gateway/trace_id"  # the result's own audit row, as `x-trace-id` names it over HTTP
TRACE_ID = r"^tr_[0-9a-f]{24}$"
FIELDS = RetrieveRequest.model_fields


def _field(name: str) -> tuple[Any, FieldInfo]:
    """A `RetrieveRequest` field as it validates /v1/retrieve: its type, bounds and default."""
    return FIELDS[name].annotation, FIELDS[name]


def _required(name: str, annotation: Any) -> tuple[Any, FieldInfo]:
    """A `RetrieveRequest` field, with its bounds, that a tool cannot do without (`fetch` ids, a `cursor`)."""
    info = copy(FIELDS[name])
    info.default, info.default_factory = PydanticUndefined, None
    return annotation, info


def _arguments(name: str, **fields: Any) -> type[BaseModel]:
    """A tool's arguments: strict as the HTTP model is (an unknown argument is refused)."""
    return create_model(name, __base__=Strict, **fields)


BRIEF_OR_SCOUT: Any = Literal["brief", "scout"]  # the retrieving modes; fetch and expand are tools of their own
RetrieveArguments = _arguments(
    "RetrieveArguments",
    mode=(BRIEF_OR_SCOUT, Field(default="scout", description="brief: a short context for the task; scout: a wider look")),
    **{name: _field(name) for name in ("task", "query", "entities", "depth", "budget", "kinds", "as_of", "include_historical")},
)
FetchArguments = _arguments("FetchArguments", task=_field("task"), ids=_required("fetch", list[str]), budget=_field("budget"))
ExpandArguments = _arguments("ExpandArguments", task=_field("task"), cursor=_required("cursor", str), budget=_field("budget"))


class UsageArguments(Strict):
    trace_id: str = Field(pattern=TRACE_ID, description="the trace_id of the retrieve, fetch or expand that returned the items")
    used: list[str] = Field(max_length=200, description="ids of the returned items the answer used")


class FeedbackArguments(Strict):
    trace_id: str = Field(pattern=TRACE_ID, description="the trace_id of the retrieve, fetch or expand rated")
    rating: int = Field(ge=1, le=5)
    comment: str | None = Field(default=None, max_length=2000)


def _retrieve_body(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"mode": "scout", **arguments}


def _fetch_body(arguments: dict[str, Any]) -> dict[str, Any]:
    body = {key: value for key, value in arguments.items() if key != "ids"}
    return {**body, "mode": "fetch", "fetch": arguments.get("ids")}


def _expand_body(arguments: dict[str, Any]) -> dict[str, Any]:
    return {**arguments, "mode": "expand"}


def _trace_body(arguments: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in arguments.items() if key != "trace_id"}


def _context_text(body: Mapping[str, Any]) -> str:
    """A retrieve's answer as a model reads it: one line per item under its citation label, then
    whether the answer is whole."""
    lines = []
    for item in body.get("items") or ():
        facts = ", ".join(str(item[key]) for key in ("kind", "authority", "status") if item.get(key))
        text = item.get("text") if item.get("text") is not None else item.get("value")
        lines.append(f"[{item.get('citation') or '-'}] {item.get('id')} ({facts}): {'' if text is None else text}")
    if not lines:
        lines.append(f"No items: {body.get('empty_reason') or 'nothing returned'}.")
    lines.append(
        f"trace_id: {body.get('trace_id')}; partial: {str(bool(body.get('partial'))).lower()}; "
        f"empty_reason: {body.get('empty_reason') or 'none'}"
    )
    if body.get("cursor"):
        lines.append(f"cursor: {body['cursor']} (more did not fit: call expand with it)")
    return "\n".join(lines)


def _usage_text(body: Mapping[str, Any]) -> str:
    return (
        f"Recorded {len(body.get('recorded') or ())} used item(s) for {body.get('trace_id')}; {body.get('ignored', 0)} ignored."
    )


def _feedback_text(body: Mapping[str, Any]) -> str:
    return f"Recorded a rating of {body.get('rating')} for {body.get('trace_id')}."


@dataclass(frozen=True, slots=True)
class McpTool:
    """One tool: its arguments model, the HTTP endpoint and handler it runs as, and how its
    arguments become that endpoint's body (and path, for a trace id)."""

    name: str
    description: str
    arguments: type[BaseModel]
    endpoint: str
    handler: Handler
    body: Callable[[dict[str, Any]], dict[str, Any]]
    readable: Callable[[Mapping[str, Any]], str]
    read_only: bool = True

    def listing(self) -> Tool:
        return Tool(
            name=self.name,
            description=self.description,
            input_schema=self.arguments.model_json_schema(),
            annotations=ToolAnnotations(read_only_hint=self.read_only, open_world_hint=False),
        )

    def http_body(self, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
        """The HTTP body these arguments stand for, once they fit the tool's model. A tenant or an actor
        is refused as /v1/retrieve refuses it: they come from the credential."""
        given = dict(arguments or {})
        for name in IDENTITY_FIELDS:
            if name in given:
                raise BadRequest(f"{name}: the tenant and actor come from the credential and cannot be set in the arguments")
        try:
            self.arguments.model_validate(given)
        except ValidationError as exc:
            raise SchemaError(describe_validation_error(exc, root="arguments")) from exc
        return self.body(given)


TOOLS = {
    tool.name: tool
    for tool in (
        McpTool(
            "retrieve",
            "Governed context for one task: the items the policy lets this credential see, each with a "
            "citation label, ranked current truth first and packed into one byte budget. Mode brief or scout.",
            RetrieveArguments,
            "retrieve",
            retrieve_handler,
            _retrieve_body,
            _context_text,
        ),
        McpTool(
            "fetch",
            "Read named items by id, under the same policy: an id the caller may not see is simply absent.",
            FetchArguments,
            "retrieve",
            retrieve_handler,
            _fetch_body,
            _context_text,
        ),
        McpTool(
            "expand",
            "The next page of an earlier answer, from its cursor (same task), decided and verified again.",
            ExpandArguments,
            "retrieve",
            retrieve_handler,
            _expand_body,
            _context_text,
        ),
        McpTool(
            "report_usage",
            "Report which returned items the answer used (only for a trace of this credential).",
            UsageArguments,
            "usage",
            report_usage,
            _trace_body,
            _usage_text,
            read_only=False,
        ),
        McpTool(
            "feedback",
            "Rate an earlier answer 1 to 5, with an optional comment (kept as a keyed hash only).",
            FeedbackArguments,
            "feedback",
            report_feedback,
            _trace_body,
            _feedback_text,
            read_only=False,
        ),
    )
}
LISTING = [tool.listing() for tool in TOOLS.values()]  # built once: every caller is shown the same tools
SCHEMAS = {tool.name: tool.input_schema for tool in LISTING}
NO_SUCH_TOOL = f"name: no such tool; the tools are {', '.join(TOOLS)}"


def refused(error: Exception) -> Handler:
    """A call refused before any tool ran (an unknown tool, a transport refusal): raised inside the
    governed path, so it is answered and audited as any refusal is, marked as MCP's."""

    async def refuse(call: Call) -> tuple[int, Answer]:
        call.trace.record(Channel(channel=CHANNEL))
        raise error

    return refuse


def _tool_result(
    readable: Callable[[Mapping[str, Any]], str], trace: TraceBuilder, status: int, answer: Answer, headers: Mapping[str, str]
) -> tuple[int, CallToolResult]:
    """A governed call's answer as a tool result: the HTTP body as structured content and as text;
    an error is the same `{"error": {code, message, trace_id}}` with `isError`. Rendered here, before
    the row is written, so a body JSON cannot hold fails as a 500 in the row as in the result."""
    try:
        if isinstance(answer, Wire):  # a model of the contract (api/): the fields its builder set
            answer = answer.wire()
        if not isinstance(answer, dict):
            raise TypeError("a tool's handler answers with a JSON body")
        json.dumps(answer, allow_nan=False)
        if status < 400:
            return status, CallToolResult(
                content=[TextContent(type="text", text=readable(answer))],
                structured_content=answer,
                _meta={TRACE_META: trace.trace_id},
            )
        return status, _error_result(trace, status, answer, headers)
    except Exception as exc:  # never a stack trace in a result; the log has the type only
        return unrendered(trace, exc, lambda code, error: _error_result(trace, code, error, {}))


def _error_result(trace: TraceBuilder, status: int, body: dict[str, Any], headers: Mapping[str, str]) -> CallToolResult:
    error = body.get("error") or {}
    text = f"Error {status} {error.get('code')}: {error.get('message')} (trace {error.get('trace_id')})"
    if error.get("reasons"):
        text += f"; reasons: {', '.join(map(str, error['reasons']))}"
    if headers.get("Retry-After"):
        text += f"; retry after {headers['Retry-After']} s"
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=body, is_error=True, _meta={TRACE_META: trace.trace_id}
    )


async def list_tools(ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None) -> ListToolsResult:
    return ListToolsResult(tools=LISTING, cache_scope="private")


async def call_tool(ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams) -> CallToolResult:
    """One tool call, as the HTTP call it stands for, with the credential of the request that carried it."""
    request = ctx.request
    if not isinstance(request, Request):  # only the HTTP transport carries a credential
        raise Unauthenticated("a tool call reaches the gateway over HTTP, with a bearer credential")
    tool = TOOLS.get(params.name)
    if tool is None:
        outcome = await governed(
            request, CHANNEL, refused(NotFound(NO_SUCH_TOOL)), partial(_tool_result, _context_text), channel=CHANNEL
        )
        return outcome.answer
    arguments = params.arguments
    trace_id = (arguments or {}).get(
        "trace_id"
    )  # the path parameter of /v1/traces/{trace_id}/...; any other value finds no trace
    outcome = await governed(
        request,
        tool.endpoint,
        tool.handler,
        partial(_tool_result, tool.readable),
        channel=CHANNEL,
        body=lambda: tool.http_body(arguments),
        params={"trace_id": trace_id if isinstance(trace_id, str) else ""},
    )
    return outcome.answer


def tool_schema(name: str) -> Mapping[str, Any] | None:
    """A tool's input schema (the SDK checks a 2026 request's `Mcp-Param-*` headers against it)."""
    return SCHEMAS.get(name)


def _version() -> str:
    try:
        return version("governed-gateway")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return ""


def build_server() -> Server[Any]:
    return Server(
        REALM,
        version=_version(),
        instructions="Governed retrieval: every tool runs under this credential's policy, and every call is audited.",
        get_tool_input_schema=tool_schema,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
