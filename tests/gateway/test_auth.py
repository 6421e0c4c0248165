"""Authentication through the HTTP API: the actor comes from an API key or a signed JWT, never the body.

Every rejected credential is a 401 with the gateway's JSON error shape, leaves an audit row, and
says nothing about which part of a credential was wrong.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from sqlmodel import Session, select

from core.instants import utc_now
from core.store import writer
from core.tables import ApiKey
from tests.conftest import Gateway, LiveGateway, make_gateway, open_gateway
from tests.gateway.fixtures import SALES_TASK, memory

JWT_SECRET = "test-hs256-secret-" + "x" * 46  # 64 bytes: PyJWT warns (an error here) on short HMAC keys
SALES_ONLY = memory("mem_sales_only", "narwhalgroup sales group note", acl=["group:sales"])
EVERYONE = memory("mem_everyone", "narwhalall note for everyone")


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def claims(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "sub": "jwtuser",
        "tenant": "acme",
        "roles": ["agent"],
        "groups": ["sales"],
        "clearance": "internal",
        "exp": int(time.time()) + 600,
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned_token(header: dict[str, Any], payload: dict[str, Any], signature: bytes = b"") -> str:
    return f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(payload).encode())}.{b64url(signature)}"


def retrieve_with(gateway: Gateway, authorization: str | None, body: dict[str, Any] | None = None) -> Any:
    headers = {} if authorization is None else {"Authorization": authorization}
    body = {**(body or {"task": SALES_TASK, "query": "narwhalgroup"}), "sources": {"semantic": False}}
    return gateway.client.post("/v1/retrieve", json=body, headers=headers)


def assert_unauthenticated(gateway: Gateway, response: Any) -> str:
    """A 401 in the gateway's error shape, with an audit row of its own; returns the message."""
    assert response.status_code == 401, response.text
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert error["code"] == "unauthenticated"
    assert isinstance(error["message"], str) and error["message"]
    trace_id = response.headers["x-trace-id"]
    assert error["trace_id"] == trace_id
    assert "Traceback" not in response.text
    row = gateway.trace(trace_id)
    assert row["status_code"] == 401
    assert row["error_code"] == "unauthenticated"
    assert row["decision"] != "allow"
    assert row["actor"] is None and row["tenant"] is None
    assert "decision" not in row["lineage"]  # the policy was never asked
    return str(error["message"])


def found_ids(response: Any) -> list[str]:
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


@pytest.fixture(scope="module")
def shared_gateway(module_gateway: Gateway) -> Gateway:
    """SALES_ONLY loaded once per backend, for the tests that only send requests. Tests that revoke a
    key or count keys write what others would see, and keep a gateway of their own."""
    module_gateway.ingest("acme", [SALES_ONLY])
    return module_gateway


# ---------------------------------------------------------------------------
# API keys
# ---------------------------------------------------------------------------


def test_missing_authorization_is_401_with_json_error(shared_gateway: Gateway) -> None:
    gateway = shared_gateway
    response = retrieve_with(gateway, None)
    message = assert_unauthenticated(gateway, response)
    assert "Authorization" in message


@pytest.mark.parametrize(("method", "path"), [("post", "/v1/retrieve"), ("put", "/v1/items"), ("get", "/v1/policy")])
def test_every_v1_endpoint_needs_a_credential(shared_gateway: Gateway, method: str, path: str) -> None:
    gateway = shared_gateway
    response = getattr(gateway.client, method)(path)
    assert_unauthenticated(gateway, response)


@pytest.mark.parametrize("scheme", ["Basic", "Token", "bearer-ish", "Digest"])
def test_wrong_scheme_is_401(shared_gateway: Gateway, scheme: str) -> None:
    gateway = shared_gateway
    key = gateway.key("alice", groups=("sales",))
    message = assert_unauthenticated(gateway, retrieve_with(gateway, f"{scheme} {key}"))
    assert "Bearer" in message


@pytest.mark.parametrize("authorization", ["Bearer", "Bearer ", "Bearer    ", "Bearertoken"])
def test_bearer_without_a_token_is_401(shared_gateway: Gateway, authorization: str) -> None:
    gateway = shared_gateway
    assert_unauthenticated(gateway, retrieve_with(gateway, authorization))


def test_lowercase_bearer_scheme_is_accepted(shared_gateway: Gateway) -> None:
    gateway = shared_gateway
    key = gateway.key("alice", groups=("sales",))
    response = retrieve_with(gateway, f"bearer {key}")
    assert found_ids(response) == ["mem_sales_only"]


@pytest.mark.parametrize(
    "token",
    [
        "gw_",
        "gw_nothex0123456789_" + "a" * 40,
        "gw_0123456789abcdef_short",
        "gw_0123456789abcdef_" + "a" * 101,
        "gw_0123456789abcdef_" + "a" * 30 + "!",
        "gw_0123456789ABCDEF_" + "a" * 40,
        "not-a-key-at-all",
        "a.b",
    ],
)
def test_malformed_key_is_401(shared_gateway: Gateway, token: str) -> None:
    gateway = shared_gateway
    assert_unauthenticated(gateway, retrieve_with(gateway, f"Bearer {token}"))


def test_unknown_key_id_wrong_secret_and_revoked_key_read_the_same(gateway: Gateway) -> None:
    gateway.ingest("acme", [SALES_ONLY])
    key = gateway.key("alice", groups=("sales",))
    assert found_ids(retrieve_with(gateway, f"Bearer {key}")) == ["mem_sales_only"]
    _, key_id, secret = key.split("_", 2)
    other_secret = ("A" if secret[0] != "A" else "B") + secret[1:]
    unknown_id = "0123456789abcdef" if key_id != "0123456789abcdef" else "fedcba9876543210"

    unknown = assert_unauthenticated(gateway, retrieve_with(gateway, f"Bearer gw_{unknown_id}_{secret}"))
    wrong_secret = assert_unauthenticated(gateway, retrieve_with(gateway, f"Bearer gw_{key_id}_{other_secret}"))

    with Session(writer(gateway.store)) as session:  # read then write: take the write lock up front
        row = session.get(ApiKey, key_id)
        assert row is not None
        row.revoked_at = utc_now()
        session.add(row)
        session.commit()
    revoked_response = retrieve_with(gateway, f"Bearer {key}")
    revoked = assert_unauthenticated(gateway, revoked_response)
    assert "narwhalgroup" not in revoked_response.text and "mem_sales_only" not in revoked_response.text

    assert unknown == wrong_secret == revoked  # nothing tells a prober which part was wrong
    for word in ("secret", "revoked", "unknown", "id", key_id):
        assert word not in unknown.lower().split()
    assert key_id not in unknown and secret not in unknown


def test_revocation_is_per_key(gateway: Gateway) -> None:
    gateway.ingest("acme", [SALES_ONLY])
    alice = gateway.key("alice", groups=("sales",))
    carol = gateway.key("carol", groups=("sales",))
    with Session(writer(gateway.store)) as session:  # read then write: take the write lock up front
        row = session.get(ApiKey, alice.split("_", 2)[1])
        assert row is not None
        row.revoked_at = utc_now() - timedelta(seconds=1)
        session.add(row)
        session.commit()
    assert_unauthenticated(gateway, retrieve_with(gateway, f"Bearer {alice}"))
    assert found_ids(retrieve_with(gateway, f"Bearer {carol}")) == ["mem_sales_only"]


def test_only_the_keys_hash_is_stored(gateway: Gateway) -> None:
    keys = [gateway.key("alice", groups=("sales",)), gateway.key("writer", roles=("ingest",))]
    with Session(gateway.store) as session:
        rows = session.exec(select(ApiKey)).all()
    assert len(rows) == 2
    stored = json.dumps([row.model_dump() for row in rows], default=str)
    for key in keys:
        _, key_id, secret = key.split("_", 2)
        assert key not in stored
        assert secret not in stored
        assert key_id in stored  # the id is the lookup handle, so it is kept
        (row,) = [r for r in rows if r.key_id == key_id]
        assert row.secret_hash != secret
        assert row.secret_hash == hashlib.sha256(secret.encode()).hexdigest()


def test_key_actor_is_the_one_recorded_in_the_audit_row(shared_gateway: Gateway) -> None:
    gateway = shared_gateway
    key = gateway.key("alice", groups=("sales",))
    response = retrieve_with(gateway, f"Bearer {key}")
    assert response.status_code == 200
    row = gateway.trace(response.headers["x-trace-id"])
    assert (row["tenant"], row["actor"]) == ("acme", "user:alice")


# ---------------------------------------------------------------------------
# Identity in the body
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tenant", "globex"),
        ("actor", "user:root"),
        ("as_actor", "user:ceo"),
        ("principal", "user:ceo"),
        ("user", "ceo"),
        ("actor", {"id": "root", "roles": ["policy_admin"]}),
    ],
)
def test_identity_in_the_body_is_refused_and_never_evaluated(shared_gateway: Gateway, field: str, value: Any) -> None:
    gateway = shared_gateway
    key = gateway.key("alice", groups=("sales",))
    response = gateway.retrieve(key, {"task": SALES_TASK, "query": "narwhalgroup", field: value})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "bad_request"
    assert error["message"].startswith(f"{field}:")
    assert "mem_sales_only" not in response.text
    row = gateway.trace(response.headers["x-trace-id"])
    assert row["status_code"] == 400
    assert row["decision"] != "allow"
    assert "decision" not in row["lineage"] and "packed" not in row["lineage"]
    assert (row["tenant"], row["actor"]) == ("acme", "user:alice")  # who asked comes from the key


# ---------------------------------------------------------------------------
# JWT
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jwt_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """An HS256 gateway shared by this module's JWT tests, which only read: SALES_ONLY and EVERYONE
    are loaded once (no test's query matches the other's note)."""
    directory = tmp_path_factory.mktemp("jwt")
    with open_gateway(f"sqlite:///{directory / 'gateway.db'}", directory, jwt_secret=JWT_SECRET) as gateway:
        gateway.ingest("acme", [SALES_ONLY, EVERYONE])
        yield gateway


@pytest.fixture(scope="module")
def rsa_pair() -> tuple[rsa.RSAPrivateKey, str]:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public_pem = (
        private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    )
    return private, public_pem


@pytest.fixture(scope="module")
def rs256_gateway(tmp_path_factory: pytest.TempPathFactory, rsa_pair: tuple[rsa.RSAPrivateKey, str]) -> Iterator[Gateway]:
    """An RS256 gateway shared by this module's RS256 tests, which only read: SALES_ONLY loaded once."""
    directory = tmp_path_factory.mktemp("rs256")
    with open_gateway(f"sqlite:///{directory / 'gateway.db'}", directory, jwt_public_key=rsa_pair[1]) as gateway:
        gateway.ingest("acme", [SALES_ONLY])
        yield gateway


def hs256(payload: dict[str, Any], secret: str = JWT_SECRET) -> str:
    return jwt.encode(payload, secret, algorithm="HS256")


def test_hs256_jwt_actor_comes_from_its_claims(jwt_gateway: Gateway) -> None:
    in_sales = retrieve_with(jwt_gateway, f"Bearer {hs256(claims())}", {"task": SALES_TASK, "query": "narwhalgroup"})
    assert found_ids(in_sales) == ["mem_sales_only"]
    row = jwt_gateway.trace(in_sales.headers["x-trace-id"])
    assert (row["tenant"], row["actor"], row["decision"]) == ("acme", "user:jwtuser", "allow")

    # Without the sales group the task is not granted at all; a policy admin is granted it, and
    # still sees only what the item ACLs give it.
    no_group = retrieve_with(jwt_gateway, f"Bearer {hs256(claims(groups=[]))}", {"task": SALES_TASK, "query": "narwhalgroup"})
    assert no_group.status_code == 403 and no_group.json()["error"]["reasons"] == ["task_not_granted"]
    admin = claims(groups=[], roles=["agent", "policy_admin"])
    no_group = retrieve_with(jwt_gateway, f"Bearer {hs256(admin)}", {"task": SALES_TASK, "query": "narwhalgroup"})
    assert found_ids(no_group) == []
    both = retrieve_with(jwt_gateway, f"Bearer {hs256(admin)}", {"task": SALES_TASK, "query": "narwhalall"})
    assert found_ids(both) == ["mem_everyone"]  # the same actor does get through: it is the group that differs


def test_jwt_tenant_claim_chooses_the_tenant(jwt_gateway: Gateway) -> None:
    globex = retrieve_with(jwt_gateway, f"Bearer {hs256(claims(tenant='globex'))}")
    assert found_ids(globex) == []
    assert jwt_gateway.trace(globex.headers["x-trace-id"])["tenant"] == "globex"


def test_jwt_roles_claim_is_what_the_policy_sees(jwt_gateway: Gateway) -> None:
    response = retrieve_with(jwt_gateway, f"Bearer {hs256(claims(roles=['ingest']))}")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "policy_denied"
    assert jwt_gateway.trace(response.headers["x-trace-id"])["decision"] == "deny"


def test_api_keys_still_work_when_jwt_is_enabled(jwt_gateway: Gateway) -> None:
    key = jwt_gateway.key("alice", groups=("sales",))
    assert found_ids(jwt_gateway.retrieve(key, {"task": SALES_TASK, "query": "narwhalgroup"})) == ["mem_sales_only"]


def test_rs256_jwt_with_public_key(rs256_gateway: Gateway, rsa_pair: tuple[rsa.RSAPrivateKey, str]) -> None:
    token = jwt.encode(claims(sub="rsuser"), rsa_pair[0], algorithm="RS256")
    response = retrieve_with(rs256_gateway, f"Bearer {token}")
    assert found_ids(response) == ["mem_sales_only"]
    assert rs256_gateway.trace(response.headers["x-trace-id"])["actor"] == "user:rsuser"


def test_rs256_token_signed_by_another_key_is_401(rs256_gateway: Gateway) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = jwt.encode(claims(), stranger, algorithm="RS256")
    assert "InvalidSignature" in assert_unauthenticated(rs256_gateway, retrieve_with(rs256_gateway, f"Bearer {token}"))


def test_rs256_gateway_refuses_hs256_signed_with_its_public_key(
    rs256_gateway: Gateway, rsa_pair: tuple[rsa.RSAPrivateKey, str]
) -> None:
    """The algorithm-confusion attack: an HMAC over the token keyed with the (public) PEM."""
    header, payload = {"alg": "HS256", "typ": "JWT"}, claims()
    signing_input = unsigned_token(header, payload).rsplit(".", 1)[0]
    signature = hmac.new(rsa_pair[1].encode(), signing_input.encode(), hashlib.sha256).digest()
    token = f"{signing_input}.{b64url(signature)}"
    assert_unauthenticated(rs256_gateway, retrieve_with(rs256_gateway, f"Bearer {token}"))


def test_rs256_gateway_refuses_hs256_tokens(rs256_gateway: Gateway) -> None:
    assert_unauthenticated(rs256_gateway, retrieve_with(rs256_gateway, f"Bearer {hs256(claims())}"))


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("expired", "ExpiredSignature"),
        ("wrong_signature", "InvalidSignature"),
        ("missing_tenant", "tenant"),
        ("missing_sub", "MissingRequiredClaim"),
        ("missing_exp", "MissingRequiredClaim"),
        ("not_yet_valid", "ImmatureSignature"),
        ("bad_sub", "sub"),
        ("bad_clearance", "clearance"),
        ("groups_not_a_list", "groups"),
        ("alg_none", "InvalidAlgorithm"),
        ("alg_none_signed", "InvalidAlgorithm"),
        ("garbage", "DecodeError"),
    ],
)
def test_bad_jwt_is_401(jwt_gateway: Gateway, case: str, expected: str) -> None:
    now = int(time.time())
    token = {
        "expired": lambda: hs256(claims(exp=now - 60)),
        "wrong_signature": lambda: hs256(claims(), secret="another-secret-" + "y" * 49),
        "missing_tenant": lambda: hs256(claims(tenant=None)),
        "missing_sub": lambda: hs256(claims(sub=None)),
        "missing_exp": lambda: hs256(claims(exp=None)),
        "not_yet_valid": lambda: hs256(claims(nbf=now + 600)),
        "bad_sub": lambda: hs256(claims(sub="user name with spaces")),
        "bad_clearance": lambda: hs256(claims(clearance="top_secret")),
        "groups_not_a_list": lambda: hs256(claims(groups="sales")),
        "alg_none": lambda: unsigned_token({"alg": "none", "typ": "JWT"}, claims()),
        "alg_none_signed": lambda: unsigned_token({"alg": "none", "typ": "JWT"}, claims(), b"sig"),
        "garbage": lambda: "eyJ!!!.eyJ???.abc",
    }[case]()
    response = retrieve_with(jwt_gateway, f"Bearer {token}")
    message = assert_unauthenticated(jwt_gateway, response)
    assert expected in message
    assert "mem_sales_only" not in response.text
    assert JWT_SECRET not in message


def test_jwt_audience_and_issuer_are_enforced_when_configured(sqlite_url: str, tmp_path: Path) -> None:
    for gateway in make_gateway(sqlite_url, tmp_path, jwt_secret=JWT_SECRET, jwt_audience="gateway", jwt_issuer="idp"):
        good = hs256(claims(aud="gateway", iss="idp"))
        assert retrieve_with(gateway, f"Bearer {good}").status_code == 200
        for bad in (claims(iss="idp"), claims(aud="other", iss="idp"), claims(aud="gateway"), claims(aud="gateway", iss="evil")):
            assert_unauthenticated(gateway, retrieve_with(gateway, f"Bearer {hs256(bad)}"))


def test_jwt_is_refused_when_jwt_is_not_configured(shared_gateway: Gateway) -> None:
    gateway = shared_gateway
    response = retrieve_with(gateway, f"Bearer {hs256(claims())}")
    message = assert_unauthenticated(gateway, response)
    assert "JWT" in message and "not enabled" in message
    assert "mem_sales_only" not in response.text


def test_a_short_hs256_secret_is_refused_at_start() -> None:
    from core.errors import ConfigurationError
    from gateway.settings import load_settings

    with pytest.raises(ConfigurationError, match="32 bytes"):
        load_settings({"jwt_secret": "short"}, environ={})


def test_the_key_lookup_runs_off_the_event_loop(live_gateway: LiveGateway, monkeypatch: pytest.MonkeyPatch) -> None:
    """A credential read that waits on the store (a slow PostgreSQL round trip) holds only its own
    call: here the lookup waits until /healthz has answered, which it could not if the lookup ran on
    the event loop. The key is still read afresh: revoking it refuses the next call."""
    import threading

    import httpx

    gateway = live_gateway.gateway
    key = gateway.key("alice", groups=("sales",))
    authenticator = gateway.client.app.state.context.authenticator  # type: ignore[attr-defined]
    answered = threading.Event()
    real = authenticator._live_key

    def slow(key_id: str) -> Any:
        assert answered.wait(timeout=10), "/healthz never answered while a key was being looked up"
        return real(key_id)

    monkeypatch.setattr(authenticator, "_live_key", slow)
    result: dict[str, int] = {}

    def call() -> None:
        result["status"] = httpx.get(f"{live_gateway.url}/v1/policy", headers=gateway.auth(key), timeout=20).status_code

    caller = threading.Thread(target=call)
    caller.start()
    time.sleep(0.2)  # the call is inside its lookup by now (and waits there for /healthz)
    assert httpx.get(f"{live_gateway.url}/healthz", timeout=5).status_code == 200
    answered.set()
    caller.join(timeout=20)
    assert result == {"status": 200}

    monkeypatch.setattr(authenticator, "_live_key", real)
    key_id = key.split("_")[1]
    with Session(gateway.store) as session:
        row = session.exec(select(ApiKey).where(ApiKey.key_id == key_id)).one()
        row.revoked_at = utc_now()
        session.add(row)
        session.commit()
    assert httpx.get(f"{live_gateway.url}/v1/policy", headers=gateway.auth(key), timeout=5).status_code == 401
