"""Bad input through the HTTP API: every mistake is a 4xx in the gateway's JSON error shape that names
the field, never a 500, never a traceback, never an echo of the submitted value, and always audited."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Gateway, make_gateway
from tests.gateway.fixtures import SALES_TASK, memory

DEFAULT_LIMIT = 1024 * 1024


def assert_clean_error(gateway: Gateway, response: Any, status: int, code: str) -> str:
    """The status and code asked for, the error shape, no traceback, and an audit row with that status."""
    assert response.status_code == status, response.text
    assert response.status_code != 500
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert error["code"] == code
    assert isinstance(error["message"], str) and error["message"]
    assert "Traceback" not in response.text and 'File "' not in response.text
    trace_id = response.headers["x-trace-id"]
    assert error["trace_id"] == trace_id
    row = gateway.trace(trace_id)
    assert row["status_code"] == response.status_code
    assert row["error_code"] == code
    assert row["decision"] != "allow"
    return str(error["message"])


def post_raw(gateway: Gateway, key: str, content: bytes) -> Any:
    headers = {**gateway.auth(key), "Content-Type": "application/json"}
    return gateway.client.post("/v1/retrieve", content=content, headers=headers)


def with_task(**fields: Any) -> dict[str, Any]:
    return {"task": SALES_TASK, **fields}


# The tests that only send requests share one gateway per backend (`module_gateway`; nothing they
# send is ever written but its audit row); those that write items keep a gateway of their own.

# (name, raw body, status, code, text the message must contain)
RAW_CASES = [
    ("truncated", b'{"task": {"type": "account_followup"', 400, "bad_request", "malformed JSON"),
    ("trailing_garbage", b'{"task": {"type": "account_followup"}} tail', 400, "bad_request", "malformed JSON"),
    ("single_quotes", b"{'task': {'type': 'account_followup'}}", 400, "bad_request", "malformed JSON"),
    ("not_utf8", b'\xff\xfe{"task": 1}', 400, "bad_request", "malformed JSON"),
    ("too_deeply_nested", b"[" * 100_000, 400, "bad_request", "malformed JSON"),
    (
        "integer_too_long",
        b'{"task": {"type": "account_followup"}, "budget": {"bytes": ' + b"9" * 5000 + b"}}",
        400,
        "bad_request",
        "malformed JSON",
    ),
    ("empty", b"", 400, "bad_request", "body"),
    ("whitespace", b"  \n\t ", 400, "bad_request", "body"),
    ("array", b"[]", 400, "bad_request", "JSON object"),
    ("string", b'"x"', 400, "bad_request", "JSON object"),
    ("number", b"42", 400, "bad_request", "JSON object"),
    ("null", b"null", 400, "bad_request", "JSON object"),
]

# (name, JSON body, status, code, text the message must contain)
SHAPE_CASES: list[tuple[str, Any, int, str, str]] = [
    ("task_type_number", {"task": {"type": 7}}, 422, "invalid_request", "task.type"),
    ("task_type_pattern", {"task": {"type": "no spaces allowed"}}, 422, "invalid_request", "task.type"),
    ("task_not_object", {"task": "account_followup"}, 422, "invalid_request", "task"),
    ("task_missing", {"query": "pricing"}, 422, "invalid_request", "task"),
    ("task_unknown_field", {"task": {**SALES_TASK, "colour": "blue"}}, 422, "invalid_request", "task.colour"),
    ("budget_bytes_string", with_task(budget={"bytes": "1000"}), 422, "invalid_request", "budget.bytes"),
    ("budget_bytes_bool", with_task(budget={"bytes": True}), 422, "invalid_request", "budget.bytes"),
    ("budget_bytes_too_big", with_task(budget={"bytes": 200_001}), 422, "invalid_request", "budget.bytes"),
    ("budget_bytes_zero", with_task(budget={"bytes": 0}), 422, "invalid_request", "budget.bytes"),
    ("entities_not_list", with_task(entities={"id": "ent_jane"}), 422, "invalid_request", "entities"),
    ("too_many_entities", with_task(entities=[{"id": f"ent_{i}"} for i in range(21)]), 422, "invalid_request", "entities"),
    (
        "entity_two_keys",
        with_task(entities=[{"id": "ent_jane", "email": "jane@globex.example"}]),
        422,
        "invalid_request",
        "entities.0",
    ),
    ("entity_no_key", with_task(entities=[{}]), 422, "invalid_request", "entities.0"),
    ("unknown_field", with_task(surprise=1), 422, "invalid_request", "surprise"),
    ("unknown_mode", with_task(mode="dig"), 422, "invalid_request", "mode"),
    ("unknown_depth", with_task(depth="bottomless"), 422, "invalid_request", "depth"),
    ("unknown_kind", with_task(kinds=["entity"]), 422, "invalid_request", "kinds.0"),
    ("query_not_string", with_task(query=["pricing"]), 422, "invalid_request", "query"),
    ("query_too_long", with_task(query="a" * 4001), 422, "invalid_request", "query"),
    ("too_many_fetch_ids", with_task(fetch=[f"id_{i}" for i in range(21)]), 422, "invalid_request", "fetch"),
    ("as_of_not_rfc3339", with_task(as_of="yesterday"), 422, "invalid_request", "as_of"),
    ("as_of_without_offset", with_task(as_of="2026-01-01T00:00:00"), 422, "invalid_request", "as_of"),
    ("as_of_date_only", with_task(as_of="2026-01-01"), 422, "invalid_request", "as_of"),
    ("as_of_impossible_date", with_task(as_of="2026-13-45T00:00:00Z"), 422, "invalid_request", "as_of"),
    ("as_of_number", with_task(as_of=1767225600), 422, "invalid_request", "as_of"),
    ("as_of_beyond_utc_range", with_task(as_of="9999-12-31T23:59:59-01:00"), 422, "invalid_request", "as_of"),
    ("synthesize", with_task(query="pricing", synthesize=True), 400, "bad_request", "synthes"),
    ("mode_expand_without_cursor", with_task(mode="expand"), 400, "bad_request", "cursor"),
    ("unknown_cursor", with_task(cursor="cur_unknown"), 404, "not_found", "cursor"),
    ("cursor_with_other_mode", with_task(cursor="cur_x", mode="scout"), 400, "bad_request", "cursor"),
    ("mode_fetch_without_ids", with_task(mode="fetch"), 400, "bad_request", "fetch"),
    ("mode_fetch_with_empty_ids", with_task(mode="fetch", fetch=[]), 400, "bad_request", "fetch"),
]


@pytest.mark.parametrize(("name", "content", "status", "code", "expected"), RAW_CASES, ids=[c[0] for c in RAW_CASES])
def test_unparsable_body(module_gateway: Gateway, name: str, content: bytes, status: int, code: str, expected: str) -> None:
    gateway = module_gateway
    key = gateway.key("alice", groups=("sales",))
    message = assert_clean_error(gateway, post_raw(gateway, key, content), status, code)
    assert expected in message


@pytest.mark.parametrize(("name", "body", "status", "code", "expected"), SHAPE_CASES, ids=[c[0] for c in SHAPE_CASES])
def test_wrong_shape(module_gateway: Gateway, name: str, body: Any, status: int, code: str, expected: str) -> None:
    gateway = module_gateway
    key = gateway.key("alice", groups=("sales",))
    message = assert_clean_error(gateway, gateway.retrieve(key, body), status, code)
    assert expected in message
    if code == "invalid_request":
        assert message.split(":")[0].startswith(expected.split(".")[0])  # the field leads the message


def test_a_valid_request_passes_the_same_checks(module_gateway: Gateway) -> None:
    """The control for the tables above: the well-formed request they distort is answered."""
    gateway = module_gateway
    key = gateway.key("alice", groups=("sales",))
    body = with_task(
        query="pricing",
        budget={"bytes": 200_000},
        as_of="2026-01-01T00:00:00+02:00",
        entities=[{"id": f"ent_{i}"} for i in range(20)],
        fetch=[f"id_{i}" for i in range(20)],
        mode="scout",
    )
    response = gateway.retrieve(key, body)
    assert response.status_code == 200, response.text
    assert gateway.trace(response.headers["x-trace-id"])["status_code"] == 200


def test_error_messages_never_echo_the_submitted_values(module_gateway: Gateway) -> None:
    gateway = module_gateway
    key = gateway.key("alice", groups=("sales",))
    marker = "qqsecretmarkerqq"
    bodies = [
        with_task(as_of=f"2026-01-01T{marker}"),
        with_task(as_of=marker),
        {"task": {"type": f"{marker} x"}},
        with_task(mode=marker),
        with_task(query=[marker]),
        with_task(budget={"bytes": marker}),
        with_task(entities=[{"email": marker, "id": marker}]),
        with_task(depth=marker),
        with_task(kinds=[marker]),
    ]
    for body in bodies:
        response = gateway.retrieve(key, body)
        assert_clean_error(gateway, response, 422, "invalid_request")
        assert marker not in response.text, body


def test_identity_field_beats_other_shape_errors(module_gateway: Gateway) -> None:
    gateway = module_gateway
    key = gateway.key("alice", groups=("sales",))
    message = assert_clean_error(gateway, gateway.retrieve(key, {"tenant": "globex", "task": 7}), 400, "bad_request")
    assert message.startswith("tenant:")


# ---------------------------------------------------------------------------
# Body size
# ---------------------------------------------------------------------------


def oversized(size: int) -> bytes:
    padding = "a" * size
    return json.dumps(with_task(query=padding)).encode()


def test_oversized_body_with_content_length_is_413(module_gateway: Gateway) -> None:
    gateway = module_gateway
    key = gateway.key("alice", groups=("sales",))
    response = post_raw(gateway, key, oversized(DEFAULT_LIMIT + 1))
    assert response.request.headers["content-length"] == str(len(response.request.content))
    message = assert_clean_error(gateway, response, 413, "payload_too_large")
    assert str(DEFAULT_LIMIT) in message


def test_oversized_body_streamed_without_content_length_is_413(module_gateway: Gateway) -> None:
    gateway = module_gateway
    key = gateway.key("alice", groups=("sales",))
    chunk = b"x" * 65536

    def chunks() -> Iterator[bytes]:
        for _ in range(DEFAULT_LIMIT // len(chunk) + 2):
            yield chunk

    response = gateway.client.post("/v1/retrieve", content=chunks(), headers=gateway.auth(key))
    assert "content-length" not in response.request.headers
    assert response.request.headers["transfer-encoding"] == "chunked"
    assert_clean_error(gateway, response, 413, "payload_too_large")


def test_oversized_ingest_body_is_413_and_writes_nothing(gateway: Gateway) -> None:
    writer = gateway.key("writer", roles=("ingest",))
    items = [memory(f"mem_{i}", "dingo " + "b" * 10_000) for i in range(110)]
    response = gateway.client.put("/v1/items", json=items, headers=gateway.auth(writer))
    assert_clean_error(gateway, response, 413, "payload_too_large")
    key = gateway.key("alice", groups=("sales",))
    assert gateway.retrieve(key, with_task(query="dingo")).json()["items"] == []


@pytest.fixture
def small_limit_gateway(database_url: str, tmp_path: Path) -> Iterator[Gateway]:
    yield from make_gateway(database_url, tmp_path, max_body_bytes=2048)


def test_body_limit_is_configurable(small_limit_gateway: Gateway) -> None:
    gateway = small_limit_gateway
    key = gateway.key("alice", groups=("sales",))
    three_kib = oversized(3 * 1024 - 80)
    assert 3 * 1024 - 80 < len(three_kib) <= 3 * 1024
    message = assert_clean_error(gateway, post_raw(gateway, key, three_kib), 413, "payload_too_large")
    assert "2048" in message

    def streamed() -> Iterator[bytes]:
        yield three_kib[:1500]
        yield three_kib[1500:]

    response = gateway.client.post("/v1/retrieve", content=streamed(), headers=gateway.auth(key))
    assert_clean_error(gateway, response, 413, "payload_too_large")

    one_kib = oversized(1024 - 80)
    assert len(one_kib) <= 2048
    assert post_raw(gateway, key, one_kib).status_code == 200


# ---------------------------------------------------------------------------
# Routing
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/nothing", "/", "/v2/retrieve", "/v1/retrieve/extra"])
def test_unknown_route_is_404_json(module_sqlite_gateway: Gateway, path: str) -> None:
    response = module_sqlite_gateway.client.get(path)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["error"]["code"] == "not_found"
    assert "Traceback" not in response.text


@pytest.mark.parametrize(
    ("method", "path"),
    [("get", "/v1/retrieve"), ("delete", "/v1/retrieve"), ("post", "/v1/items"), ("get", "/v1/items"), ("post", "/healthz")],
)
def test_wrong_method_is_405_json(module_sqlite_gateway: Gateway, method: str, path: str) -> None:
    response = module_sqlite_gateway.client.request(method.upper(), path)
    assert response.status_code == 405
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == "method_not_allowed" and error["message"]
    assert "Traceback" not in response.text


def test_far_off_instants_are_refused_where_they_enter(gateway: Gateway) -> None:
    """Rego's time built-ins end in 2262: a 9999 sentinel is refused at ingest and in as_of, so it
    can never reach the policy and turn every later answer into a 503."""
    writer = gateway.key("w", roles=("ingest",))
    response = gateway.client.put(
        "/v1/items",
        json=[
            {"id": "forever", "kind": "memory", "text": "forever note", "acl": ["*"], "valid_to": "9999-12-31T23:59:59Z"},
            {"id": "open", "kind": "memory", "text": "open ended note", "acl": ["*"]},
        ],
        headers=gateway.auth(writer),
    )
    body = response.json()
    assert body["created"] == 1 and [r["id"] for r in body["rejected"]] == ["forever"]
    assert "valid_to" in body["rejected"][0]["errors"][0]
    agent = gateway.key("a")
    far = gateway.retrieve(agent, {"task": {"type": "research"}, "query": "note", "as_of": "0001-01-01T00:00:00Z"})
    assert far.status_code == 422 and "as_of" in far.json()["error"]["message"]


def test_nul_characters_are_refused_on_every_backend(gateway: Gateway) -> None:
    agent = gateway.key("a")
    response = gateway.retrieve(agent, {"task": {"type": "research"}, "entities": [{"email": "a\u0000@b.example"}]})
    assert response.status_code == 400 and "NUL" in response.json()["error"]["message"]
    writer = gateway.key("w", roles=("ingest",))
    written = gateway.client.put(
        "/v1/items",
        json=[
            {"id": "nul", "kind": "memory", "text": "bad\u0000text", "acl": ["*"]},
            {"id": "fine", "kind": "memory", "text": "fine text", "acl": ["*"]},
        ],
        headers=gateway.auth(writer),
    ).json()
    assert written["created"] == 1 and [r["id"] for r in written["rejected"]] == ["nul"]


def test_a_single_pretty_printed_item_is_one_item(sqlite_gateway: Gateway) -> None:
    writer = sqlite_gateway.key("w", roles=("ingest",))
    body = '{\n  "id": "one",\n  "kind": "memory",\n  "text": "one note",\n  "acl": ["*"]\n}\n'
    response = sqlite_gateway.client.put("/v1/items", content=body, headers=sqlite_gateway.auth(writer))
    assert response.json() == {"created": 1, "updated": 0, "unchanged": 0, "rejected": []}
