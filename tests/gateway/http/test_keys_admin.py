"""Keys have a life cycle: a `key_admin` lists, creates and revokes its own tenant's keys over HTTP
(`/v1/keys`), an operator does the same from the command line (`gateway keys list|revoke`). A secret
is shown once, when its key is made, and never listed or audited; another tenant's key is the same
404 as an unknown one; a revoked key is a 401 at once and its audit-page sessions end with it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select

from core.tables import ApiKey
from gateway.auth import create_api_key, list_api_keys, revoke_api_key
from gateway.http.audit_pages import session as audit_sessions
from tests.conftest import Gateway
from tests.gateway.cli.test_cli import TOKEN, ok, run
from tests.gateway.fixtures import SALES_TASK
from tests.gateway.http.test_audit_page import auditor_key, signed_in
from tests.gateway.http.test_bad_input import assert_clean_error

LISTED = {"id", "tenant", "principal", "roles", "groups", "clearance", "created_at", "revoked_at"}
MARKER = "qqkeysmarkerqq"


def admin(gateway: Gateway, tenant: str = "acme") -> dict[str, str]:
    return gateway.auth(gateway.key(f"admin-{tenant}", tenant=tenant, roles=("key_admin",)))


def key_id(key: str) -> str:
    return key.split("_")[1]


def secret(key: str) -> str:
    return key.split("_", 2)[2]


def retrieve_status(gateway: Gateway, key: str) -> int:
    return int(gateway.retrieve(key, {"task": {"type": "research"}, "query": "anything"}).status_code)


def stored_hashes(gateway: Gateway) -> list[str]:
    with gateway.store.connect() as conn:
        return list(conn.execute(select(ApiKey.__table__.c.secret_hash)).scalars())  # type: ignore[attr-defined]


def audit_text(gateway: Gateway, trace_id: str) -> str:
    return json.dumps(gateway.trace(trace_id), default=str)


# ---------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------


def test_a_key_admin_lists_its_own_tenants_keys_without_secrets(gateway: Gateway) -> None:
    alice = gateway.key("alice", groups=("sales",), clearance="confidential")
    gateway.key("mallory", tenant="globex")
    headers = admin(gateway)
    response = gateway.client.get("/v1/keys", headers=headers)
    assert response.status_code == 200, response.text
    keys = response.json()["keys"]
    assert [k["principal"] for k in keys] == ["user:alice", "user:admin-acme"]  # oldest first; not globex's
    assert all(set(k) == LISTED for k in keys)
    listed = {k["id"]: k for k in keys}[key_id(alice)]
    assert (listed["tenant"], listed["roles"], listed["groups"], listed["clearance"], listed["revoked_at"]) == (
        "acme",
        ["agent"],
        ["sales"],
        "confidential",
        None,
    )
    assert listed["created_at"].endswith("Z")
    for key in gateway.keys.values():
        assert secret(key) not in response.text
    for hashed in stored_hashes(gateway):
        assert hashed not in response.text
    row = gateway.trace(response.headers["x-trace-id"])
    assert (row["endpoint"], row["tenant"], row["actor"], row["decision"]) == ("keys_list", "acme", "user:admin-acme", "read")
    assert row["lineage"]["keys"] == {"listed": 2}


@pytest.mark.parametrize(("method", "path"), [("GET", "/v1/keys"), ("POST", "/v1/keys"), ("DELETE", "/v1/keys/0123456789abcdef")])
def test_the_key_endpoints_need_the_key_admin_role(gateway: Gateway, method: str, path: str) -> None:
    for roles in (("agent",), ("agent", "ingest", "auditor", "policy_admin")):
        key = gateway.key("-".join(roles).replace("_", "-"), roles=roles)
        response = gateway.client.request(method, path, json={"principal": "user:x"}, headers=gateway.auth(key))
        assert assert_clean_error(gateway, response, 403, "forbidden") == "this endpoint needs the 'key_admin' role"
    assert gateway.client.request(method, path, json={"principal": "user:x"}).status_code == 401
    assert len(list_api_keys(gateway.store)) == 2


def test_a_key_admin_creates_a_key_shown_once_that_works_in_its_own_tenant(gateway: Gateway) -> None:
    response = gateway.client.post(
        "/v1/keys",
        json={"principal": "user:newbie", "roles": ["agent"], "groups": ["sales"], "clearance": "confidential"},
        headers=admin(gateway),
    )
    assert response.status_code == 201, response.text
    created = response.json()
    token = created.pop("key")
    assert TOKEN.fullmatch(token) and created["id"] == key_id(token)
    assert set(created) == LISTED
    assert (created["tenant"], created["principal"], created["roles"], created["groups"], created["revoked_at"]) == (
        "acme",
        "user:newbie",
        ["agent"],
        ["sales"],
        None,
    )
    answer = gateway.retrieve(token, {"task": SALES_TASK, "query": "anything"})
    assert answer.status_code == 200, answer.text
    assert (gateway.trace(answer.headers["x-trace-id"])["tenant"]) == "acme"
    row_text = audit_text(gateway, response.headers["x-trace-id"])
    assert secret(token) not in row_text
    assert gateway.trace(response.headers["x-trace-id"])["lineage"]["keys"] == {"created": created["id"]}
    listing = gateway.client.get("/v1/keys", headers=admin(gateway))
    assert created["id"] in listing.text and secret(token) not in listing.text
    defaults = gateway.client.post("/v1/keys", json={"principal": "user:plain"}, headers=admin(gateway)).json()
    assert (defaults["roles"], defaults["groups"], defaults["clearance"]) == (["agent"], [], "internal")


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"principal": "user:x", "tenant": "globex"}, 400, "tenant"),
        ({"principal": "user:x", "tenant": "acme"}, 400, "tenant"),
        ({"principal": f"user:{MARKER} x"}, 400, "principal"),
        ({"principal": "group:sales"}, 400, "principal"),
        ({"principal": "user:x", "roles": ["agent", f"{MARKER} role"]}, 400, "roles"),
        ({"principal": "user:x", "groups": [f"{MARKER} y"]}, 400, "groups"),
        ({"principal": "user:x", "clearance": MARKER}, 400, "clearance"),
        ({"principal": "user:x\u0000"}, 400, "body"),
        ({"principal": "user:x", "surprise": 1}, 422, "surprise"),
        ({"principal": 7}, 422, "principal"),
        ({"roles": ["agent"]}, 422, "principal"),
        ({"principal": "user:x", "roles": "agent"}, 422, "roles"),
        ([{"principal": "user:x"}], 400, "body"),
    ],
)
def test_a_bad_new_key_is_refused_by_field_without_echo_and_nothing_is_stored(
    gateway: Gateway, body: Any, status: int, field: str
) -> None:
    headers = admin(gateway)
    response = gateway.client.post("/v1/keys", json=body, headers=headers)
    message = assert_clean_error(gateway, response, status, "bad_request" if status == 400 else "invalid_request")
    assert message.startswith(f"{field}"), message
    assert MARKER not in response.text
    assert [k["principal"] for k in list_api_keys(gateway.store)] == ["user:admin-acme"]


def test_a_non_finite_number_in_a_new_key_is_a_400(gateway: Gateway) -> None:
    response = gateway.client.post(
        "/v1/keys",
        content=b'{"principal": "user:x", "roles": [NaN]}',
        headers={**admin(gateway), "content-type": "application/json"},
    )
    assert assert_clean_error(gateway, response, 400, "bad_request").startswith("roles[0]: ")


def test_revoking_a_key_makes_it_a_401_at_once(gateway: Gateway) -> None:
    alice = gateway.key("alice", groups=("sales",))
    assert retrieve_status(gateway, alice) == 200
    response = gateway.client.delete(f"/v1/keys/{key_id(alice)}", headers=admin(gateway))
    assert response.status_code == 200, response.text
    revoked = response.json()
    assert (revoked["id"], revoked["principal"], revoked["changed"], revoked["sessions_ended"]) == (
        key_id(alice),
        "user:alice",
        True,
        0,
    )
    assert revoked["revoked_at"] and secret(alice) not in response.text
    assert retrieve_status(gateway, alice) == 401
    row = gateway.trace(response.headers["x-trace-id"])
    assert (row["endpoint"], row["decision"], row["lineage"]["keys"]) == (
        "key_revoke",
        "write",
        {"revoked": key_id(alice), "changed": True, "sessions_ended": 0},
    )
    again = gateway.client.delete(f"/v1/keys/{key_id(alice)}", headers=admin(gateway))
    assert again.status_code == 200 and again.json()["changed"] is False
    assert again.json()["revoked_at"] == revoked["revoked_at"]  # the first revocation stands
    listed = {k["id"]: k for k in gateway.client.get("/v1/keys", headers=admin(gateway)).json()["keys"]}
    assert listed[key_id(alice)]["revoked_at"] == revoked["revoked_at"]


def test_another_tenants_key_is_the_same_404_as_an_unknown_one_and_stays_valid(gateway: Gateway) -> None:
    mallory = gateway.key("mallory", tenant="globex")
    headers = admin(gateway)
    theirs = gateway.client.delete(f"/v1/keys/{key_id(mallory)}", headers=headers)
    unknown = gateway.client.delete("/v1/keys/0123456789abcdef", headers=headers)
    for response in (theirs, unknown):
        assert assert_clean_error(gateway, response, 404, "not_found") == "key_id: no such key in this tenant"
    assert theirs.json()["error"]["message"] == unknown.json()["error"]["message"]
    assert key_id(mallory) not in theirs.text
    assert retrieve_status(gateway, mallory) == 200
    assert gateway.client.delete(f"/v1/keys/{key_id(mallory)}", headers=admin(gateway, "globex")).status_code == 200
    assert retrieve_status(gateway, mallory) == 401


@pytest.mark.parametrize("path_id", ["not-a-key", "0123456789ABCDEF", "0123456789abcde", "٠١٢٣٤٥٦٧٨٩abcdef", "0123456789abcdef0"])
def test_a_malformed_key_id_is_a_400_naming_key_id(gateway: Gateway, path_id: str) -> None:
    response = gateway.client.delete(f"/v1/keys/{path_id}", headers=admin(gateway))
    message = assert_clean_error(gateway, response, 400, "bad_request")
    assert message == "key_id: expected the 16 hex digits after gw_ in the key"


def test_a_key_admin_may_revoke_itself_and_is_then_a_401(gateway: Gateway) -> None:
    """Documented: nothing stops the last key_admin key from revoking itself; the CLI makes another."""
    headers = admin(gateway)
    own = key_id(gateway.keys["admin-acme"])
    assert gateway.client.delete(f"/v1/keys/{own}", headers=headers).status_code == 200
    assert gateway.client.get("/v1/keys", headers=headers).status_code == 401


def test_revoking_an_auditor_key_ends_its_audit_page_session(gateway: Gateway) -> None:
    signed_in(gateway)
    assert 'id="filters"' in gateway.client.get("/audit").text
    auditor = auditor_key(gateway)
    with gateway.store.connect() as conn:
        sessions = conn.execute(select(audit_sessions.session_table.c.key_id)).scalars().all()
    assert sessions == [key_id(auditor)]
    response = gateway.client.delete(f"/v1/keys/{key_id(auditor)}", headers=admin(gateway))
    assert response.status_code == 200 and response.json()["sessions_ended"] == 1
    with gateway.store.connect() as conn:
        assert conn.execute(select(audit_sessions.session_table)).all() == []
    page = gateway.client.get("/audit")  # the client still holds the session's cookie
    assert page.status_code == 401 and 'id="sign-in-form"' in page.text and 'id="filters"' not in page.text
    gateway.client.cookies.clear()
    assert (
        gateway.client.post(
            "/audit/sign-in", data={"key": auditor}, headers={"origin": "http://testserver"}, follow_redirects=False
        ).status_code
        == 401
    )


# ---------------------------------------------------------------------------
# The command line and the functions under it
# ---------------------------------------------------------------------------


def cli(gateway: Gateway, *args: str) -> Any:
    return run(*args, "--database-url", gateway.settings.effective_database_url)


def test_keys_list_prints_every_key_as_json_without_secrets(gateway: Gateway) -> None:
    alice = gateway.key("alice", groups=("sales",))
    mallory = gateway.key("mallory", tenant="globex", roles=("agent", "key_admin"))
    output = ok(cli(gateway, "keys", "list")).stdout
    keys = [json.loads(line) for line in output.splitlines()]
    assert [(k["tenant"], k["principal"]) for k in keys] == [("acme", "user:alice"), ("globex", "user:mallory")]
    assert all(set(k) == LISTED for k in keys)
    assert keys[1]["roles"] == ["agent", "key_admin"]
    for key in (alice, mallory):
        assert secret(key) not in output
    for hashed in stored_hashes(gateway):
        assert hashed not in output
    only = [json.loads(line) for line in ok(cli(gateway, "keys", "list", "--tenant", "globex")).stdout.splitlines()]
    assert [k["id"] for k in only] == [key_id(mallory)]


def test_keys_revoke_from_the_cli(gateway: Gateway) -> None:
    alice = gateway.key("alice", groups=("sales",))
    assert retrieve_status(gateway, alice) == 200
    refused = cli(gateway, "keys", "revoke", key_id(alice), "--tenant", "globex")
    assert refused.exit_code == 1 and "key_id: no such key in this tenant" in refused.output
    assert retrieve_status(gateway, alice) == 200
    unknown = cli(gateway, "keys", "revoke", "0123456789abcdef")
    assert unknown.exit_code == 1 and "no such key" in unknown.output
    malformed = cli(gateway, "keys", "revoke", alice)  # the whole key is not its id, and is not echoed
    assert malformed.exit_code == 1 and "key_id: " in malformed.output and secret(alice) not in malformed.output
    revoked = json.loads(ok(cli(gateway, "keys", "revoke", key_id(alice), "--tenant", "acme")).stdout)
    assert (revoked["id"], revoked["changed"]) == (key_id(alice), True) and revoked["revoked_at"]
    assert retrieve_status(gateway, alice) == 401
    listed = json.loads(ok(cli(gateway, "keys", "list")).stdout)
    assert listed["revoked_at"] == revoked["revoked_at"]


def test_the_cli_makes_a_key_admin(gateway: Gateway) -> None:
    token = ok(
        cli(gateway, "keys", "create", "--tenant", "acme", "--principal", "user:root", "--roles", "key_admin")
    ).stdout.strip()
    assert gateway.client.get("/v1/keys", headers=gateway.auth(token)).status_code == 200


def test_revoke_api_key_is_scoped_by_tenant(gateway: Gateway) -> None:
    from core.errors import NotFound

    key = create_api_key(gateway.store, tenant="acme", principal="user:f", roles=["agent"], groups=[], clearance="internal")
    with pytest.raises(NotFound):
        revoke_api_key(gateway.store, key_id(key), "globex")
    assert revoke_api_key(gateway.store, key_id(key), "acme")["changed"] is True
    assert revoke_api_key(gateway.store, key_id(key))["changed"] is False
