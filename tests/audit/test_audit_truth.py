"""A row tells the truth about its call: an answer that could not be rendered is a 500 in its row as
on the wire, a client that left is a 499 (not a gateway failure), and a call no route took is
recorded too. What such a call packed never counts as returned."""

from __future__ import annotations

import json
from typing import Any

import pytest

import gateway.pipeline.respond as respond_module
from audit.integrity import verify
from tests.audit.test_audit_outcomes import audit_dump
from tests.conftest import Gateway
from tests.gateway.fixtures import SALES_TASK, memory

QUERY = {"task": SALES_TASK, "query": "wombattruth"}
ITEMS = [memory("mem_truth_a", "wombattruth first note"), memory("mem_truth_b", "wombattruth second note")]


def seeded(gateway: Gateway) -> str:
    """Two items the query finds; the agent's key."""
    gateway.ingest("acme", ITEMS)
    return gateway.key("alice", groups=("sales",), clearance="confidential")


def listed_for(gateway: Gateway, item: str) -> list[str]:
    """The calls the review API says returned `item`."""
    auditor = gateway.key("auditor", roles=("auditor",))
    response = gateway.client.get("/v1/audit/traces", params={"item": item}, headers=gateway.auth(auditor))
    assert response.status_code == 200, response.text
    return [trace["trace_id"] for trace in response.json()["traces"]]


def test_an_answer_that_cannot_be_rendered_is_a_500_in_its_row_too(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    key = seeded(gateway)
    delivered = gateway.retrieve(key, QUERY)
    assert delivered.status_code == 200
    assert {item["id"] for item in delivered.json()["items"]} == {"mem_truth_a", "mem_truth_b"}
    original = respond_module.item_body

    def infinite_weight(ranked: Any, citation: str) -> dict[str, Any]:
        """An item with an edge weight of infinity, say: JSON has none, so rendering the answer fails."""
        return {**original(ranked, citation), "weight": float("inf")}

    monkeypatch.setattr(respond_module, "item_body", infinite_weight)

    response = gateway.retrieve(key, QUERY)

    assert response.status_code == 500
    error = response.json()["error"]
    assert error["code"] == "internal_error" and error["trace_id"] == response.headers["x-trace-id"]
    assert "ValueError" not in response.text and "Traceback" not in response.text
    row = gateway.trace(error["trace_id"])
    assert (row["status_code"], row["decision"], row["error_code"]) == (500, "error", "internal_error")
    assert "packed" not in row["lineage"]
    assert sorted(row["lineage"]["not_delivered"]) == ["mem_truth_a", "mem_truth_b"]
    assert listed_for(gateway, "mem_truth_a") == [delivered.json()["trace_id"]]
    assert verify(gateway.store, "acme").ok


async def drive(app: Any, scope: dict[str, Any], messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Call the ASGI app as a server would: `messages` are received in turn, then only a disconnect."""
    pending = list(messages)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def retrieve_scope(key: str, body: bytes) -> dict[str, Any]:
    """The ASGI scope a server builds for `POST /v1/retrieve` of `body` under `key`."""
    headers = [
        (b"host", b"testserver"),
        (b"authorization", f"Bearer {key}".encode()),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/retrieve",
        "raw_path": b"/v1/retrieve",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


def retrieve_then_leave(gateway: Gateway, key: str, body: bytes, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A retrieve of `body` whose client sends `messages` and then leaves: the row it left. Driven in
    the test client's event loop, where the app's lifespan runs."""
    scope = retrieve_scope(key, body)
    assert gateway.client.portal is not None
    sent = gateway.client.portal.call(drive, gateway.client.app, scope, messages)
    start = next(message for message in sent if message["type"] == "http.response.start")
    return gateway.trace(dict(start["headers"])[b"x-trace-id"].decode())


def test_a_client_that_leaves_is_499_client_closed_not_a_failure(gateway: Gateway) -> None:
    key = seeded(gateway)
    body = json.dumps({**QUERY, "sources": {"semantic": False}}).encode()

    # It leaves while its body is being read.
    row = retrieve_then_leave(gateway, key, body, [{"type": "http.request", "body": body[:10], "more_body": True}])
    assert (row["status_code"], row["error_code"], row["tenant"]) == (499, "client_closed", "acme")

    # It sends its whole body, then leaves before the answer: the call ran, nothing was delivered.
    row = retrieve_then_leave(gateway, key, body, [{"type": "http.request", "body": body, "more_body": False}])
    assert (row["status_code"], row["error_code"]) == (499, "client_closed")
    assert "packed" not in row["lineage"]
    assert sorted(row["lineage"]["not_delivered"]) == ["mem_truth_a", "mem_truth_b"]
    assert listed_for(gateway, "mem_truth_a") == []
    assert verify(gateway.store, "acme").ok


@pytest.mark.parametrize(
    ("method", "path", "status", "endpoint", "code", "allow"),
    [
        ("GET", "/v1/nope?secret=hunter2", 404, "unknown_route", "not_found", None),
        ("GET", "/v1/hunter2", 404, "unknown_route", "not_found", None),
        ("DELETE", "/v1/retrieve?secret=hunter2", 405, "method_not_allowed", "method_not_allowed", {"POST"}),
        ("POST", "/v1/entities/hunter2", 405, "method_not_allowed", "method_not_allowed", {"PUT", "DELETE"}),
    ],
)
def test_a_call_no_route_took_is_traced_without_its_path(
    gateway: Gateway, method: str, path: str, status: int, endpoint: str, code: str, allow: set[str] | None
) -> None:
    response = gateway.client.request(method, path, headers={"Authorization": "Bearer gw_hunter2"})

    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code and error["trace_id"] == response.headers["x-trace-id"]
    assert (set(response.headers["allow"].split(", ")) if "allow" in response.headers else None) == allow
    row = gateway.trace(error["trace_id"])
    assert (row["endpoint"], row["status_code"], row["decision"], row["error_code"]) == (endpoint, status, "none", code)
    assert (row["tenant"], row["actor"], row["chain"]) == (None, None, "-")
    assert row["lineage"]["route"]["method"] == method
    assert row["lineage"]["route"]["path"]["length"] > 0
    assert "hunter2" not in audit_dump(gateway.store)
    assert verify(gateway.store, "-").ok
