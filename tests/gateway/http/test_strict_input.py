"""Input is strict at the edge: numbers are finite and inside their documented ranges, query
parameters take ASCII digits within bounds, tenant and principal names follow one documented rule
with the gateway's own names reserved, and every violation is a 400 that names the field and the
rule without echoing the value. A failure nobody foresaw is a 500 that names nothing."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from sqlmodel import Session, select

from audit.chain import NO_TENANT
from audit.review import MAX_PAGE
from core.errors import BadRequest
from core.store import writer
from core.tables import ApiKey
from core.validation import RESERVED_TENANTS, ascii_int, check_principal, check_tenant, loads_json
from gateway.auth import create_api_key
from tests.conftest import Gateway, make_gateway
from tests.gateway.cli.test_cli import TOKEN, run
from tests.gateway.fixtures import SALES_TASK, memory
from tests.gateway.http.test_audit_page import signed_in
from tests.gateway.http.test_bad_input import assert_clean_error

JWT_SECRET = "strict-input-hs256-secret-" + "z" * 40
MARKER = "qqstrictmarkerqq"


def edge(**fields: Any) -> dict[str, Any]:
    return {"from": "ent_a", "relation": "knows", "to": "ent_b", "acl": ["*"], **fields}


def entity(entity_id: str) -> dict[str, Any]:
    return {"id": entity_id, "kind": "entity", "entity_type": "contact", "name": entity_id, "acl": ["*"]}


def put_raw(gateway: Gateway, path: str, content: bytes, content_type: str = "application/json") -> Any:
    writer_key = gateway.key("writer", roles=("ingest",))
    return gateway.client.put(path, content=content, headers={**gateway.auth(writer_key), "content-type": content_type})


def stored_items(gateway: Gateway) -> int:
    from sqlalchemy import func, select

    from gateway.writes.items import item_table

    with gateway.store.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(item_table)).scalar_one())


# ---------------------------------------------------------------------------
# Numbers in bodies
# ---------------------------------------------------------------------------

# (path, body, content type, the field the message must lead with)
NON_FINITE_BODIES = [
    (
        "/v1/edges",
        b'[{"from": "ent_a", "relation": "knows", "to": "ent_b", "weight": 1e999, "acl": ["*"]}]',
        "application/json",
        "[0].weight",
    ),
    (
        "/v1/edges",
        b'[{"from": "ent_a", "relation": "knows", "to": "ent_b", "weight": -1e999, "acl": ["*"]}]',
        "application/json",
        "[0].weight",
    ),
    (
        "/v1/items",
        b'[{"id": "e1", "kind": "edge", "from": "ent_a", "relation": "r", "to": "ent_b", "acl": ["*"]},'
        b' {"id": "e2", "kind": "edge", "from": "ent_a", "relation": "r", "to": "ent_b", "confidence": NaN, "acl": ["*"]}]',
        "application/json",
        "[1].confidence",
    ),
    (
        "/v1/items",
        b'{"id": "e1", "kind": "edge", "from": "ent_a", "relation": "r", "to": "ent_b", "weight": Infinity, "acl": ["*"]}',
        "application/json",
        "[0].weight",
    ),
    (
        "/v1/edges",
        b'{"from": "ent_a", "relation": "r", "to": "ent_b", "acl": ["*"]}\n'
        b'{"from": "ent_a", "relation": "s", "to": "ent_b", "weight": 2e400, "acl": ["*"]}\n',
        "application/x-ndjson",
        "[1].weight",
    ),
    ("/v1/entities/ent_a", b'{"entity_type": "contact", "name": "A", "acl": ["*"], "value": NaN}', "application/json", "value"),
]


@pytest.mark.parametrize(
    ("path", "content", "content_type", "field"), NON_FINITE_BODIES, ids=[f"{p}-{f}" for p, _, _, f in NON_FINITE_BODIES]
)
def test_a_number_json_cannot_carry_is_a_400_naming_its_field_and_nothing_is_written(
    gateway: Gateway, path: str, content: bytes, content_type: str, field: str
) -> None:
    response = put_raw(gateway, path, content, content_type)
    message = assert_clean_error(gateway, response, 400, "bad_request")
    assert message.startswith(f"{field}: ") and "finite" in message, message
    assert "1e999" not in message and "Infinity:" not in message and "NaN:" not in message
    assert stored_items(gateway) == 0  # refused whole: the good item next to it did not land either


def test_a_streamed_line_with_a_number_json_cannot_carry_is_rejected_alone_naming_its_field(gateway: Gateway) -> None:
    """A streamed NDJSON body is written part by part, so a bad number refuses its own line (by
    index and field), never the lines before it that may already be written."""
    content = (
        b'{"id": "p0", "kind": "property", "entity": "ent_a", "name": "n", "value": 1, "acl": ["*"]}\n'
        b'{"id": "p1", "kind": "property", "entity": "ent_a", "name": "n", "value": {"x": [1, -Infinity]}, "acl": ["*"]}\n'
    )
    response = put_raw(gateway, "/v1/items", content, "application/x-ndjson")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["created"] == 1 and [r["index"] for r in body["rejected"]] == [1]
    (message,) = body["rejected"][0]["errors"]
    assert message.startswith("[1].value.x[1]: ") and "finite" in message and "Infinity:" not in message
    assert stored_items(gateway) == 1


def test_an_infinite_weight_no_longer_poisons_every_later_answer(gateway: Gateway) -> None:
    """Before: `"weight": 1e999` was stored as infinity, and every answer holding the edge was a 500."""
    gateway.ingest("acme", [entity("ent_a"), entity("ent_b")])
    refused = put_raw(
        gateway, "/v1/edges", b'[{"from": "ent_a", "relation": "works_at", "to": "ent_b", "weight": 1e999, "acl": ["*"]}]'
    )
    assert refused.status_code == 400 and "weight" in refused.json()["error"]["message"]
    accepted = put_raw(
        gateway, "/v1/edges", b'[{"from": "ent_a", "relation": "works_at", "to": "ent_b", "weight": 1e308, "acl": ["*"]}]'
    )
    assert accepted.status_code == 200 and accepted.json()["rejected"][0]["errors"][0].startswith(
        "weight:"
    )  # finite, out of range
    assert (
        put_raw(
            gateway,
            "/v1/edges",
            b'[{"from": "ent_a", "relation": "works_at", "to": "ent_b", "weight": 1000000, "confidence": 1, "acl": ["*"]}]',
        ).json()["created"]
        == 1
    )
    key = gateway.key("alice", groups=("sales",), clearance="confidential")
    response = gateway.retrieve(key, {"task": SALES_TASK, "mode": "brief", "entities": [{"id": "ent_a"}]})
    assert response.status_code == 200, response.text
    [found] = [item for item in response.json()["items"] if item["kind"] == "edge"]
    assert (found["weight"], found["confidence"]) == (1_000_000, 1)


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"weight": 1_000_000.5}, "weight"),
        ({"weight": -1_000_001}, "weight"),
        ({"weight": 10**400}, "weight"),
        ({"weight": True}, "weight"),
        ({"confidence": 1.0000001}, "confidence"),
        ({"confidence": -0.1}, "confidence"),
    ],
)
def test_out_of_range_edge_numbers_are_rejected_by_name(gateway: Gateway, fields: dict[str, Any], name: str) -> None:
    writer_key = gateway.key("writer", roles=("ingest",))
    report = gateway.client.put(
        "/v1/edges",
        json=[edge(**fields), edge(relation="fine", weight=-1_000_000, confidence=0)],
        headers=gateway.auth(writer_key),
    ).json()
    assert report["created"] == 1, report
    [rejected] = report["rejected"]
    assert rejected["index"] == 0 and rejected["errors"][0].startswith(f"{name}: "), rejected
    assert "1000000.5" not in str(rejected) and "1.0000001" not in str(rejected)


def test_non_finite_numbers_in_a_retrieve_body_are_a_400_naming_the_field(module_gateway: Gateway) -> None:
    gateway = module_gateway
    key = gateway.key("alice", groups=("sales",))
    for raw, field in [
        (b'{"task": {"type": "account_followup"}, "budget": {"bytes": NaN}}', "budget.bytes"),
        (b'{"task": {"type": "account_followup"}, "limit": 1e999}', "limit"),
        (b'{"task": {"type": "account_followup"}, "graph": {"max_depth": -Infinity}}', "graph.max_depth"),
        (b"NaN", "body"),
    ]:
        response = gateway.client.post(
            "/v1/retrieve", content=raw, headers={**gateway.auth(key), "content-type": "application/json"}
        )
        message = assert_clean_error(gateway, response, 400, "bad_request")
        assert message.startswith(f"{field}: "), message


def test_feedback_with_a_non_finite_rating_is_a_400(module_gateway: Gateway) -> None:
    gateway = module_gateway
    key = gateway.key("alice", groups=("sales",))
    trace_id = gateway.retrieve(key, {"task": SALES_TASK, "query": "anything"}).headers["x-trace-id"]
    response = gateway.client.post(
        f"/v1/traces/{trace_id}/feedback",
        content=b'{"rating": Infinity}',
        headers={**gateway.auth(key), "content-type": "application/json"},
    )
    assert assert_clean_error(gateway, response, 400, "bad_request").startswith("rating: ")


def test_loads_json_names_the_first_non_finite_number_in_document_order() -> None:
    assert loads_json(b'{"a": [1.5, 2e10, -0.0], "b": 1e308}') == {"a": [1.5, 2e10, -0.0], "b": 1e308}
    cases = {
        b'{"a": {"b": [0, 1, {"c": NaN}]}, "d": Infinity}': "a.b[2].c",
        b"[Infinity]": "[0]",
        b"-Infinity": "body",
        b'{"' + b"k" * 500 + b'": NaN}': "k" * 64,
    }
    for raw, path in cases.items():
        with pytest.raises(BadRequest) as caught:
            loads_json(raw)
        assert caught.value.message.split(": ")[0] == path
    deep = b'{"a": ' * 500 + b"NaN" + b"}" * 500  # nested as deep as the parser goes: the search for it is iterative
    with pytest.raises(BadRequest, match=r"^a(\.a){499}: "):
        loads_json(deep)


# ---------------------------------------------------------------------------
# Query parameters
# ---------------------------------------------------------------------------

BAD_LIMITS = ["²", "٣", "３", "1" * 5000, "0", str(MAX_PAGE + 1), "-1", "+5", " 5", "5 ", "0x10", "1e2", "1.0", "", "5\n"]


@pytest.mark.parametrize("limit", BAD_LIMITS, ids=[f"limit{i}" for i in range(len(BAD_LIMITS))])
def test_a_limit_that_is_not_ascii_digits_in_range_is_a_400_naming_limit(module_gateway: Gateway, limit: str) -> None:
    gateway = module_gateway
    auditor = gateway.key("auditor", roles=("auditor",))
    response = gateway.client.get("/v1/audit/traces", params={"limit": limit}, headers=gateway.auth(auditor))
    message = assert_clean_error(gateway, response, 400, "bad_request")
    assert message == f"limit: expected a whole number from 1 to {MAX_PAGE}, in ASCII digits", message


def test_a_limit_in_ascii_digits_is_taken(module_gateway: Gateway) -> None:
    gateway = module_gateway
    auditor = gateway.key("auditor", roles=("auditor",))
    for limit in ("1", "007", str(MAX_PAGE)):
        response = gateway.client.get("/v1/audit/traces", params={"limit": limit}, headers=gateway.auth(auditor))
        assert response.status_code == 200, response.text
        assert len(response.json()["traces"]) <= int(limit)


@pytest.mark.parametrize("cursor", ["c_١٢", "c_²", "c_12\n", "c_" + "1" * 19, "c_-1"])
def test_a_cursor_with_other_digits_is_refused_by_the_api_and_the_page(module_gateway: Gateway, cursor: str) -> None:
    gateway = module_gateway
    auditor = gateway.key("auditor-acme", roles=("auditor",))
    response = gateway.client.get("/v1/audit/traces", params={"cursor": cursor}, headers=gateway.auth(auditor))
    assert assert_clean_error(gateway, response, 400, "bad_request").startswith("cursor: ")
    signed_in(gateway)
    page = gateway.client.get("/audit", params={"cursor": cursor})
    assert page.status_code == 400 and "cursor:" in page.text and 'id="filters"' in page.text
    gateway.client.cookies.clear()


def test_ascii_int() -> None:
    assert ascii_int("limit", "0042", 1, 50) == 42
    for text in ("²", "٣", "1" * 19, "51", "0", "4 2", "-3"):
        with pytest.raises(BadRequest, match=r"^limit: expected a whole number from 1 to 50, in ASCII digits$"):
            ascii_int("limit", text, 1, 50)


# ---------------------------------------------------------------------------
# Tenant and principal names
# ---------------------------------------------------------------------------

GOOD_TENANTS = ["acme", "globex", "initech", "t", "tenant-a", "eu.acme_2", "0", "a" * 63]
BAD_TENANTS = [
    "-",
    "",
    "ACME",
    "Acme",
    "acme corp",
    "acme\n",
    "-acme",
    ".acme",
    "_acme",
    "a" * 64,
    "acmé",
    "ａｃｍｅ",
    "acme/x",
    "acme@x",
    "acme:x",
    "*",
]
GOOD_PRINCIPALS = [
    "user:alice",
    "user:x",
    "user:writer-acme",
    "user:Alice.Smith@acme.example",
    "user:u1",
    "user:a:b",
    "user:" + "a" * 200,
]
BAD_PRINCIPALS = [
    "alice",
    "user:",
    "user:-x",
    "user:.x",
    "user:a b",
    "user:ａ",
    "user:alice\n",
    "group:sales",
    "role:agent",
    "*",
    "user:" + "a" * 201,
    "user:a/b",
    "USER:alice",
]


def test_the_reserved_tenant_names_hold_the_unauthenticated_audit_chain() -> None:
    assert NO_TENANT in RESERVED_TENANTS


@pytest.mark.parametrize("tenant", GOOD_TENANTS)
def test_good_tenant_names_pass(tenant: str) -> None:
    assert check_tenant(tenant) == tenant


@pytest.mark.parametrize("tenant", BAD_TENANTS, ids=[f"tenant{i}" for i in range(len(BAD_TENANTS))])
def test_bad_tenant_names_are_refused_at_key_creation_naming_the_rule(sqlite_gateway: Gateway, tenant: str) -> None:
    with pytest.raises(BadRequest) as caught:
        create_api_key(sqlite_gateway.store, tenant=tenant, principal="user:x", roles=["agent"], groups=[], clearance="internal")
    message = caught.value.message
    assert message.startswith("tenant: ") and ("lower-case letters" in message or "reserved" in message), message
    assert tenant.strip() in ("", "-", "*", ".acme", "_acme", "-acme") or tenant.strip() not in message
    with Session(sqlite_gateway.store) as session:
        assert session.exec(select(ApiKey)).all() == []


@pytest.mark.parametrize("principal", GOOD_PRINCIPALS)
def test_good_principals_pass(principal: str) -> None:
    assert check_principal(principal) == principal


@pytest.mark.parametrize("principal", BAD_PRINCIPALS, ids=[f"principal{i}" for i in range(len(BAD_PRINCIPALS))])
def test_bad_principals_are_refused_at_key_creation_naming_the_rule(sqlite_gateway: Gateway, principal: str) -> None:
    with pytest.raises(BadRequest, match=r"^principal: expected user:ID, the ID 1 to 200 letters, digits and \. _ @ : -"):
        create_api_key(sqlite_gateway.store, tenant="acme", principal=principal, roles=["agent"], groups=[], clearance="internal")


def test_a_group_with_a_trailing_newline_is_refused_without_echo(sqlite_gateway: Gateway) -> None:
    with pytest.raises(BadRequest) as caught:
        create_api_key(
            sqlite_gateway.store, tenant="acme", principal="user:x", roles=["agent"], groups=[f"{MARKER}\n"], clearance="internal"
        )
    assert caught.value.message.startswith("groups: ") and MARKER not in caught.value.message


@pytest.mark.parametrize("tenant", ["-", "ACME", f"{MARKER} corp"])
def test_the_cli_refuses_a_reserved_or_malformed_tenant(tmp_path: Path, tenant: str) -> None:
    result = run("keys", "create", "--data", tmp_path / "data", "--tenant", tenant, "--principal", "user:x")
    assert result.exit_code != 0 and "tenant: " in result.output and "Traceback" not in result.output
    assert MARKER not in result.output and not TOKEN.search(result.output)


@pytest.fixture
def jwt_gateway(sqlite_url: str, tmp_path: Path) -> Any:
    yield from make_gateway(sqlite_url, tmp_path, jwt_secret=JWT_SECRET)


def token(**claims: Any) -> str:
    base = {"sub": "jwtuser", "tenant": "acme", "roles": ["agent"], "groups": ["sales"], "exp": int(time.time()) + 600}
    return jwt.encode({**base, **claims}, JWT_SECRET, algorithm="HS256")


@pytest.mark.parametrize(
    ("claims", "claim"),
    [
        ({"tenant": NO_TENANT}, "tenant"),
        ({"tenant": "ACME"}, "tenant"),
        ({"tenant": f"{MARKER} x"}, "tenant"),
        ({"tenant": "acme\n"}, "tenant"),
        ({"tenant": 7}, "tenant"),
        ({"sub": "-x"}, "sub"),
        ({"sub": f"{MARKER} y"}, "sub"),
        ({"sub": "alice\n"}, "sub"),
        ({"sub": "ａlice"}, "sub"),
    ],
    ids=["dash", "upper", "space", "newline", "number", "sub_dash", "sub_space", "sub_newline", "sub_fullwidth"],
)
def test_a_jwt_naming_a_reserved_or_malformed_tenant_or_subject_is_refused(
    jwt_gateway: Gateway, claims: dict[str, Any], claim: str
) -> None:
    response = jwt_gateway.client.post(
        "/v1/retrieve",
        json={"task": SALES_TASK, "query": "x", "sources": {"semantic": False}},
        headers={"Authorization": f"Bearer {token(**claims)}"},
    )
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert error["code"] == "unauthenticated" and f"'{claim}'" in error["message"] and MARKER not in response.text
    row = jwt_gateway.trace(response.headers["x-trace-id"])
    assert (row["tenant"], row["chain"]) == (None, NO_TENANT)  # recorded as unauthenticated, never as a tenant "-"


def test_a_good_jwt_still_passes(jwt_gateway: Gateway) -> None:
    response = jwt_gateway.client.post(
        "/v1/retrieve",
        json={"task": SALES_TASK, "query": "x", "sources": {"semantic": False}},
        headers={"Authorization": f"Bearer {token(tenant='eu.acme_2', sub='Alice.Smith@acme.example')}"},
    )
    assert response.status_code == 200, response.text


def test_a_stored_key_of_a_reserved_tenant_does_not_authenticate(sqlite_gateway: Gateway) -> None:
    """A key written behind the gateway's back (or before the rule) cannot join the unauthenticated chain."""
    gateway = sqlite_gateway
    key = gateway.key("planted")
    with Session(writer(gateway.store)) as session:
        row = session.get(ApiKey, key.split("_")[1])
        assert row is not None
        row.tenant = NO_TENANT
        session.add(row)
        session.commit()
    response = gateway.retrieve(key, {"task": SALES_TASK, "query": "x"})
    assert response.status_code == 401
    assert gateway.trace(response.headers["x-trace-id"])["tenant"] is None


def test_an_entity_id_with_a_trailing_newline_is_a_400(gateway: Gateway) -> None:
    gateway.ingest("acme", [entity("ent_a")])
    writer_key = gateway.key("writer", roles=("ingest",))
    response = gateway.client.delete("/v1/entities/ent_a%0A", headers=gateway.auth(writer_key))
    assert assert_clean_error(gateway, response, 400, "bad_request").startswith("id: ")


# ---------------------------------------------------------------------------
# 5xx names nothing
# ---------------------------------------------------------------------------


def test_an_unexpected_exception_is_a_500_with_a_generic_message_and_the_trace_id(
    sqlite_gateway: Gateway, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = sqlite_gateway
    gateway.ingest("acme", [memory("mem_x", "zebra note")])
    secret = f"{MARKER} /srv/secret/path password=hunter2"

    def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(secret)

    from gateway.http.routes import keys as key_routes

    monkeypatch.setattr(key_routes, "list_api_keys", explode)
    admin = gateway.key("admin", roles=("key_admin",))
    response = gateway.client.get("/v1/keys", headers=gateway.auth(admin))
    assert response.status_code == 500
    trace_id = response.headers["x-trace-id"]
    assert response.json() == {"error": {"code": "internal_error", "message": "internal error", "trace_id": trace_id}}
    assert MARKER not in response.text and "RuntimeError" not in response.text and "Traceback" not in response.text
    row = gateway.trace(trace_id)
    assert (row["status_code"], row["error_code"], row["decision"]) == (500, "internal_error", "error")
    assert MARKER not in str(row) and MARKER not in caplog.text  # the log has the type and place only
    assert "RuntimeError" in caplog.text
