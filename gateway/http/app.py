"""The Starlette application: routes, lifespan, and the one place errors become HTTP."""

from __future__ import annotations

import contextlib
import gc
import logging
from typing import AsyncIterator

import anyio
import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from threadpoolctl import threadpool_limits

from core.errors import GatewayError, MethodNotAllowed, NotFound, where
from core.store import close_store
from gateway.admission import Gate
from gateway.announce import announce
from gateway.background import run_background
from gateway.context import GatewayContext, build_context
from gateway.http.errors import error_answer
from gateway.http.mcp import mcp_endpoint
from gateway.http.mcp_resource import MCP_PATH, ProtectedResource
from gateway.http.metrics import observe
from gateway.http.table import routes
from gateway.http.traced import refusal, traced
from gateway.policy.reload import follow, watch
from gateway.settings import Settings
from gateway.telemetry import Telemetry

log = logging.getLogger("gateway")


async def error_response(request: Request, exc: Exception) -> JSONResponse:
    """Errors raised outside a traced handler (a failure before the handler ran); the router's 404
    and 405 are traced instead (`unknown_route`, `method_not_allowed`)."""
    if not isinstance(exc, (GatewayError, HTTPException)):
        log.error("unhandled %s", where(exc))
    status, body = error_answer(exc, None)
    return JSONResponse(body, status)


async def unknown_route(request: Request, exc: Exception) -> Response:
    """The router's 404 is a call like any other: traced, in the unauthenticated chain."""
    return await traced(request, "unknown_route", refusal(NotFound, "no route at this path"))


async def method_not_allowed(request: Request, exc: Exception) -> Response:
    """The router's 405, traced like a 404; the answer keeps the router's `Allow` header."""
    response = await traced(request, "method_not_allowed", refusal(MethodNotAllowed, "this path does not take this method"))
    allow = exc.headers.get("Allow") if isinstance(exc, HTTPException) and exc.headers else None
    if allow:
        response.headers["allow"] = allow
    return response


async def warm_indexes(context: GatewayContext) -> None:
    """Mirror the stored vectors and build their graphs, and build the lexical indexes, off the
    request path (a large tenant's on a thread of its own; its searches are answered meanwhile).
    The lexical warm-up runs on the index's own thread, which `close_indexes` stops at shutdown."""
    for name, connector in (("vector", context.connectors.semantic.connector), ("lexical", context.connectors.lexical)):
        warm = getattr(connector, "warm", None)
        if warm is None:
            continue
        try:
            await anyio.to_thread.run_sync(warm)  # bounded: small vector indexes here, the rest on threads
        except Exception as exc:  # a cold index only makes the first queries slower
            log.warning("%s index warm-up failed: %s", name, where(exc))


def close_indexes(context: GatewayContext) -> None:
    """Stop the lexical indexes' threads (builds, catch-ups, the warm-up) and wait for them, a
    bounded time (connectors/sql/text_index.py `TextIndex.close`)."""
    close = getattr(context.connectors.lexical, "close", None)
    if close is not None:
        close()


def create_app(
    settings: Settings, context: GatewayContext | None = None, telemetry: Telemetry | None = None, freeze: bool = False
) -> Starlette:
    """The app; with no context given, the lifespan builds one from settings (store, policy,
    connectors, telemetry — or the `telemetry` given). `freeze`: the serving process moves what it
    loaded at start out of the garbage collector's scans, and runs numpy's products on one BLAS thread."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        own = context is None
        app.state.context = context or await build_context(settings, telemetry)
        if own:
            announce(settings, app.state.context)
        observe(app.state.context)  # the gauges of GET /metrics read this context
        if freeze:
            # Everything loaded at start (the language models, the policy engine, the vector index)
            # lives as long as the process: kept out of the collector's scans, a full collection no
            # longer walks millions of objects and pauses every call in flight for ~100 ms.
            gc.collect()
            gc.freeze()
            # A request's numpy products (vectors scored, the cells' centroids) are a few thousand rows:
            # OpenBLAS splits them over every core, and on a machine whose cores are busy (other
            # requests, a neighbour) its second thread waits for a core to run on: 7.8 ms for a
            # 3,906 x 384 product that takes 0.2 ms on one thread (connectors/sql/cells.py). Requests
            # run in parallel on threads of their own; each product runs on the thread that asked.
            threadpool_limits(1, user_api="blas")
        pending = [w for w in (app.state.context.connectors.semantic.worker, app.state.context.privacy.worker) if w is not None]
        checkpointer = app.state.context.audit.checkpointer
        try:
            async with anyio.create_task_group() as background:
                # Embedding and analysis in every process: their batches are claimed, never done twice.
                background.start_soon(run_background, pending, Gate(app.state.context.admission))
                if checkpointer is not None:  # counts the rows this process appended: one per process
                    background.start_soon(checkpointer.run)
                background.start_soon(warm_indexes, app.state.context)
                background.start_soon(watch, app.state.context)  # policy reloads on SIGHUP and polling
                background.start_soon(follow, app.state.context)  # and when another replica switched
                yield
                background.cancel_scope.cancel()
        finally:
            if app.state.context.audit.checkpointer is not None:  # once at shutdown: the last rows signed too
                await anyio.to_thread.run_sync(app.state.context.audit.checkpointer.checkpoint, True)
            if app.state.context.privacy.worker is not None:  # its analysing processes, if it started any
                await anyio.to_thread.run_sync(app.state.context.privacy.worker.close)
            if own:
                await app.state.context.policy.aclose()
                await anyio.to_thread.run_sync(close_indexes, app.state.context)  # before the store: their threads read it
                await anyio.to_thread.run_sync(app.state.context.connectors.semantic.close)
                if app.state.context.synthesizer is not None:
                    await app.state.context.synthesizer.aclose()
                await anyio.to_thread.run_sync(app.state.context.telemetry.shutdown)  # flushes the exporters
                close_store(app.state.context.store)

    # MCP over streamable HTTP (gateway/http/mcp.py): every method goes to the SDK's transport, which
    # answers those it does not serve; stateless, so it needs nothing from the lifespan.
    # The OAuth protected-resource metadata of /mcp is routed whatever the settings (a 404 naming the
    # setting when nothing is published), so every configuration serves the same OpenAPI document.
    resource = ProtectedResource.of(settings)
    mcp = [Route(MCP_PATH, mcp_endpoint(settings, resource))] if settings.mcp else []
    app = Starlette(
        routes=[*routes(), *mcp],  # every declared operation (gateway/http/table.py), and the MCP transport
        exception_handlers={
            404: unknown_route,  # a status handler takes the router's HTTPException before the class handler
            405: method_not_allowed,
            HTTPException: error_response,
            GatewayError: error_response,
            Exception: error_response,
        },
        lifespan=lifespan,
    )
    app.state.resource = resource  # the OAuth metadata route's (gateway/http/mcp_resource.py)
    return app
