"""The MCP server at /mcp: the tools of gateway/http/mcp_tools.py over the SDK's streamable HTTP
transport (stateless, JSON answers), on the app's own port.

Nothing here governs by itself. The transport refuses a browser origin it was not told of (403) and
a request without a valid bearer credential (401 with `WWW-Authenticate`, pointing at the metadata
of gateway/http/mcp_resource.py when there is some), as the MCP specification asks of a server and
a resource server; a tool call then runs the HTTP route's own handler through `governed`
(gateway/http/traced.py): the credential of the HTTP request that carried it, one policy revision,
admission, the same errors, one audit row marked `mcp`, the same telemetry. Every other message is
admitted at `DOOR_COST` and audited as one call of its own.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import anyio.to_thread
from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from audit.record import Channel
from core import work
from core.errors import BadRequest, DeadlineExceeded, Forbidden, MethodNotAllowed, Unauthenticated
from gateway.admission import DOOR_COURTESY_MAX_S, give_way
from gateway.context import GatewayContext
from gateway.http.mcp_resource import ProtectedResource, challenge
from gateway.http.mcp_tools import CHANNEL, build_server, refused
from gateway.http.traced import AUTHENTICATED, Answer, Call, Handler, read_body, requires, traced
from gateway.settings import Settings

DOOR_COST = 1  # admission units every /mcp message but a tool call holds while it runs
REQUEST_SECONDS = 60  # the longest one /mcp request may take, its body included


def origin_allowed(origin: str | None, allowed: frozenset[str]) -> bool:
    """No Origin is an agent, not a browser page; a page's origin must be listed (`:*` any port)."""
    if origin is None:
        return True
    if origin in allowed:
        return True
    base, _, port = origin.rpartition(":")
    return port.isascii() and port.isdigit() and "//" in base and f"{base}:*" in allowed


class McpEndpoint:
    """The ASGI app at /mcp. Stateless: every request is served by a session manager of its own,
    inside the event loop serving it, so no call depends on which replica, worker or loop served
    the one before."""

    def __init__(
        self,
        server: Server[Any],
        allowed_origins: frozenset[str],
        max_body_bytes: int,
        resource: ProtectedResource,
        body_timeout_s: float = 30.0,
    ) -> None:
        self.server = server
        self.allowed_origins = allowed_origins
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
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
            # Read here, within the body's size and time bounds, to see its method; JSON nested past
            # what the parser can hold is a 400 with its row, like any malformed request.
            body = await read_body(request, self.max_body_bytes, self.body_timeout_s)
            message = _message(body)
        except Exception as exc:
            response = await traced(request, CHANNEL, refused(exc))
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
        tool_call = isinstance(message, dict) and message.get("method") == "tools/call"
        if tool_call:  # admitted and audited at its own cost by the route it stands for
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
        call.trace.record(Channel(channel=CHANNEL))
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


def _message(body: bytes) -> Any:
    """The body's JSON (None when it is none: the SDK's transport answers that); BadRequest for JSON
    nested too deeply to parse, which no JSON-RPC message is."""
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None
    except RecursionError as exc:
        raise BadRequest("body: JSON nested too deeply") from exc


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
    return McpEndpoint(build_server(), settings.mcp_origins, settings.max_body_bytes, resource, settings.body_timeout_ms / 1000)
