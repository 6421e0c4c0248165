"""The route table: one Starlette route per declared path, taking the methods declared for it
(the declarations are gathered in `gateway.http.openapi.OPERATIONS`, which also renders them as the
OpenAPI document), so a route cannot be served without being documented. Only /mcp is routed
without a declaration (gateway/http/app.py): it is the MCP SDK's transport, documented in
docs/agents.md, not an HTTP operation of this contract."""

from __future__ import annotations

from collections.abc import Iterable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.http.openapi import OPERATIONS
from gateway.http.operation import Operation


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


def routes(declared: Iterable[Operation] = OPERATIONS.values()) -> list[Route]:
    """One route per declared path, in the order the paths are first declared."""
    by_path: dict[str, list[Operation]] = {}
    for operation in declared:
        by_path.setdefault(operation.path, []).append(operation)
    return [Declared(path, methods) for path, methods in by_path.items()]
