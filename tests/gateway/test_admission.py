"""Admission: per-actor and per-tenant limits turn a flood away at the door (429 with Retry-After,
audited), heavy calls cost more, a tenant's limits come from the policy data, and one tenant's
flood is turned away while another tenant is served."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlmodel import select

from core.audit_tables import AuditTrace
from core.errors import ConfigurationError, RateLimited
from core.request import parse_retrieve
from core.store import close_store, open_store
from gateway.admission import (
    COURTESY_MAX_S,
    Admission,
    Limits,
    TenantLimits,
    Ticket,
    give_way,
    holding,
    load_admission,
    retrieve_cost,
)
from gateway.auth import create_api_key
from gateway.settings import load_settings
from gateway.writes.items import ingest
from tests.conftest import free_port, open_gateway
from tests.gateway.fixtures import SALES_TASK

LIGHT = TenantLimits(Limits(concurrency=4, rate=10), Limits(concurrency=2, rate=5))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_concurrency_and_rate_are_held_per_actor_and_per_tenant() -> None:
    clock = Clock()
    admission = Admission(LIGHT, clock=clock)
    first, second = admission.admit("acme", "user:a", 1), admission.admit("acme", "user:a", 1)
    with pytest.raises(RateLimited, match="actor's concurrency") as refused:
        admission.admit("acme", "user:a", 1)
    assert refused.value.status == 429 and refused.value.headers == {"Retry-After": "1"}
    other = admission.admit("acme", "user:b", 1)  # another actor of the tenant still gets in
    first.release()
    first.release()  # releasing twice gives back nothing more
    third = admission.admit("acme", "user:a", 1)
    with pytest.raises(RateLimited, match="tenant's concurrency"):
        admission.admit("acme", "user:c", 2)  # the tenant holds 3 of its 4 units (a, b, a)
    admission.admit("globex", "user:a", 1).release()  # another tenant is another bucket
    for ticket in (second, other, third):
        ticket.release()
    admission.admit("acme", "user:a", 1).release()  # the actor's bucket held 5 tokens: 4 are spent now
    with pytest.raises(RateLimited, match="actor's rate") as rate:
        admission.admit("acme", "user:a", 2)
    assert int(rate.value.headers["Retry-After"]) >= 1
    clock.now += 1.0  # a second later the bucket has refilled
    admission.admit("acme", "user:a", 2).release()
    assert admission.saturation()["in_flight"] == 0 and admission.saturation()["refused"] == 3


def test_a_call_larger_than_the_limits_is_let_through_alone() -> None:
    admission = Admission(LIGHT, clock=Clock())
    ticket = admission.admit("acme", "user:a", 9)  # more units than any limit: alone, it runs
    with pytest.raises(RateLimited):
        admission.admit("acme", "user:a", 1)
    ticket.release()


def test_heavy_calls_cost_more() -> None:
    light = parse_retrieve({"task": SALES_TASK, "query": "renewal", "depth": "fast"})
    heavy = parse_retrieve(
        {
            "task": SALES_TASK,
            "query": "renewal",
            "depth": "deep",
            "synthesize": True,
            "graph": {"max_depth": 3},
            "budget": {"bytes": 100_000},
        }
    )
    assert retrieve_cost(light, 16_000) == 1 and retrieve_cost(heavy, 16_000) == 8


def test_a_heavy_call_gives_way_while_a_lighter_tenant_has_calls_running() -> None:
    admission = Admission(TenantLimits(Limits(concurrency=16, rate=100), Limits(concurrency=8, rate=100)))
    flood = admission.admit("acme", "user:flood", 5)
    assert not admission.outweighed("acme")  # alone, nobody waits
    reader = admission.admit("globex", "user:gina", 1)
    assert admission.outweighed("acme") and not admission.outweighed("globex")

    async def gave_way(ticket: Ticket) -> float:
        with holding(ticket):
            await give_way()
        return ticket.gave_way_ms

    waited = asyncio.run(gave_way(flood))
    assert COURTESY_MAX_S * 1000 <= waited < COURTESY_MAX_S * 1000 + 200  # bounded: it waits, then goes on
    assert asyncio.run(gave_way(reader)) == 0.0  # a light call never waits
    assert admission.saturation()["in_flight"] == 0  # holding gave both tickets back

    even = admission.admit("acme", "user:flood", 5), admission.admit("globex", "user:gina", 5)
    assert not admission.outweighed("acme") and not admission.outweighed("globex")  # equals never wait for each other
    for ticket in even:
        ticket.release()
    assert not admission.outweighed("acme") and admission._tenants == {}  # a tenant with nothing in flight is forgotten


def test_tenant_limits_come_from_the_policy_data_and_bad_ones_stop_start_up() -> None:
    settings = load_settings({}, environ={})
    admission = load_admission(settings, {"admission": {"tenants": {"acme": {"concurrency": 2, "actor_rate": 3}}}})
    assert admission.limits("acme").tenant.concurrency == 2 and admission.limits("acme").actor.rate == 3
    assert admission.limits("globex") == admission.defaults
    for bad in ({"acme": {"rate": float("inf")}}, {"acme": {"speed": 1}}, {"acme": {"concurrency": True}}, ["acme"]):
        with pytest.raises(ConfigurationError, match="admission"):
            load_admission(settings, {"admission": {"tenants": bad}})


def test_a_caller_past_its_rate_gets_429_with_retry_after_and_an_audit_row(sqlite_url: str, tmp_path: Path) -> None:
    with open_gateway(sqlite_url, tmp_path, admission_actor_rate=2) as gateway:
        alice = gateway.key("alice", groups=("sales",), clearance="confidential")
        answers = [gateway.retrieve(alice, {"task": SALES_TASK, "query": "renewal"}) for _ in range(3)]
        assert [a.status_code for a in answers[:2]] == [200, 200]
        refused = answers[2]
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["code"] == "rate_limited" and refused.json()["error"]["trace_id"]
        row = gateway.trace(refused.headers["x-trace-id"])
        assert (row["status_code"], row["error_code"], row["actor"]) == (429, "rate_limited", "user:alice")
        bob = gateway.key("bob", groups=("sales",), clearance="confidential")
        assert gateway.retrieve(bob, {"task": SALES_TASK, "query": "renewal"}).status_code == 200


def test_the_policy_data_sets_one_tenants_limits(sqlite_url: str, tmp_path: Path, policy_copy: Path) -> None:
    data = policy_copy / "gateway" / "config" / "data.json"
    document = json.loads(data.read_text())
    document["admission"] = {"tenants": {"acme": {"actor_rate": 1}}}
    data.write_text(json.dumps(document))
    with open_gateway(sqlite_url, tmp_path, policies_dir=policy_copy) as gateway:
        alice = gateway.key("alice", groups=("sales",), clearance="confidential")
        assert gateway.retrieve(alice, {"task": SALES_TASK, "query": "renewal"}).status_code == 200
        assert gateway.retrieve(alice, {"task": SALES_TASK, "query": "renewal"}).status_code == 429
        gina = gateway.key("gina", tenant="globex", groups=("sales",), clearance="confidential")
        assert [gateway.retrieve(gina, {"task": SALES_TASK, "query": "x"}).status_code for _ in range(3)] == [200] * 3


# ---------------------------------------------------------------- one tenant's flood, another's latency


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def seed_store(data_dir: Path) -> tuple[str, str]:
    """acme: a dense graph to flood with deep walks; globex: notes to read. Keys for both."""
    engine = open_store(f"sqlite:///{data_dir / 'gateway.db'}")
    try:
        rng = random.Random(14)
        entities = [
            {"id": f"ent_{i}", "kind": "entity", "entity_type": "contact", "acl": ["*"], "text": f"contact {i}"}
            for i in range(300)
        ]
        edges = [
            {
                "id": f"edge_{n}",
                "kind": "edge",
                "from": f"ent_{rng.randrange(300)}",
                "to": f"ent_{rng.randrange(300)}",
                "relation": rng.choice(["works_at", "reports_to", "knows"]),
                "confidence": 0.5 + rng.random() / 2,
                "acl": ["*"],
            }
            for n in range(3000)
        ]
        assert not ingest(engine, "acme", entities + edges).rejected
        notes = [
            {"id": f"note_{i}", "kind": "memory", "text": f"renewal pricing note {i} for the account", "acl": ["*"]}
            for i in range(200)
        ]
        assert not ingest(engine, "globex", notes).rejected
        flooder = create_api_key(
            engine, tenant="acme", principal="user:flood", roles=["agent"], groups=["sales"], clearance="confidential"
        )
        reader = create_api_key(
            engine, tenant="globex", principal="user:gina", roles=["agent"], groups=["sales"], clearance="confidential"
        )
    finally:
        close_store(engine)
    return flooder, reader


@pytest.mark.skipif(shutil.which("gateway", path=str(Path(sys.executable).parent)) is None, reason="no gateway command")
def test_a_flood_from_one_tenant_is_turned_away_and_leaves_another_tenant_served(tmp_path: Path) -> None:
    flooder, reader = seed_store(tmp_path)
    port = free_port()
    env = {
        **os.environ,
        "GATEWAY_DATA_DIR": str(tmp_path),
        "GATEWAY_PORT": str(port),
        "GATEWAY_BACKGROUND_EMBEDDING": "false",
        "GATEWAY_PII_BACKGROUND": "false",
    }
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "gateway"), "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and server.poll() is None, "the server did not start"
            time.sleep(0.1)
        light = {"task": SALES_TASK, "query": "renewal pricing", "depth": "fast", "sources": {"semantic": False}}
        deep = {
            "task": SALES_TASK,
            "mode": "brief",
            "depth": "deep",
            "graph": {"max_depth": 3},
            "entities": [{"id": f"ent_{i}"} for i in range(20)],
            "sources": {"semantic": False},
        }

        def timed(client: httpx.Client, key: str, body: dict[str, Any]) -> tuple[int, float]:
            started = time.perf_counter()
            response = client.post("/v1/retrieve", json=body, headers={"Authorization": f"Bearer {key}"})
            return response.status_code, (time.perf_counter() - started) * 1000

        with httpx.Client(base_url=url, timeout=30) as client:
            for _ in range(10):
                timed(client, reader, light)
            idle = [timed(client, reader, light) for _ in range(100)]
        assert {status for status, _ in idle} == {200}

        stop = threading.Event()
        flood: list[int] = []

        def flooding() -> None:
            with httpx.Client(base_url=url, timeout=30) as client:
                while not stop.is_set():
                    flood.append(timed(client, flooder, deep)[0])

        threads = [threading.Thread(target=flooding, daemon=True) for _ in range(20)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(1.0)
            with httpx.Client(base_url=url, timeout=30) as client:
                during = [timed(client, reader, light) for _ in range(100)]
        finally:
            stop.set()
            for thread in threads:
                thread.join(30)
        assert {status for status, _ in during} == {200}  # the other tenant is never refused
        assert 429 in flood and 200 in flood, sorted(set(flood))  # the flood was admitted in part, turned away in part
        ratio = p95([ms for _, ms in during]) / p95([ms for _, ms in idle])
        print(f"the other tenant's p95: {ratio:.1f}x its idle p95 under the flood")
        # Measured 2.0-2.4x on a 2-core machine; 330x on the live server that found the problem, 25x
        # with admission alone, 6-8x before the pushdown and the audit append were built once, the
        # policy left the interpreter and heavy calls gave way (docs/http-api.md, "Admission and deadlines").
        assert ratio <= 3.0, f"the other tenant's p95 rose {ratio:.1f}x under the flood"
        ready = httpx.get(f"{url}/readyz", timeout=5).json()
        assert ready["admission"]["refused"] > 0
    finally:
        server.terminate()
        server.wait(30)
    engine = open_store(f"sqlite:///{tmp_path / 'gateway.db'}")
    try:
        with engine.connect() as conn:
            admitted = (
                conn.execute(select(AuditTrace.lineage).where(AuditTrace.tenant == "acme", AuditTrace.status_code == 200))
                .scalars()
                .all()
            )
    finally:
        close_store(engine)
    assert any(
        (lineage.get("admission") or {}).get("gave_way_ms", 0) > 0 for lineage in admitted
    )  # the flood gave way, and its trace says so
