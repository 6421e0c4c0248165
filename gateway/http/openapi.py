"""GET /openapi.json: the OpenAPI 3.1 document of the HTTP contract.

Every schema is a model's (the package `api`: requests in validation mode, answers in
serialization mode; `ProtectedResourceMetadata` is the MCP SDK's), error codes come from the error
tree (`core.errors`), and every operation is the declaration beside its handler
(`gateway.http.operation.Operation`, gathered here in `OPERATIONS`, from which `gateway.http.table`
builds the app's routes). The document is rendered from the app's own routes, so it names exactly
the operations the app serves. It is built once per app, on the first request for it; it holds no
data, so the route is unauthenticated, like /healthz.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Iterable

from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

import api.audit
import api.keys
import api.policy
import api.retrieve
import api.service
import api.writes
import gateway.http.mcp_resource as mcp_resource
import gateway.http.metrics as metrics
from api.wire import Wire
from gateway.http.audit_pages import SESSION_COOKIE
from gateway.http.audit_pages import overview as overview_pages
from gateway.http.audit_pages import views as pages
from gateway.http.operation import OPEN_OBJECT, Operation, Schema, json_answer
from gateway.http.operation import SCHEMAS as SCHEMAS  # re-exported
from gateway.http.routes import (
    audit,
    compliance,
    documents,
    entities,
    evidence,
    ingest,
    keys,
    operations,
    policy_explain,
    policy_impact,
    retrieve,
)

WIRE_MODULES = (api.retrieve, api.writes, api.audit, api.policy, api.keys, api.service)


def wire_models() -> list[type[BaseModel]]:
    """Every body model of the contract: answers (`Wire`) and requests (the others)."""
    return [
        value
        for module in WIRE_MODULES
        for _, value in inspect.getmembers(module, inspect.isclass)
        if value.__module__ == module.__name__ and issubclass(value, BaseModel)
    ]


def item_variant(base: Schema, kind: str, description: str) -> Schema:
    """`ItemIn` as one endpoint takes it: `kind` fixed (and optional), `id` optional."""
    schema = copy.deepcopy(base)
    schema["title"] = f"{kind.capitalize()}In"
    schema["description"] = description
    schema["properties"]["kind"] = {"const": kind, "default": kind}
    schema["required"] = [name for name in schema.get("required", []) if name not in ("id", "kind")]
    return schema


def model_schemas() -> dict[str, Schema]:
    """The models' schemas, each under its own name, their `$defs` beside them."""
    inputs: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (model, "serialization" if issubclass(model, Wire) else "validation") for model in wire_models()
    ]
    inputs.append((ProtectedResourceMetadata, "serialization"))
    _, defs = models_json_schema(inputs, ref_template=SCHEMAS + "{model}")
    schemas: dict[str, Schema] = dict(defs["$defs"])  # every model is among them, under its class name
    item = schemas["ItemIn"]
    schemas["EntityIn"] = item_variant(item, "entity", "An entity: `id`, when given, must be the path's; `kind` is entity")
    schemas["EdgeIn"] = item_variant(
        item,
        "edge",
        "An edge: `kind` is edge; without an `id`, `from`, `relation` and `to` are required and the id is derived from them",
    )
    return schemas


IMPLICIT_METHODS = frozenset({"HEAD"})  # Starlette answers HEAD wherever GET is routed


def routed(routes: Iterable[BaseRoute]) -> set[tuple[str, str]]:
    """Every (path, method) the routes take, methods lower-case, HEAD left out."""
    return {
        (route.path, method.lower())
        for route in routes
        if isinstance(route, Route)
        for method in (route.methods or ())
        if method not in IMPLICIT_METHODS
    }


def declared(routes: Iterable[BaseRoute]) -> list[Operation]:
    """The declarations behind the routes (`gateway.http.table.Declared`); a route without one has none."""
    return [operation for route in routes for operation in getattr(route, "operations", {}).values()]


def document(routes: Iterable[BaseRoute]) -> Schema:
    """The OpenAPI 3.1 document of the routes given: their declared operations."""
    taken = routed(routes)
    paths: dict[str, dict[str, Schema]] = {}
    for operation in declared(routes):
        path, method = operation.path, operation.method
        if (path, method) in taken:
            operation_id = method + "_" + path.strip("/").replace("/", "_").replace("{", "").replace("}", "").replace(".", "_")
            paths.setdefault(path, {})[method] = operation.render(operation_id or method)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Governed retrieval gateway",
            "version": "1",
            "description": 'A policy-first retrieval gateway. Errors are `{"error": {"code", "message", "trace_id"}}`; '
            "every /v1 answer carries `x-trace-id`, `traceparent` and `Server-Timing`. Answers are open: a later "
            "version may add fields, so a client keeps or ignores those it does not know; request bodies refuse them.",
        },
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": dict(sorted(model_schemas().items())),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key (`gw_<id>_<secret>`, from `gateway keys create`) or a JWT",
                },
                "auditSession": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": SESSION_COOKIE,
                    "description": "The audit page's session, opened by POST /audit/sign-in",
                },
            },
        },
    }


async def openapi_route(request: Request) -> JSONResponse:
    """GET /openapi.json: built once per app, from its own routes."""
    state = request.app.state
    built = getattr(state, "openapi", None)
    if built is None:
        built = state.openapi = document(request.app.routes)
    return JSONResponse(built)


# Every operation the app serves, each declared beside its handler, gathered here by (path, method):
# the route table (gateway/http/table.py) and the document above are both built from this.
DECLARED: tuple[Operation, ...] = (
    *operations.OPERATIONS,
    *metrics.OPERATIONS,
    Operation(
        "/openapi.json",
        "get",
        openapi_route,
        "This document",
        "operations",
        {"200": json_answer("The OpenAPI 3.1 document", OPEN_OBJECT, traced=False)},
        auth=None,
    ),
    *mcp_resource.OPERATIONS,
    *retrieve.OPERATIONS,
    *ingest.OPERATIONS,
    *documents.OPERATIONS,
    *entities.OPERATIONS,
    *policy_explain.OPERATIONS,
    *policy_impact.OPERATIONS,
    *keys.OPERATIONS,
    *audit.OPERATIONS,
    *compliance.OPERATIONS,
    *evidence.OPERATIONS,
    *pages.OPERATIONS,
    *overview_pages.OPERATIONS,
)
OPERATIONS: dict[tuple[str, str], Operation] = {}
for _operation in DECLARED:
    if OPERATIONS.setdefault((_operation.path, _operation.method), _operation) is not _operation:
        raise ValueError(f"{_operation.method.upper()} {_operation.path} is declared twice")
