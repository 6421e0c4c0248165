"""GET /openapi.json: a valid OpenAPI 3.1 document of every route the app has, and of no other,
whose request bodies are the schemas of the models that validate them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate
from starlette.testclient import TestClient

from core.request import RetrieveRequest
from gateway.http.app import create_app
from gateway.http.openapi import OPERATIONS, SCHEMAS, routed
from gateway.http.routes.keys import NewKey
from gateway.settings import load_settings
from gateway.writes.envelope import ItemIn
from tests.snapshot import assert_snapshot

METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Any]]:
    """The app and the document it serves. The route needs no store: the app is not started."""
    directory: Path = tmp_path_factory.mktemp("openapi")
    app = create_app(load_settings({"data_dir": directory, "database_url": f"sqlite:///{directory / 'gateway.db'}"}, environ={}))
    response = TestClient(app).get("/openapi.json")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    return app, response.json()


def operations(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(path, method): op for path, item in document["paths"].items() for method, op in item.items() if method in METHODS}


def test_the_document_is_valid_openapi_3_1(served: tuple[Any, dict[str, Any]]) -> None:
    _, document = served
    assert document["openapi"].startswith("3.1")
    validate(document)  # raises on any violation of the OpenAPI 3.1 schema, or a $ref that does not resolve


def test_every_route_is_documented_and_nothing_else(served: tuple[Any, dict[str, Any]]) -> None:
    app, document = served
    taken = routed(app.routes)
    documented = set(operations(document))
    assert taken - documented == set(), "routes without an entry in gateway.http.openapi.OPERATIONS"
    assert documented - taken == set(), "documented operations no route takes"
    assert set(OPERATIONS) - taken == set(), "entries in OPERATIONS for routes the app does not have"
    # HEAD is answered wherever GET is routed; every other method a route takes is documented
    assert all(
        m in ("GET", "HEAD") or (r.path, m.lower()) in documented for r in app.routes for m in getattr(r, "methods", None) or ()
    )


def test_request_bodies_are_the_validating_models(served: tuple[Any, dict[str, Any]]) -> None:
    _, document = served
    components = document["components"]["schemas"]
    for model in (RetrieveRequest, ItemIn, NewKey):
        schema = model.model_json_schema(ref_template=SCHEMAS + "{model}")
        for name, definition in schema.pop("$defs", {}).items():
            assert components[name] == definition, name
        assert components[model.__name__] == schema, model.__name__
    ops = operations(document)
    body = {key: op["requestBody"]["content"] for key, op in ops.items() if "requestBody" in op}
    assert body[("/v1/retrieve", "post")]["application/json"]["schema"] == {"$ref": SCHEMAS + "RetrieveRequest"}
    assert body[("/v1/keys", "post")]["application/json"]["schema"] == {"$ref": SCHEMAS + "NewKey"}
    assert {"$ref": SCHEMAS + "ItemIn"} in body[("/v1/items", "put")]["application/json"]["schema"]["anyOf"]
    for variant in ("EntityIn", "EdgeIn"):  # ItemIn as the entity and edge endpoints take it
        assert components[variant]["properties"] == {
            **components["ItemIn"]["properties"],
            "kind": components[variant]["properties"]["kind"],
        }


def test_errors_and_limits_are_documented_on_every_authenticated_call(served: tuple[Any, dict[str, Any]]) -> None:
    _, document = served
    assert document["components"]["securitySchemes"]["bearer"] == {
        **document["components"]["securitySchemes"]["bearer"],
        "type": "http",
        "scheme": "bearer",
    }
    error = document["components"]["schemas"]["Error"]
    assert error["required"] == ["error"] and error["properties"]["error"]["required"] == ["code", "message", "trace_id"]
    authenticated = {key: op for key, op in operations(document).items() if key[0].startswith("/v1/")}
    assert len(authenticated) >= 17
    for (path, method), op in authenticated.items():
        assert op["security"] == [{"bearer": []}], (path, method)
        responses = op["responses"]
        for status in ("401", "403", "429", "503"):
            assert responses[status]["content"]["application/json"]["schema"] == {"$ref": SCHEMAS + "Error"}, (
                path,
                method,
                status,
            )
        assert responses["429"]["headers"]["Retry-After"]["required"] is True
        assert any(status.startswith("2") for status in responses), (path, method)
    for path in ("/healthz", "/readyz", "/openapi.json"):
        assert document["paths"][path]["get"]["security"] == []
    for path, item in document["paths"].items():
        if path.startswith("/audit") and "get" in item:
            assert "text/html" in item["get"]["responses"]["200"]["content"], path


def test_the_document_is_built_once(served: tuple[Any, dict[str, Any]]) -> None:
    app, document = served
    built = app.state.openapi  # kept on the app by the first request
    assert TestClient(app).get("/openapi.json").json() == document
    assert app.state.openapi is built


def test_the_document_is_served_byte_for_byte_as_committed(tmp_path: Path) -> None:
    """The document as served, bytes and all, is tests/snapshots/openapi.json: a change to the audit
    trail's types or to a route must leave the contract as it is, unless it means to change it (then
    regenerate the snapshot on purpose, as the failure says, and commit it with the change)."""
    app = create_app(load_settings({"data_dir": tmp_path, "database_url": f"sqlite:///{tmp_path / 'gateway.db'}"}, environ={}))
    response = TestClient(app).get("/openapi.json")
    assert response.status_code == 200, response.text
    assert_snapshot("openapi.json", response.content)
