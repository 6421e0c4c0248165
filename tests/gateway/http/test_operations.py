"""Health, readiness and the loaded policy, on SQLite and PostgreSQL; readiness really fails when the store
really goes away."""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from starlette.testclient import TestClient

from audit.store import AuditStore
from connectors.sql import text_index
from connectors.sql.exact import SqlExactConnector
from connectors.sql.lexical import FullTextConnector
from gateway.auth import Authenticator
from gateway.context import build_semantic
from gateway.pipeline.pipeline import Connectors
from tests.conftest import Gateway, open_gateway
from tests.connectors.test_text_index import index_threads, slow_adds, wait_for
from tests.gateway.fixtures import SALES_TASK

CLOSED_PORT_URL = "postgresql+psycopg://postgres@127.0.0.1:1/x"


@contextmanager
def store_gone(gateway: Gateway) -> Iterator[None]:
    """Make the store unreachable for real: the SQLite file becomes a directory, or PostgreSQL is a closed port."""
    engine = gateway.store
    if engine.dialect.name == "sqlite":
        database = Path(str(engine.url.database))
        engine.dispose()  # no pooled connection keeps the old file open
        for path in database.parent.glob(database.name + "*"):
            path.unlink()
        database.mkdir()
        yield
        shutil.rmtree(database)
        return
    app = gateway.client.app
    original = app.state.context  # type: ignore[attr-defined]
    dead = create_engine(CLOSED_PORT_URL, connect_args={"connect_timeout": 2})
    # Everything that holds the engine gets the dead one, as build_context would wire it.
    app.state.context = dataclasses.replace(  # type: ignore[attr-defined]
        original,
        store=dead,
        authenticator=Authenticator(dead, original.settings),
        connectors=Connectors(
            exact=SqlExactConnector(dead), lexical=FullTextConnector(dead), semantic=build_semantic(original.settings, dead)
        ),
        audit=AuditStore(dead),
    )
    try:
        yield
    finally:
        app.state.context = original  # type: ignore[attr-defined]
        dead.dispose()


def test_healthz(gateway: Gateway) -> None:
    response = gateway.client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_when_ready(gateway: Gateway) -> None:
    response = gateway.client.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ready" and body["checks"] == {"policy": "ok", "store": "ok", "admission": "ok"}
    assert body["admission"]["saturated"] is False
    assert body["lexical"]["engine"] == "tantivy" and body["lexical"]["tenants_building"] == 0  # `auto`, on either store


def test_readyz_says_when_a_large_tenants_lexical_index_is_built(gateway: Gateway) -> None:
    """The index builds on a thread (the store's own engine answers meanwhile); readiness counts it
    building, then ready."""
    lexical = gateway.client.app.state.context.connectors.lexical  # type: ignore[attr-defined]
    lexical.text.build_now_max = 5
    gateway.ingest("acme", [{"id": f"n{i}", "kind": "memory", "text": f"walrus {i}", "acl": ["*"]} for i in range(40)])
    with gateway.store.connect() as conn:
        assert lexical.text.state(conn, "acme") is None  # started on its thread
    deadline = time.monotonic() + 30
    while gateway.client.get("/readyz").json()["lexical"]["tenants_building"] and time.monotonic() < deadline:
        time.sleep(0.05)
    body = gateway.client.get("/readyz").json()
    assert body["status"] == "ready" and body["lexical"] == {"engine": "tantivy", "tenants_ready": 1, "tenants_building": 0}
    # Unauthenticated (a probe's): counts only, never a tenant's name, an item or a word of its text.
    assert "acme" not in json.dumps(body) and "walrus" not in json.dumps(body)


def test_shutdown_stops_the_lexical_indexes_threads(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A large tenant's build, on the index's own thread, stops when the service does, before its
    store is closed (gateway/http/app.py `close_indexes`)."""
    monkeypatch.setattr(text_index, "READ_CHUNK", 5)
    added = slow_adds(monkeypatch, 0.1)  # 40 items: ~4 s of building
    before = set(threading.enumerate())
    with open_gateway(database_url, tmp_path, background_embedding=False, pii_background=False) as gateway:
        lexical = gateway.client.app.state.context.connectors.lexical  # type: ignore[attr-defined]
        lexical.text.build_now_max = 5
        gateway.ingest("acme", [{"id": f"n{i}", "kind": "memory", "text": f"walrus {i}", "acl": ["*"]} for i in range(40)])
        with gateway.store.connect() as conn:
            assert lexical.text.state(conn, "acme") is None  # building on its thread
        wait_for(lambda: len(added) >= 5)
        assert "text-index-build" in index_threads(before)
    assert index_threads(before) == []
    assert len(added) < 40  # stopped, not built to the end


def test_the_serving_process_runs_numpys_products_on_one_blas_thread(tmp_path: Path) -> None:
    """`gateway serve` (create_app with freeze) limits OpenBLAS to one thread: a request's products
    are small, and a second BLAS thread on a busy machine waits for a core (gateway/http/app.py)."""
    import gc

    from threadpoolctl import threadpool_info, threadpool_limits

    from gateway.http.app import create_app
    from gateway.settings import load_settings

    def blas_threads() -> set[int]:
        return {int(pool["num_threads"]) for pool in threadpool_info() if pool["user_api"] == "blas"}

    original = blas_threads()
    assert original, "numpy's BLAS is not loaded"
    settings = load_settings(
        {"data_dir": tmp_path / "data", "database_url": f"sqlite:///{tmp_path / 'gateway.db'}", "pii_background": False},
        environ={},
    )
    try:
        with TestClient(create_app(settings, freeze=True), raise_server_exceptions=False) as client:
            assert client.get("/healthz").status_code == 200
            assert blas_threads() == {1}
    finally:
        gc.unfreeze()
        threadpool_limits(max(original), user_api="blas")


def test_readyz_is_503_naming_the_store_when_it_is_unreachable(gateway: Gateway) -> None:
    assert gateway.client.get("/readyz").status_code == 200
    with store_gone(gateway):
        response = gateway.client.get("/readyz")
        assert response.status_code == 503
        body = response.json()
        assert body["status"] == "not ready"
        assert body["checks"] == {"policy": "ok", "store": "unreachable", "admission": "ok"}
        assert gateway.client.get("/healthz").status_code == 200  # alive, just not ready


def test_no_answer_without_a_store(gateway: Gateway) -> None:
    """No credential check and no audit record are possible, so the call is a 503, never an answer or a 500."""
    key = gateway.key("alice", groups=("sales",))
    assert gateway.retrieve(key, {"task": SALES_TASK, "query": "pricing"}).status_code == 200
    with store_gone(gateway):
        response = gateway.retrieve(key, {"task": SALES_TASK, "query": "pricing"})
        assert response.status_code == 503, response.text
        error = response.json()["error"]
        assert error["code"] == "audit_unavailable"  # no record, no answer
        assert error["trace_id"] == response.headers["x-trace-id"]
        assert "items" not in response.json()
        assert "Traceback" not in response.text


def test_policy_endpoint_reports_the_loaded_policy(gateway: Gateway) -> None:
    key = gateway.key("alice", groups=("sales",))
    response = gateway.client.get("/v1/policy", headers=gateway.auth(key))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["engine"] == "embedded"
    assert body["revision"].startswith("sha256:") and len(body["revision"]) > len("sha256:")
    assert datetime.fromisoformat(body["loaded_at"]).tzinfo is not None

    decided = gateway.retrieve(key, {"task": SALES_TASK, "query": "pricing"})
    assert decided.json()["decision"]["policy_revision"] == body["revision"]
    row = gateway.trace(response.headers["x-trace-id"])
    assert (row["endpoint"], row["status_code"], row["actor"]) == ("policy", 200, "user:alice")
    assert (row["policy_engine"], row["policy_revision"]) == ("embedded", body["revision"])


def test_policy_endpoint_is_open_to_any_authenticated_role(gateway: Gateway) -> None:
    writer = gateway.key("writer", roles=("ingest",))
    response = gateway.client.get("/v1/policy", headers=gateway.auth(writer))
    assert response.status_code == 200
    assert response.json()["engine"] == "embedded"


def test_only_the_platforms_policy_admin_is_shown_where_the_policies_are_read_from(gateway: Gateway) -> None:
    """Issue 30: `GET /v1/policy` showed any agent the policy source's server path; the policy is
    every tenant's, so a tenant's own policy_admin is not shown it either."""
    agent, tenant_admin = gateway.key("alice", groups=("sales",)), gateway.key("pat", roles=("policy_admin",))
    platform = gateway.key("ops", tenant=gateway.settings.platform_tenant, roles=("policy_admin",))
    seen = {
        name: gateway.client.get("/v1/policy", headers=gateway.auth(key)).json()
        for name, key in (("agent", agent), ("tenant_admin", tenant_admin), ("platform", platform))
    }
    for name in ("agent", "tenant_admin"):
        assert "source" not in seen[name] and str(gateway.settings.policies_dir) not in str(seen[name]), name
    assert seen["platform"]["source"] and seen["platform"]["revision"] == seen["agent"]["revision"]


def test_only_the_platforms_policy_admin_may_reload_the_policy(gateway: Gateway) -> None:
    tenant_admin = gateway.key("pat", roles=("policy_admin",))
    refused = gateway.client.post("/v1/policy/reload", headers=gateway.auth(tenant_admin))
    assert refused.status_code == 403 and "GATEWAY_PLATFORM_TENANT" in refused.json()["error"]["message"]
    assert gateway.trace(refused.json()["error"]["trace_id"])["status_code"] == 403  # audited like any refusal
    platform = gateway.key("ops", tenant=gateway.settings.platform_tenant, roles=("policy_admin",))
    answered = gateway.client.post("/v1/policy/reload", headers=gateway.auth(platform))
    assert answered.status_code == 200 and answered.json()["reload"]["status"] == "unchanged"
