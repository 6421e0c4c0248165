"""Admission settles each call against the work it measured: what a call used prices the actor's
next calls of its shape (so they hold more of the seats), a rate quota the operator set is charged
for it (429 with Retry-After), a call rated cheap at the door that turns out heavy gives way to
lighter tenants between stages like a call declared heavy, and the trace says what it used."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from core.errors import RateLimited
from core.request import parse_retrieve
from core.work import CHARS_PER_UNIT, CPU_MS_PER_UNIT, Meter, charge, metering
from gateway.admission import COURTESY_MAX_S, Admission, Rates, Share, TenantLimits, Ticket, give_way, holding, retrieve_cost
from gateway.admission.quota import DEBT_SECONDS
from gateway.writes.items import ingest
from tests.conftest import open_gateway
from tests.gateway.fixtures import SALES_TASK
from tests.gateway.test_admission import Clock


def quota(actor_rate: float, clock: Clock | None = None, capacity: int = 8) -> Admission:
    return Admission(TenantLimits(Share(), Rates(actor=actor_rate)), capacity=capacity, clock=clock or Clock())


def test_a_call_that_used_more_than_it_was_admitted_at_is_charged_to_its_quota_and_its_actor_waits() -> None:
    async def scenario() -> None:
        clock = Clock()
        admission = quota(10, clock)
        with holding(await admission.enter("acme", "user:heavy", 1)) as ticket:
            charge(cpu_s=0.08)  # 80 ms of a core: 8 units, at a door price of 1
        assert ticket.used == pytest.approx(0.08 * 1000 / CPU_MS_PER_UNIT)
        # 10 tokens - 1 at the door - 7 settled = 2 left, and the next call of the shape is priced at 8
        with pytest.raises(RateLimited, match="actor's rate quota") as refused:
            await admission.enter("acme", "user:heavy", 1)
        assert refused.value.retry_after == 1
        (await admission.enter("acme", "user:light", 1)).release()  # another actor of the tenant is not held back
        clock.now += 2.0
        (await admission.enter("acme", "user:heavy", 1)).release()  # and the heavy one runs again once refilled

    anyio.run(scenario)


def test_the_debt_is_bounded_so_one_call_never_locks_an_actor_out_for_long() -> None:
    async def scenario() -> None:
        admission = quota(10)
        with holding(await admission.enter("acme", "user:heavy", 1)):
            charge(cpu_s=1000.0)  # one call owes at most one second of the rate: 9 - 10 = -1
        with pytest.raises(RateLimited) as refused:
            await admission.enter("acme", "user:heavy", 1)
        assert refused.value.retry_after == 1
        assert admission.prices.price("acme", "user:heavy", "", 1) == 8  # and teaches at most the capacity
        for _ in range(30):  # many heavy calls: the debt stops at DEBT_SECONDS of the rate
            admission.settle(Ticket(admission, None, "acme", "user:heavy", 1, used=1000.0))
        with pytest.raises(RateLimited) as refused:
            await admission.enter("acme", "user:heavy", 1)
        assert refused.value.retry_after == DEBT_SECONDS + 1

    anyio.run(scenario)


def test_without_a_quota_a_heavy_actor_is_never_refused_its_calls_hold_more_seats() -> None:
    async def scenario() -> None:
        admission = Admission(TenantLimits(Share()), capacity=8, clock=Clock())
        with holding(await admission.enter("acme", "user:heavy", 1, shape="retrieve:1")):
            charge(cpu_s=1000.0)
        priced = await admission.enter("acme", "user:heavy", 1, shape="retrieve:1")
        assert priced.cost == 8 and admission.queue.in_flight("acme") == 8  # priced at what it measured: all seats
        waiting = admission.queue.enter("acme", "user:heavy", 1)
        assert waiting.granted_at is None  # the next call waits for a turn instead of a 429
        priced.release()
        assert waiting.granted_at is not None

    anyio.run(scenario)


def test_a_call_that_stays_cheap_is_not_charged_more() -> None:
    async def scenario() -> None:
        admission = quota(3)
        for _ in range(3):
            with holding(await admission.enter("acme", "user:a", 1)) as ticket:
                charge(cpu_s=0.001)
            assert ticket.used < 1
        with pytest.raises(RateLimited):  # three light calls spent exactly three units
            await admission.enter("acme", "user:a", 1)

    anyio.run(scenario)


def test_a_call_rated_light_gives_way_once_it_has_measured_heavy() -> None:
    async def scenario() -> None:
        admission = Admission(TenantLimits(Share()), capacity=8)
        flood, reader = await admission.enter("acme", "user:flood", 1), await admission.enter("globex", "user:gina", 1)
        assert not admission.outweighed("acme")  # equal work in flight: nobody waits
        with holding(flood) as ticket:
            charge(cpu_s=0.05)  # 5 units measured: it now outweighs the reader's one
            started = anyio.current_time()
            await give_way()
            waited = (anyio.current_time() - started) * 1000
        assert COURTESY_MAX_S * 1000 <= ticket.gave_way_ms < COURTESY_MAX_S * 1000 + 200
        assert waited >= COURTESY_MAX_S * 1000 * 0.9
        reader.release()
        assert admission.queue.snapshot()["in_flight"] == 0  # the reweighed units were given back whole

    anyio.run(scenario)


def test_a_crowded_tenants_light_calls_give_way_to_a_lighter_tenant() -> None:
    async def scenario() -> None:
        admission = Admission(TenantLimits(Share()), capacity=8)
        crowd = [await admission.enter("acme", f"user:{n}", 1) for n in range(4)]
        reader = await admission.enter("globex", "user:gina", 1)
        with holding(crowd[0]) as first:
            await give_way()
        assert first.gave_way_ms >= COURTESY_MAX_S * 1000  # four light calls in flight: the tenant is crowded
        with holding(crowd[1]) as second:
            await give_way()
        assert second.gave_way_ms < COURTESY_MAX_S * 1000  # three left after the first ended: no longer crowded
        with holding(reader) as lighter:
            await give_way()
        assert lighter.gave_way_ms == 0.0  # the lighter tenant never waits
        for ticket in crowd[2:]:
            ticket.release()
        assert admission.queue.snapshot()["in_flight"] == 0

    anyio.run(scenario)


def test_the_meter_counts_what_the_stages_report() -> None:
    meter = Meter()
    with metering(meter):
        charge(chars=CHARS_PER_UNIT * 2, steps=10_000)
    charge(chars=10**9)  # outside a call: nowhere to go, nothing breaks
    assert meter.units() >= 2 and meter.report()["embedded_chars"] == CHARS_PER_UNIT * 2


def test_heavy_and_long_calls_cost_more_at_the_door() -> None:
    short = parse_retrieve({"task": SALES_TASK, "query": "renewal"})
    long = parse_retrieve({"task": SALES_TASK, "query": "renewal " * 500})
    assert retrieve_cost(short, 16_000) == 1 and retrieve_cost(long, 16_000) == 1 + 4000 // 1000
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


def test_the_trace_says_what_a_retrieve_used(tmp_path: Path) -> None:
    # FTS5 ranks here, so that the SQL steps a search takes are many (Tantivy's ranking is not SQL)
    with open_gateway(f"sqlite:///{tmp_path / 'gateway.db'}", tmp_path, lexical_engine="fts5") as gateway:
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
