"""Admission settles each call against the work it measured: a call rated cheap at the door that
turns out heavy is charged for it (its actor and tenant wait, 429 with Retry-After), gives way to
lighter tenants between stages like a call declared heavy, and the trace says what it used."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.errors import RateLimited
from core.request import parse_retrieve
from core.work import CHARS_PER_UNIT, CPU_MS_PER_UNIT, Meter, charge, metering
from gateway.admission import (
    COURTESY_MAX_S,
    DEBT_SECONDS,
    Admission,
    Limits,
    TenantLimits,
    Ticket,
    give_way,
    holding,
    retrieve_cost,
)
from gateway.writes.items import ingest
from tests.conftest import open_gateway
from tests.gateway.fixtures import SALES_TASK
from tests.gateway.test_admission import Clock


def test_a_call_that_used_more_than_it_was_admitted_at_is_charged_and_its_actor_waits() -> None:
    clock = Clock()
    admission = Admission(TenantLimits(Limits(concurrency=16, rate=100), Limits(concurrency=8, rate=10)), clock=clock)
    with holding(admission.admit("acme", "user:heavy", 1)) as ticket:
        charge(cpu_s=0.08)  # 80 ms of a core: 8 units, at a door price of 1
    assert ticket.used == pytest.approx(0.08 * 1000 / CPU_MS_PER_UNIT)
    # 10 tokens - 1 at the door - 7 settled = 2 left, and the next call of the shape is priced at 8
    with pytest.raises(RateLimited, match="actor's rate") as refused:
        admission.admit("acme", "user:heavy", 1)
    assert refused.value.retry_after == 1
    admission.admit("acme", "user:light", 1).release()  # another actor of the tenant is not held back
    clock.now += 2.0
    admission.admit("acme", "user:heavy", 1).release()  # and the heavy one runs again once refilled


def test_the_debt_is_bounded_so_one_call_never_locks_an_actor_out_for_long() -> None:
    clock = Clock()
    admission = Admission(TenantLimits(Limits(concurrency=16, rate=100), Limits(concurrency=8, rate=10)), clock=clock)
    with holding(admission.admit("acme", "user:heavy", 1)):
        charge(cpu_s=1000.0)  # one call owes at most one second of the rate: 9 - 10 = -1
    with pytest.raises(RateLimited) as refused:
        admission.admit("acme", "user:heavy", 1)
    assert refused.value.retry_after == 1
    assert admission._price("acme", "user:heavy", "") == 8  # and teaches at most the actor's concurrency
    for _ in range(30):  # many heavy calls: the debt stops at DEBT_SECONDS of the rate
        admission.settle(Ticket(lambda: None, admission, "acme", 1, actor="user:heavy", used=1000.0))
    with pytest.raises(RateLimited) as refused:
        admission.admit("acme", "user:heavy", 1)
    assert refused.value.retry_after == DEBT_SECONDS + 1


def test_a_call_that_stays_cheap_is_not_charged_more() -> None:
    clock = Clock()
    admission = Admission(TenantLimits(Limits(concurrency=16, rate=100), Limits(concurrency=8, rate=3)), clock=clock)
    for _ in range(3):
        with holding(admission.admit("acme", "user:a", 1)) as ticket:
            charge(cpu_s=0.001)
        assert ticket.used < 1
    with pytest.raises(RateLimited):  # three light calls spent exactly three units
        admission.admit("acme", "user:a", 1)


def test_a_call_rated_light_gives_way_once_it_has_measured_heavy() -> None:
    admission = Admission(TenantLimits(Limits(concurrency=16, rate=100), Limits(concurrency=8, rate=100)))
    flood, reader = admission.admit("acme", "user:flood", 1), admission.admit("globex", "user:gina", 1)

    async def stage(ticket_cpu_s: float) -> float:
        with holding(flood) as ticket:
            charge(cpu_s=ticket_cpu_s)
            await give_way()
        return ticket.gave_way_ms

    assert not admission.outweighed("acme")  # equal work in flight: nobody waits
    waited = asyncio.run(stage(0.05))  # 5 units measured: it now outweighs the reader's one
    assert COURTESY_MAX_S * 1000 <= waited < COURTESY_MAX_S * 1000 + 200
    reader.release()
    assert admission._tenants == {}  # the reweighed units were given back whole


def test_the_meter_counts_what_the_stages_report() -> None:
    meter = Meter()
    with metering(meter):
        charge(chars=CHARS_PER_UNIT * 2, steps=10_000)
    charge(chars=10**9)  # outside a call: nowhere to go, nothing breaks
    assert meter.units() >= 2 and meter.report()["embedded_chars"] == CHARS_PER_UNIT * 2


def test_a_long_query_costs_more_at_the_door() -> None:
    short = parse_retrieve({"task": SALES_TASK, "query": "renewal"})
    long = parse_retrieve({"task": SALES_TASK, "query": "renewal " * 500})
    assert retrieve_cost(short, 16_000) == 1 and retrieve_cost(long, 16_000) == 1 + 4000 // 1000


def test_the_trace_says_what_a_retrieve_used(tmp_path: Path) -> None:
    with open_gateway(f"sqlite:///{tmp_path / 'gateway.db'}", tmp_path) as gateway:
        notes = [
            {"id": f"note_{i}", "kind": "memory", "acl": ["*"], "text": f"renewal pricing review {i} for the account"}
            for i in range(3000)
        ]
        assert ingest(gateway.store, "acme", notes).rejected == []
        key = gateway.key("alice", groups=("sales",))
        response = gateway.retrieve(key, {"task": SALES_TASK, "query": "renewal pricing review"})
        assert response.status_code == 200, response.text
        admission = gateway.trace(response.json()["trace_id"])["lineage"]["admission"]
        assert admission["cost"] == 1 and admission["used"] > 0
        assert admission["work"]["cpu_ms"] > 0 and admission["work"]["sql_steps"] > 0


def test_the_price_of_a_shape_is_what_the_actors_calls_of_it_measured_lately() -> None:
    clock = Clock()
    admission = Admission(TenantLimits(Limits(concurrency=16, rate=100), Limits(concurrency=8, rate=100)), clock=clock)
    with holding(admission.admit("acme", "user:flood", 1, shape="retrieve:1")):
        charge(cpu_s=0.05)  # measured at 5 units
    priced = admission.admit("acme", "user:flood", 1, shape="retrieve:1")
    assert priced.cost == 5 and priced.estimate == 1
    with pytest.raises(RateLimited, match="actor's concurrency"):  # 5 + 5 > 8: one such call at a time
        admission.admit("acme", "user:flood", 1, shape="retrieve:1")
    other_shape = admission.admit("acme", "user:flood", 1, shape="policy:1")  # another shape keeps its own price
    assert other_shape.cost == 1
    other_shape.release()
    other_actor = admission.admit("acme", "user:reader", 1, shape="retrieve:1")  # and another actor its own
    assert other_actor.cost == 1
    other_actor.release()
    tokens = admission._buckets[("acme", "user:flood")].tokens
    with holding(priced):
        charge(cpu_s=0.001)  # it turned out light: the price beyond one unit is given back
    assert admission._buckets[("acme", "user:flood")].tokens == pytest.approx(tokens + 4)
    assert admission.admit("acme", "user:flood", 1, shape="retrieve:1").cost == 3  # the mean of 5 and 1


def test_a_crowded_tenants_light_calls_give_way_to_a_lighter_tenant() -> None:
    admission = Admission(TenantLimits(Limits(concurrency=16, rate=100), Limits(concurrency=8, rate=100)))
    crowd = [admission.admit("acme", f"user:{n}", 1) for n in range(4)]
    reader = admission.admit("globex", "user:gina", 1)

    async def stage(ticket_index: int) -> float:
        with holding(crowd[ticket_index]) as ticket:
            await give_way()
        return ticket.gave_way_ms

    assert asyncio.run(stage(0)) >= COURTESY_MAX_S * 1000  # four light calls in flight: the tenant is crowded
    assert asyncio.run(stage(1)) < COURTESY_MAX_S * 1000  # three left after the first ended: no longer crowded
    with holding(reader) as ticket:
        asyncio.run(give_way())
    assert ticket.gave_way_ms == 0.0  # the lighter tenant never waits
    for ticket in crowd[2:]:
        ticket.release()
    assert admission._tenants == {}
