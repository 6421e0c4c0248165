"""The contract in one place: every route is declared, every answer field that masking reads
carries a mark, and a model's wire is what its builder set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from api.retrieve import ItemSource, ResolvedEntity, RetrievedItem
from api.wire import PERSONAL_DATA, clear_fields, personal, unmarked_fields
from gateway.client.models import Item
from gateway.http.app import create_app
from gateway.http.mcp_resource import MCP_PATH
from gateway.http.openapi import OPERATIONS, document, wire_models
from gateway.http.table import Declared
from gateway.pipeline.respond import ENTITY_NOT_MASKED, ITEM_NOT_MASKED
from gateway.settings import load_settings

MASKED_ANSWERS = (RetrievedItem, ResolvedEntity, ItemSource)


def undeclared(routes: list[BaseRoute]) -> list[str]:
    """Routes served without a declaration: only the MCP transport may be one."""
    return [getattr(route, "path", "?") for route in routes if not isinstance(route, Declared) and route.path != MCP_PATH]  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Starlette:
    directory: Path = tmp_path_factory.mktemp("contract")
    return create_app(load_settings({"data_dir": directory, "database_url": f"sqlite:///{directory / 'g.db'}"}, environ={}))


def test_every_route_the_app_serves_is_declared(app: Starlette) -> None:
    assert undeclared(app.routes) == []
    assert {
        (op.path, op.method) for route in app.routes if isinstance(route, Declared) for op in route.operations.values()
    } == set(OPERATIONS)


def test_a_route_added_without_its_declaration_is_caught(app: Starlette) -> None:
    async def hidden(request: Any) -> JSONResponse:
        return JSONResponse({})

    planted = [*app.routes, Route("/v1/hidden", hidden, methods=["GET"])]
    assert undeclared(planted) == ["/v1/hidden"]
    assert "/v1/hidden" not in document(planted)["paths"]  # and the document would not name it


@pytest.mark.parametrize("model", MASKED_ANSWERS, ids=lambda m: m.__name__)
def test_every_field_masking_reads_carries_a_mark(model: type[BaseModel]) -> None:
    assert unmarked_fields(model) == []


def test_the_masking_allowlists_are_the_fields_marked_clear() -> None:
    assert ITEM_NOT_MASKED == clear_fields(RetrievedItem)
    assert ENTITY_NOT_MASKED == clear_fields(ResolvedEntity)
    # the lists these replace, kept by hand before the marks (plus numbers and booleans, never masked)
    strings = {"id", "entity", "document", "from", "to", "pieces", "citation", "kind", "status", "authority"}
    strings |= {"sensitivity", "found_by", "scope", "relation", "valid_from", "valid_to", "recorded_at", "text"}
    assert ITEM_NOT_MASKED - {"current", "confidence", "weight"} == strings
    assert ENTITY_NOT_MASKED == {"id", "kind", "status", "merged_from", "aliases"}
    assert {"section", "slot", "source"} & ITEM_NOT_MASKED == set()


def test_a_field_added_without_a_mark_is_masked_and_flagged() -> None:
    class Later(RetrievedItem):
        note: str | None = None  # a new field nobody marked

    class Marked(RetrievedItem):
        note: str | None = personal(default=None)

    assert "note" not in clear_fields(Later) and unmarked_fields(Later) == ["note"]
    assert "note" not in clear_fields(Marked) and unmarked_fields(Marked) == []


def test_the_mark_is_in_the_document(app: Starlette) -> None:
    schemas = document(app.routes)["components"]["schemas"]
    item = schemas["RetrievedItem"]["properties"]
    assert item["section"][PERSONAL_DATA] is True and item["id"][PERSONAL_DATA] is False
    assert set(schemas["RetrievedItem"]["required"]) == {"id", "kind", "citation", "text", "status", "found_by"}
    for model in wire_models():  # every model of the package is in the document, under its own name
        assert model.__name__ in schemas, model.__name__


def memory(**fields: Any) -> RetrievedItem:
    return RetrievedItem(id="m1", kind="memory", citation="M1", text="t", status="current", **fields)


def test_the_wire_is_what_the_builder_set() -> None:
    wire = memory(valid_from="2026-01-01T00:00:00Z", entity=None).wire()
    assert wire == {
        "id": "m1",
        "kind": "memory",
        "citation": "M1",
        "text": "t",
        "status": "current",
        "valid_from": "2026-01-01T00:00:00Z",
        "entity": None,
    }
    edge = RetrievedItem(id="e1", kind="edge", citation="E1", text="", status="current", from_="a", to="b", relation="r")
    assert {"from": "a", "to": "b", "relation": "r"}.items() <= edge.wire().items()
    assert "from" not in memory().wire()


def test_the_client_reads_the_same_model_and_keeps_fields_added_later() -> None:
    wire = {**memory().wire(), "added_later": {"x": 1}}
    item = Item.model_validate(wire)
    assert type(item) is RetrievedItem and item.model_extra == {"added_later": {"x": 1}}
    assert item.wire() == wire


def test_the_documented_role_is_the_one_the_handler_checks() -> None:
    roles = {key: operation.role for key, operation in OPERATIONS.items()}
    assert roles[("/v1/keys", "post")] == roles[("/v1/keys/{key_id}", "delete")] == "key_admin"
    assert roles[("/v1/audit/verify", "get")] == "auditor" and roles[("/v1/items", "put")] == "ingest"
    assert roles[("/v1/retrieve", "post")] is None and roles[("/healthz", "get")] is None
