"""The route table: every operation the app serves, gathered from the modules that declare them
beside their handlers. `routes()` makes one Starlette route per path, taking the methods declared
for it; `/openapi.json` renders the same declarations (gateway/http/openapi.py), so a route cannot
be served without being documented. Only /mcp is routed without a declaration: it is the MCP SDK's
transport, documented in docs/agents.md, not an HTTP operation of this contract."""

from __future__ import annotations

from collections.abc import Iterable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.http import mcp
from gateway.http.audit_pages import views as pages
from gateway.http.openapi import openapi_route
from gateway.http.operation import OPEN_OBJECT, Operation, json_answer
from gateway.http.routes import (
    audit,
    documents,
    entities,
    ingest,
    keys,
    operations,
    policy_explain,
    policy_impact,
    retrieve,
)

OPENAPI = (
    Operation(
        "/openapi.json",
        "get",
        openapi_route,
        "This document",
        "operations",
        {"200": json_answer("The OpenAPI 3.1 document", OPEN_OBJECT, traced=False)},
        auth=None,
    ),
)

OPERATIONS: tuple[Operation, ...] = (
    *operations.OPERATIONS,
    *OPENAPI,
    *mcp.OPERATIONS,
    *retrieve.OPERATIONS,
    *ingest.OPERATIONS,
    *documents.OPERATIONS,
    *entities.OPERATIONS,
    *policy_explain.OPERATIONS,
    *policy_impact.OPERATIONS,
    *keys.OPERATIONS,
    *audit.OPERATIONS,
    *pages.OPERATIONS,
)


class Declared(Route):
    """The route of one path, built from the operations declared for it (one per method)."""

    def __init__(self, path: str, declared: Iterable[Operation]) -> None:
        self.operations = {operation.method: operation for operation in declared}
        serve = {method.upper(): operation.serve for method, operation in self.operations.items()}
        if "GET" in serve:
            serve["HEAD"] = serve["GET"]  # Starlette answers HEAD wherever GET is routed

        async def endpoint(request: Request) -> Response:
            return await serve[request.method](request)

        super().__init__(path, endpoint, methods=list(self.operations))


def routes(declared: Iterable[Operation] = OPERATIONS) -> list[Route]:
    """One route per declared path, in the order the paths are first declared."""
    by_path: dict[str, list[Operation]] = {}
    for operation in declared:
        methods = by_path.setdefault(operation.path, [])
        if any(known.method == operation.method for known in methods):
            raise ValueError(f"{operation.method.upper()} {operation.path} is declared twice")
        methods.append(operation)
    return [Declared(path, methods) for path, methods in by_path.items()]
