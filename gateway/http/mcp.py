"""The MCP server at /mcp: retrieve, fetch, expand, report_usage and feedback as tools, over the SDK's
streamable HTTP transport (stateless, JSON answers), on the app's own port.

Nothing here governs by itself. The transport refuses a browser origin it was not told of (403) and
a request without a valid bearer credential (401 with `WWW-Authenticate`), as the MCP specification
asks of a server and a resource server; a tool call then runs the HTTP route's own handler through
`governed` (gateway/http/traced.py): the credential of the HTTP request that carried it, one policy
revision, admission, the same errors, one audit row marked `mcp`, the same telemetry. A tool's
arguments are a model built from `RetrieveRequest`'s own fields, and what they become is validated
again by `parse_retrieve`, as an HTTP body is.

When the gateway trusts a JWT issuer that is an http(s) URL, /mcp is also an OAuth 2.0 protected
resource (RFC 9728): its metadata, at `METADATA_PATH`, names that issuer as the authorization server,
and every 401 of /mcp points at it (`resource_metadata`), so an OAuth-capable client can find where
to get a token. API keys have no authorization server; without such an issuer nothing is published.
"""

from __future__ import annotations

import json
import logging
import time
from copy import copy
from dataclasses import dataclass
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Callable, Literal, Mapping

import anyio
import anyio.to_thread
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.routes import build_resource_metadata_url
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.auth import ProtectedResourceMetadata
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)
from pydantic import AnyHttpUrl, BaseModel, Field, TypeAdapter, ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send

from api.service import Error
from api.wire import Wire
from audit.record import TraceBuilder
from core import work
from core.errors import BadRequest, DeadlineExceeded, Forbidden, MethodNotAllowed, NotFound, SchemaError, Unauthenticated
from core.request import IDENTITY_FIELDS, RetrieveRequest, Strict
from core.validation import describe_validation_error
from gateway.admission import DOOR_COURTESY_MAX_S, give_way
from gateway.context import GatewayContext
from gateway.http.errors import error_answer
from gateway.http.operation import Operation, json_answer, ref
from gateway.http.routes.audit import report_feedback, report_usage
from gateway.http.routes.retrieve import handle as retrieve_handler
from gateway.http.traced import AUTHENTICATED, Answer, Call, Handler, governed, read_body, requires, traced, unrendered
from gateway.settings import HOST, Settings

log = logging.getLogger("gateway.mcp")
CHANNEL = "mcp"
DOOR_COST = 1  # admission units every /mcp message but a tool call holds while it runs
REQUEST_SECONDS = 60  # the longest one /mcp request may take, its body included
TRACE_META = "gateway/trace_id"  # the result's own audit row, as `x-trace-id` names it over HTTP
REALM = "governed-gateway"
TRACE_ID = r"^tr_[0-9a-f]{24}$"
FIELDS = RetrieveRequest.model_fields
MCP_PATH = "/mcp"
# RFC 9728 §3.1: the well-known name goes between the host and the resource's path, as the SDK's
# `build_resource_metadata_url` (and so its client) puts it.
METADATA_PATH = "/.well-known/oauth-protected-resource" + MCP_PATH
RESOURCE_NAME = "Governed retrieval gateway (MCP tools)"
METADATA_CACHE = "public, max-age=3600"  # what the SDK's own metadata route says: it changes with a restart only
# Without GATEWAY_PUBLIC_URL the answer names the request's Host: a shared cache must not hand one
# caller's answer (a Host it chose) to another.
METADATA_CACHE_BY_HOST = "private, max-age=3600"
HTTP_URL: TypeAdapter[AnyHttpUrl] = TypeAdapter(AnyHttpUrl)
UNPUBLISHED = (
    "no protected-resource metadata is published here: it takes GATEWAY_MCP on, GATEWAY_JWT_ISSUER set to the "
    "authorization server's URL, and GATEWAY_JWT_SECRET or GATEWAY_JWT_PUBLIC_KEY"
)


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


def _refused(error: Exception) -> Handler:
    """A call refused before any tool ran (an unknown tool, a transport refusal): raised inside the
    governed path, so it is answered and audited as any refusal is, marked as MCP's."""

    async def refuse(call: Call) -> tuple[int, Answer]:
        call.trace.lineage.channel = CHANNEL
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
            request, CHANNEL, _refused(NotFound(NO_SUCH_TOOL)), partial(_tool_result, _context_text), channel=CHANNEL
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


def origin_allowed(origin: str | None, allowed: frozenset[str]) -> bool:
    """No Origin is an agent, not a browser page; a page's origin must be listed (`:*` any port)."""
    if origin is None:
        return True
    if origin in allowed:
        return True
    base, _, port = origin.rpartition(":")
    return port.isascii() and port.isdigit() and "//" in base and f"{base}:*" in allowed


def challenge(error: Unauthenticated, had_credential: bool, metadata_url: str | None = None) -> str:
    """RFC 6750's challenge: a request with no credential is told only the scheme and realm, and
    where the resource's metadata is when there is some (RFC 9728 §5.1)."""
    parameters = [f'realm="{REALM}"']
    if had_credential:
        description = error.message.replace("\\", "").replace('"', "'")
        parameters += ['error="invalid_token"', f'error_description="{description}"']
    if metadata_url is not None:  # built on a checked host (`ProtectedResource.urls`): nothing in it to escape
        parameters.append(f'resource_metadata="{metadata_url}"')
    return "Bearer " + ", ".join(parameters)


def _unpublished(settings: Settings) -> str | None:
    """Why /mcp has no protected-resource metadata on this gateway, or None when it has."""
    if not settings.mcp:
        return "GATEWAY_MCP is off: there is no /mcp resource to describe"
    issuer = settings.jwt_issuer
    if issuer is None:
        return "GATEWAY_JWT_ISSUER is not set: no authorization server issues this gateway's credentials"
    if not settings.jwt_enabled:
        return "GATEWAY_JWT_ISSUER is set, but no JWT is accepted without GATEWAY_JWT_SECRET or GATEWAY_JWT_PUBLIC_KEY"
    # An issuer that is only a name (`idp`) is still checked in every token's `iss`, as it always was,
    # but names no authorization server a client could find: nothing is published for it.
    not_a_url = "GATEWAY_JWT_ISSUER is not an http(s) URL, so it names no authorization server a client could find"
    if not issuer.startswith(("http://", "https://")):  # pydantic would read `http:idp` as http://idp/
        return not_a_url
    try:
        HTTP_URL.validate_python(issuer)
    except ValidationError:
        return not_a_url
    return None


@dataclass(frozen=True, slots=True)
class ProtectedResource:
    """/mcp as an OAuth 2.0 protected resource: its metadata (RFC 9728), and where that is. `issuer`
    is the authorization server it names, None when nothing is published (`unpublished` says why)."""

    issuer: str | None
    public_url: str | None
    unpublished: str = ""

    @classmethod
    def of(cls, settings: Settings) -> ProtectedResource:
        problem = _unpublished(settings)
        if problem and settings.jwt_issuer:  # an operator who set an issuer learns here why nothing is published
            log.info("no OAuth protected-resource metadata for /mcp: %s", problem)
        return cls(settings.jwt_issuer if problem is None else None, settings.public_url, problem or "")

    def urls(self, request: Request) -> tuple[str, str] | None:
        """The resource's URL and its metadata's: on GATEWAY_PUBLIC_URL, else on the request's own
        scheme and host as Starlette parsed them (it falls back to the server's address when the
        Host is not a host and port). Checked again here, as the URL goes into the challenge's quoted
        string: an authority with a quote, a comma or a space names no URL, and neither does a
        gateway that publishes nothing."""
        if self.issuer is None:
            return None
        base = self.public_url
        if base is None:
            try:
                scheme, netloc = request.url.scheme, request.url.netloc
            except ValueError:  # urllib refuses what it cannot split; never a 500 for a header
                return None
            if scheme not in ("http", "https") or not HOST.fullmatch(netloc):
                return None
            base = f"{scheme}://{netloc}"
        try:
            resource = HTTP_URL.validate_python(base + MCP_PATH)
        except ValidationError:  # a host name of dots, a port past 65535
            return None
        return str(resource), str(build_resource_metadata_url(resource))

    def metadata_url(self, request: Request) -> str | None:
        urls = self.urls(request)
        return None if urls is None else urls[1]

    async def route(self, request: Request) -> JSONResponse:
        """GET /.well-known/oauth-protected-resource/mcp: public and holding no data, like /healthz,
        so not audited. 404 naming the setting when nothing is published; a request whose Host names
        no URL is a 400 (GATEWAY_PUBLIC_URL takes the Host out of it)."""
        if self.issuer is None:  # one answer for every reason: an anonymous caller learns nothing of the set-up
            return JSONResponse(error_answer(NotFound(UNPUBLISHED), None)[1], 404)
        urls = self.urls(request)
        if urls is None:
            bad_host = BadRequest("Host: not a host name and port to name this gateway by; set GATEWAY_PUBLIC_URL")
            return JSONResponse(error_answer(bad_host, None)[1], 400)
        metadata = ProtectedResourceMetadata.model_validate(
            {
                "resource": urls[0],
                "authorization_servers": [self.issuer],
                "bearer_methods_supported": ["header"],
                "resource_name": RESOURCE_NAME,
            }
        )
        headers = (
            {"Cache-Control": METADATA_CACHE} if self.public_url else {"Cache-Control": METADATA_CACHE_BY_HOST, "Vary": "Host"}
        )
        return JSONResponse(metadata.model_dump(mode="json", exclude_none=True), headers=headers)


class McpEndpoint:
    """The ASGI app at /mcp. Stateless: every request is served by a session manager of its own,
    inside the event loop serving it, so no call depends on which replica, worker or loop served
    the one before."""

    def __init__(
        self, server: Server[Any], allowed_origins: frozenset[str], max_body_bytes: int, resource: ProtectedResource
    ) -> None:
        self.server = server
        self.allowed_origins = allowed_origins
        self.max_body_bytes = max_body_bytes
        self.resource = resource
        # Host and Origin are checked here, not by the SDK (whose check ties the Origin to a Host list):
        # the gateway answers whatever name its Service or ingress gives it. Content-Type stays checked.
        self.security = TransportSecuritySettings(enable_dns_rebinding_protection=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        context: GatewayContext = request.app.state.context
        authorization = request.headers.get("authorization")
        try:
            if not origin_allowed(request.headers.get("origin"), self.allowed_origins):
                raise Forbidden("Origin: this origin may not call /mcp (GATEWAY_MCP_ALLOWED_ORIGINS)")
            scope[AUTHENTICATED] = await anyio.to_thread.run_sync(context.authenticator.authenticate, authorization)
            if request.method != "POST":
                # Stateless: no session to end and nothing the server could ever send on a stream of
                # its own, so GET and DELETE are a 405 (as the MCP transport allows), never an open stream.
                raise MethodNotAllowed("/mcp: POST JSON-RPC messages; this stateless server keeps no stream or session")
            with anyio.fail_after(REQUEST_SECONDS):  # read here, at most the body limit, to see its method
                body = await read_body(request, self.max_body_bytes)
        except Exception as exc:
            if isinstance(exc, TimeoutError):
                exc = BadRequest(f"body: not received within {REQUEST_SECONDS} s")
            response = await traced(request, CHANNEL, _refused(exc))
            if isinstance(exc, Unauthenticated):
                response.headers["www-authenticate"] = challenge(exc, bool(authorization), self.resource.metadata_url(request))
            if isinstance(exc, MethodNotAllowed):
                response.headers["allow"] = "POST"
            await response(scope, receive, send)
            return
        manager = StreamableHTTPSessionManager(
            self.server,
            json_response=True,
            stateless=True,
            security_settings=self.security,
            max_request_body_size=self.max_body_bytes,
        )
        if _tool_call(body):  # admitted and audited at its own cost by the route it stands for
            with anyio.move_on_after(REQUEST_SECONDS):
                async with manager.run():
                    await manager.handle_request(scope, _replay(body, receive), send)
            return
        # Every other message (`initialize`, `notifications/initialized`, `tools/list`, `ping`, a
        # batch, a malformed frame) is a governed call of its own: admitted at DOOR_COST, answered by
        # the SDK's transport, and one audit row (endpoint `mcp`) with the status it was sent.
        response = await traced(request, CHANNEL, _door(manager, scope, _replay(body, receive)))
        await response(scope, receive, send)


def _door(manager: StreamableHTTPSessionManager, scope: Scope, receive: Receive) -> Handler:
    @requires(admit=False)
    async def door(call: Call) -> tuple[int, Answer]:
        call.trace.lineage.channel = CHANNEL
        async with call.admitted(DOOR_COST):
            await give_way(DOOR_COURTESY_MAX_S)  # a crowded tenant's messages wait for lighter tenants' calls first
            started = time.perf_counter()
            try:
                with anyio.fail_after(REQUEST_SECONDS):
                    status, headers, content = await _captured(manager, scope, receive)
            except TimeoutError as exc:
                raise DeadlineExceeded(f"/mcp: not answered within {REQUEST_SECONDS} s") from exc
            finally:
                # The SDK answers on the event loop, where a call's CPU cannot be told from its
                # neighbours': the message is charged the time it took, so its price (and the seats
                # the actor's next messages hold) follows what it cost, the more so under a flood.
                work.charge(cpu_s=time.perf_counter() - started)
        response = Response(content, status_code=status)
        response.raw_headers = [(k, v) for k, v in headers if k.lower() != b"content-length"] + response.raw_headers
        return status, response

    return door


async def _captured(
    manager: StreamableHTTPSessionManager, scope: Scope, receive: Receive
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """What the SDK's transport answers one POST (a JSON body: the server answers JSON, never SSE)."""
    start: dict[str, Any] = {}
    chunks: list[bytes] = []

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    async with manager.run():
        await manager.handle_request(scope, receive, send)
    return int(start.get("status", 500)), list(start.get("headers", [])), b"".join(chunks)


def _tool_call(body: bytes) -> bool:
    """Whether a body is one JSON-RPC `tools/call` request (admitted by its route, not the door)."""
    if not body:
        return False
    try:
        message = json.loads(body)
    except ValueError:
        return False
    return isinstance(message, dict) and message.get("method") == "tools/call"


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the transport the body already read, then what the client sends next."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def mcp_endpoint(settings: Settings, resource: ProtectedResource) -> McpEndpoint:
    return McpEndpoint(build_server(), settings.mcp_origins, settings.max_body_bytes, resource)


async def metadata_route(request: Request) -> JSONResponse:
    """The metadata of the app's /mcp: the app keeps its `ProtectedResource` (made from its settings)."""
    resource: ProtectedResource = request.app.state.resource
    return await resource.route(request)


# The operations this module serves (gateway/http/operation.py).
OPERATIONS = (
    Operation(
        METADATA_PATH,
        "get",
        metadata_route,
        "The OAuth 2.0 protected-resource metadata of /mcp (RFC 9728)",
        "operations",
        {
            "200": json_answer(
                "`resource` is the URL of /mcp, `authorization_servers` the JWT issuer (`GATEWAY_JWT_ISSUER`)",
                ref(ProtectedResourceMetadata),
                traced=False,
                headers={
                    "Cache-Control": {
                        "required": True,
                        "schema": {"enum": [METADATA_CACHE, METADATA_CACHE_BY_HOST]},
                        "description": "public with GATEWAY_PUBLIC_URL; private, with `Vary: Host`, "
                        "when the answer names the request's Host",
                    },
                    "Vary": {"schema": {"const": "Host"}},
                },
            ),
            "400": json_answer(
                "`bad_request`: the request's Host names no URL (`GATEWAY_PUBLIC_URL` takes it out of the answer)",
                ref(Error),
                traced=False,
            ),
            "404": json_answer(
                "`not_found`: nothing is published: no `GATEWAY_JWT_ISSUER`, one that is not an http(s) URL, no JWT "
                "key, or no /mcp (one message for all of them; the service's log says which)",
                ref(Error),
                traced=False,
            ),
        },
        auth=None,
        description="Where an OAuth-capable MCP client finds the authorization server of the gateway's JWTs; every 401 of "
        "/mcp names this URL in its `WWW-Authenticate` (`resource_metadata`) when it is published. Public and "
        "holding no data, like /healthz: not audited.",
    ),
)
