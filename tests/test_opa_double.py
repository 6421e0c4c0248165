"""Tests of the OPA server double itself (tests/opa_double.py)."""

import threading
import time

import httpx
import pytest

try:
    from tests.opa_double import OpaDouble, OpaDoubleError
except ImportError:  # tests/ not importable as a package: pytest put it on sys.path
    from opa_double import OpaDouble, OpaDoubleError  # type: ignore[no-redef]

POLICY = "package t\n\nx := input.a + 1\n"


@pytest.fixture
def opa():
    with OpaDouble(mode="ok") as double:
        yield double


@pytest.fixture
def client():
    with httpx.Client(timeout=10) as c:
        yield c


def put_policy(client, opa, policy_id="t", source=POLICY):
    return client.put(f"{opa.url}/v1/policies/{policy_id}", content=source)


def test_starts_on_loopback_and_is_healthy(opa, client):
    assert opa.url.startswith("http://127.0.0.1:")
    r = client.get(f"{opa.url}/health")
    assert r.status_code == 200
    assert r.json() == {}


def test_policy_put_then_decision(opa, client):
    r = put_policy(client, opa)
    assert r.status_code == 200
    assert r.json() == {}

    r = client.post(f"{opa.url}/v1/data/t/x", json={"input": {"a": 41}})
    assert r.status_code == 200
    assert r.json() == {"result": 42}


def test_undefined_document_is_empty_object(opa, client):
    put_policy(client, opa)
    # Missing input.a: the rule is undefined.
    r = client.post(f"{opa.url}/v1/data/t/x", json={"input": {}})
    assert r.status_code == 200
    assert r.json() == {}
    # A path nothing defines.
    r = client.post(f"{opa.url}/v1/data/nope/nothing", json={"input": {"a": 1}})
    assert r.status_code == 200
    assert r.json() == {}


def test_compile_error_is_400_and_keeps_old_policy(opa, client):
    put_policy(client, opa)
    r = put_policy(client, opa, source="package t\n\nx := ")
    assert r.status_code == 400
    body = r.json()
    assert body["code"] == "invalid_parameter"
    assert body["errors"][0]["code"] == "rego_parse_error"
    # A type error only shows up when compiling, not parsing.
    r = put_policy(client, opa, "u", 'package u\n\ny := input.a + "s"\n')
    assert r.status_code == 400
    assert r.json()["errors"][0]["code"] == "rego_type_error"

    r = client.post(f"{opa.url}/v1/data/t/x", json={"input": {"a": 1}})
    assert r.json() == {"result": 2}


def test_delete_policy(opa, client):
    put_policy(client, opa)
    r = client.delete(f"{opa.url}/v1/policies/t")
    assert r.status_code == 200
    assert r.json() == {}
    r = client.post(f"{opa.url}/v1/data/t/x", json={"input": {"a": 1}})
    assert r.json() == {}
    r = client.delete(f"{opa.url}/v1/policies/t")
    assert r.status_code == 404
    assert r.json()["code"] == "resource_not_found"


def test_put_data_then_read_through_policy(opa, client):
    put_policy(client, opa, "roles", "package roles\n\nallowed := input.role in data.cfg.roles\n")
    r = client.put(f"{opa.url}/v1/data/cfg", json={"roles": ["admin"]})
    assert r.status_code == 204
    assert r.content == b""
    r = client.post(f"{opa.url}/v1/data/roles/allowed", json={"input": {"role": "admin"}})
    assert r.json() == {"result": True}
    r = client.post(f"{opa.url}/v1/data/cfg/roles/0")
    assert r.json() == {"result": "admin"}


def test_provenance_uses_settable_revision(opa, client):
    put_policy(client, opa)
    opa.revision = "rev-7"
    r = client.post(f"{opa.url}/v1/data/t/x?provenance", json={"input": {"a": 1}})
    assert r.json() == {
        "result": 2,
        "provenance": {"version": "1.20.2", "bundles": {"gateway": {"revision": "rev-7"}}},
    }


def test_evaluation_error_is_500(opa, client):
    put_policy(client, opa, "c", "package c\n\nv := x if { some x in [1, 2] }\n")
    r = client.post(f"{opa.url}/v1/data/c/v", json={"input": {}})
    assert r.status_code == 500
    assert r.json()["code"] == "internal_error"
    assert r.json()["errors"][0]["code"] == "eval_conflict_error"


def test_malformed_json_is_400(opa, client):
    r = client.post(f"{opa.url}/v1/data/t/x", content=b"{not json")
    assert r.status_code == 400
    assert r.json()["code"] == "invalid_parameter"
    r = client.put(f"{opa.url}/v1/data/cfg", content=b"{not json")
    assert r.status_code == 400
    assert r.json()["code"] == "invalid_parameter"


def test_modes(opa, client):
    put_policy(client, opa)
    url = f"{opa.url}/v1/data/t/x"
    body = {"input": {"a": 1}}

    opa.mode = "error"
    r = client.post(url, json=body)
    assert r.status_code == 500
    assert r.json() == {"code": "internal_error", "message": "boom"}

    opa.mode = "garbage"
    r = client.post(url, json=body)
    assert r.status_code == 200
    assert r.content == b"not json"

    opa.mode = "undefined"
    r = client.post(url, json=body)
    assert r.status_code == 200
    assert r.json() == {}

    opa.mode = "hang"
    opa.hang_seconds = 0.3
    start = time.monotonic()
    r = client.post(url, json=body)
    assert time.monotonic() - start >= 0.3
    assert r.json() == {"result": 2}

    opa.mode = "ok"
    assert client.post(url, json=body).json() == {"result": 2}

    with pytest.raises(ValueError):
        opa.mode = "sideways"


def test_hang_times_out_client_and_close_is_prompt(client):
    opa = OpaDouble(mode="hang", hang_seconds=30)
    try:
        with pytest.raises(httpx.ReadTimeout):
            client.post(f"{opa.url}/v1/data/t/x", json={"input": {}}, timeout=0.2)
        # A request still hanging when the double closes must not delay it.
        t = threading.Thread(target=lambda: pytest.raises(httpx.HTTPError, client.post, f"{opa.url}/v1/data/t/x", json={}))
        t.start()
        time.sleep(0.2)
    finally:
        start = time.monotonic()
        opa.close()
        elapsed = time.monotonic() - start
    t.join(timeout=5)
    assert not t.is_alive()
    assert elapsed < 2


def test_requests_are_recorded(opa, client):
    put_policy(client, opa)
    client.post(f"{opa.url}/v1/data/t/x?provenance", json={"input": {"a": 1}})
    client.get(f"{opa.url}/health")
    assert opa.requests == [
        {"method": "PUT", "path": "/v1/policies/t", "query": {}, "body": POLICY},
        {
            "method": "POST",
            "path": "/v1/data/t/x",
            "query": {"provenance": ""},
            "body": {"input": {"a": 1}},
        },
        {"method": "GET", "path": "/health", "query": {}, "body": None},
    ]
    opa.clear_requests()
    assert opa.requests == []


def test_python_helpers(opa, client):
    opa.put_policy("t", POLICY)
    opa.put_data("cfg/limits", {"max": 3})
    assert client.post(f"{opa.url}/v1/data/cfg/limits/max").json() == {"result": 3}
    with pytest.raises(OpaDoubleError) as exc:
        opa.put_policy("bad", "package bad\n\nx := ")
    assert exc.value.status == 400
    opa.delete_policy("t")
    assert opa.policies == {}
    assert opa.requests_to("/v1/data/cfg/limits/max", "POST")
