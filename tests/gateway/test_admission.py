"""Admission: work-conserving fair queuing. A lone actor's parallel calls wait for a seat instead of
being refused; under contention seats go to the tenant (then the actor) with the fewest units in
flight for its weight; a quiet tenant's first call never waits for a flood; a call is refused
(429 with Retry-After) only past the queue's bounds; a waiting call whose client leaves gives up
its place. Deterministic: the queue is driven call by call, no timing is asserted."""

from __future__ import annotations

import json
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from core.errors import ConfigurationError, RateLimited
from core.work import charge
from gateway.admission import Admission, FairQueue, Gate, Left, Rates, Seat, Share, TenantLimits, held, load_admission
from gateway.admission.fair_queue import LINGER_S
from gateway.background import ITEM_BYTES, Done, Limit, Pace, PendingWorker
from gateway.settings import load_settings
from tests.audit.test_audit_truth import retrieve_scope
from tests.conftest import open_gateway, serve_gateway
from tests.gateway.fixtures import SALES_TASK


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def queue(capacity: int = 4, shares: dict[str, Share] | None = None, **kwargs: Any) -> FairQueue:
    known = shares or {}
    return FairQueue(capacity, lambda tenant: known.get(tenant, Share()), **kwargs)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    anyio.run(scenario)


def granted(seats: list[Seat]) -> list[bool]:
    return [seat.granted_at is not None for seat in seats]


def test_a_lone_actor_uses_every_seat_and_its_calls_past_them_wait_in_order() -> None:
    async def scenario() -> None:
        fair = queue(4)
        seats = [fair.enter("acme", "user:agent", 1) for _ in range(8)]
        assert granted(seats) == [True] * 4 + [False] * 4  # alone, it has every seat; none refused
        assert fair.snapshot()["queued"] == 4 and fair.snapshot()["refused"] == 0
        fair.release(seats[0])
        assert granted(seats)[4:] == [True, False, False, False]  # first come, first served
        for seat in seats[1:4]:
            fair.release(seat)
        assert granted(seats) == [True] * 8
        fair.release(seats[0])  # a second release gives back nothing more
        assert fair.snapshot()["in_flight"] == 4

    run(scenario)


def test_a_quiet_tenants_call_never_waits_for_a_flood_and_the_flood_waits_for_its_share() -> None:
    async def scenario() -> None:
        fair = queue(4)
        flood = [fair.enter("acme", "user:flood", 1) for _ in range(10)]
        assert sum(granted(flood)) == 4
        quiet = fair.enter("globex", "user:gina", 1)
        assert quiet.granted_at is not None  # at once, although every seat was taken
        assert fair.snapshot()["in_flight"] == 5
        fair.release(flood[0])
        assert sum(granted(flood)) == 4  # back at capacity: the flood's next call still waits
        fair.release(flood[1])
        assert sum(granted(flood)) == 5  # under capacity again: the flood's queue moves
        fair.release(quiet)
        second = fair.enter("globex", "user:gina", 1)
        assert second.granted_at is not None  # the quiet tenant's next call, again at once

    run(scenario)


def test_under_contention_seats_go_to_the_tenant_with_fewer_units_in_flight_for_its_weight() -> None:
    async def scenario() -> None:
        fair = queue(4)
        acme = [fair.enter("acme", "user:a", 1) for _ in range(8)]
        globex = [fair.enter("globex", "user:g", 1) for _ in range(8)]
        assert sum(granted(acme)) == 4 and sum(granted(globex)) == 2  # globex at once up to its half
        for seat in acme[:4]:  # as acme's calls end, the seats go to globex until both hold two
            fair.release(seat)
        assert fair.in_flight("acme") == 2 and fair.in_flight("globex") == 2
        fair.release(acme[4])
        assert fair.in_flight("acme") == 2 and fair.in_flight("globex") == 2  # acme's seat goes back to acme: 2 each

        weighted = queue(4, {"globex": Share(weight=3.0)})
        acme = [weighted.enter("acme", "user:a", 1) for _ in range(8)]
        globex = [weighted.enter("globex", "user:g", 1) for _ in range(8)]
        for seat in acme[:4]:
            weighted.release(seat)
        assert weighted.in_flight("globex") == 3 and weighted.in_flight("acme") == 1  # shares by weight: 3 to 1

    run(scenario)


def test_inside_a_tenant_seats_go_to_the_actor_with_fewer_in_flight() -> None:
    async def scenario() -> None:
        fair = queue(2)
        flood = [fair.enter("acme", "user:flood", 1) for _ in range(6)]
        late = fair.enter("acme", "user:late", 1)
        assert late.granted_at is None
        fair.release(flood[0])
        assert late.granted_at is not None  # ahead of the flood's four older calls
        assert granted(flood) == [True, True, False, False, False, False]

    run(scenario)


def test_a_heavy_call_is_not_overtaken_forever_by_light_ones() -> None:
    async def scenario() -> None:
        fair = queue(4)
        light = [fair.enter("acme", "user:a", 1) for _ in range(4)]
        heavy = fair.enter("acme", "user:b", 3)
        later = fair.enter("acme", "user:c", 1)
        fair.release(light[0])
        assert heavy.granted_at is None and later.granted_at is None  # one seat free: the heavy call is next, and waits
        fair.release(light[1])
        fair.release(light[2])
        assert heavy.granted_at is not None and later.granted_at is None
        huge = queue(4).enter("acme", "user:x", 50)
        assert huge.granted_at is not None and huge.cost == 4  # a call past the capacity runs alone

    run(scenario)


def test_caps_hold_a_tenant_or_an_actor_under_a_ceiling_and_let_others_by() -> None:
    async def scenario() -> None:
        fair = queue(8, {"acme": Share(concurrency=3, actor_concurrency=2)})
        first = [fair.enter("acme", "user:a", 1) for _ in range(3)]
        assert granted(first) == [True, True, False]  # the actor's cap
        other = fair.enter("acme", "user:b", 1)
        assert other.granted_at is not None  # the tenant's third unit
        assert fair.enter("acme", "user:c", 1).granted_at is None  # the tenant's cap
        assert fair.enter("globex", "user:g", 1).granted_at is not None  # others go by

    run(scenario)


def test_past_the_queue_bound_a_call_is_refused_at_once_with_retry_after() -> None:
    async def scenario() -> None:
        fair = queue(2, {"acme": Share(queue=4)})
        seats = [fair.enter("acme", "user:flood", 1) for _ in range(6)]
        assert sum(granted(seats)) == 2 and fair.snapshot()["queued"] == 4
        with pytest.raises(RateLimited, match="queue holds 4 units") as refused:
            fair.enter("acme", "user:flood", 1)
        assert refused.value.status == 429 and int(refused.value.headers["Retry-After"]) >= 1
        # Another actor of the tenant takes the flooder's newest place instead of being refused.
        other = fair.enter("acme", "user:other", 1)
        assert seats[-1].refused is not None and seats[-1].event.is_set()
        with pytest.raises(RateLimited, match="took this one's place"):
            await fair.wait(seats[-1])
        assert other.refused is None and fair.snapshot()["queued"] == 4
        assert fair.enter("globex", "user:g", 1).granted_at is not None  # another tenant's queue is its own
        assert fair.snapshot()["refused"] == 2

    run(scenario)


def test_a_call_that_waited_its_longest_is_refused_and_leaves_the_queue() -> None:
    async def scenario() -> None:
        fair = queue(1, max_wait_s=0.05)
        holder = fair.enter("acme", "user:a", 1)
        waiting = fair.enter("acme", "user:a", 1)
        with pytest.raises(RateLimited, match="waited 0.05 s") as refused:
            await fair.wait(waiting)
        assert int(refused.value.headers["Retry-After"]) >= 1
        assert fair.snapshot()["queued"] == 0
        fair.release(holder)
        assert waiting.granted_at is None and fair.snapshot()["in_flight"] == 0  # the seat did not go to it

    run(scenario)


def test_a_waiting_call_whose_client_leaves_gives_up_its_place() -> None:
    async def scenario() -> None:
        fair = queue(1)
        holder = fair.enter("acme", "user:a", 1)
        leaving = fair.enter("acme", "user:a", 1)
        behind = fair.enter("acme", "user:a", 1)

        async def client_leaves() -> None:  # what the HTTP layer passes: returns on the disconnect
            await anyio.sleep(0.01)

        with pytest.raises(Left):
            await fair.wait(leaving, client_leaves)
        assert fair.snapshot()["queued"] == 1
        fair.release(holder)
        assert leaving.granted_at is None and behind.granted_at is not None  # the next one got the seat

        # Cancelled from outside while waiting (the server shutting down): it leaves the queue too.
        cancelled = fair.enter("acme", "user:a", 1)
        with anyio.move_on_after(0.01):
            await fair.wait(cancelled)
        assert fair.snapshot()["queued"] == 0
        fair.release(behind)
        assert cancelled.granted_at is None and fair.snapshot()["in_flight"] == 0

    run(scenario)


def test_a_call_granted_as_it_was_cancelled_gives_its_seats_back() -> None:
    async def scenario() -> None:
        fair = queue(1)
        holder = fair.enter("acme", "user:a", 1)
        waiter = fair.enter("acme", "user:a", 1)
        nextone = fair.enter("acme", "user:a", 1)
        scope = anyio.CancelScope()
        returned: list[Seat] = []

        async def waiting() -> None:
            with scope:
                await fair.wait(waiter)
                returned.append(waiter)  # the caller owns the seat from here (it releases it after its row)

        async with anyio.create_task_group() as group:
            group.start_soon(waiting)
            await anyio.sleep(0.01)  # it waits
            fair.release(holder)  # granted now...
            scope.cancel()  # ... and cancelled before it ran again
        assert waiter.granted_at is not None
        assert waiter.released != bool(returned)  # either the queue took the seat back, or the caller holds it
        for seat in returned:
            fair.release(seat)
        assert nextone.granted_at is not None and fair.snapshot()["in_flight"] == 1  # no seat was lost

    run(scenario)


def test_the_admission_door_prices_queues_and_counts_refusals() -> None:
    async def scenario() -> None:
        clock = Clock()
        limits = TenantLimits(Share(queue=8), Rates(tenant=0.0, actor=2.0))
        admission = Admission(limits, capacity=2, clock=clock)
        first = await admission.enter("acme", "user:a", 1)
        second = await admission.enter("acme", "user:a", 1)
        with pytest.raises(RateLimited, match="actor's rate quota"):  # 2 units a second, both spent
            await admission.enter("acme", "user:a", 1)
        clock.now += 1.0
        third = admission.queue.enter("acme", "user:a", 1)  # the seats are both held: it waits
        assert third.granted_at is None
        first.release()
        assert third.granted_at is not None and third.waited_s() == 0.0
        second.release()
        admission.queue.release(third)
        state = admission.saturation()
        assert state["refused"] == 1 and state["in_flight"] == 0 and state["capacity"] == 2

    run(scenario)


def test_limits_come_from_settings_and_the_policy_data_and_bad_ones_stop_start_up() -> None:
    settings = load_settings({}, environ={})
    admission = load_admission(
        settings, {"admission": {"tenants": {"acme": {"weight": 2, "queue": 16, "concurrency": 4, "actor_rate": 3}}}}
    )
    assert admission.capacity == 8 and admission.max_wait_s == 10.0
    assert admission.limits("acme").share == Share(weight=2.0, queue=16, concurrency=4)
    assert admission.limits("acme").rates == Rates(tenant=0.0, actor=3.0)
    assert admission.limits("globex") == admission.defaults and admission.defaults.share.queue == 64
    for bad in (
        {"acme": {"rate": float("inf")}},
        {"acme": {"speed": 1}},
        {"acme": {"concurrency": True}},
        {"acme": {"queue": 2}},
        ["acme"],
    ):
        with pytest.raises(ConfigurationError, match="admission"):
            load_admission(settings, {"admission": {"tenants": bad}})
    with pytest.raises(ConfigurationError, match="GATEWAY_ADMISSION_QUEUE_UNITS"):
        load_admission(load_settings({"admission_queue_units": 4}, environ={}), {})


# ---------------------------------------------------------------- over HTTP


def test_an_agents_parallel_calls_past_the_seats_wait_and_are_all_answered(sqlite_url: str, tmp_path: Path) -> None:
    """Eight parallel clients of one actor on a service with two seats: no 429; the calls that
    waited say so in Server-Timing, `timings.queue_ms` and the audit row."""
    with serve_gateway(sqlite_url, tmp_path, admission_capacity=2) as served:
        key = served.gateway.key("alice", groups=("sales",), clearance="confidential")
        body = {"task": SALES_TASK, "mode": "brief", "query": "renewal pricing", "sources": {"semantic": False}}
        answers: list[httpx.Response] = []
        lock = threading.Lock()

        def client() -> None:
            with httpx.Client(base_url=served.url, timeout=60) as http:
                for _ in range(4):
                    response = http.post("/v1/retrieve", json=body, headers={"Authorization": f"Bearer {key}"})
                    with lock:
                        answers.append(response)

        threads = [threading.Thread(target=client) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert sorted({a.status_code for a in answers}) == [200] and len(answers) == 32
        waits = [float(a.headers["server-timing"].split("queue;dur=")[1].split(",")[0]) for a in answers]
        queued = [a for a, wait in zip(answers, waits) if wait > 0]
        assert queued, "eight clients on two seats: some calls must have waited"
        assert all(a.json()["timings"]["queue_ms"] > 0 for a in queued)
        row = served.gateway.trace(queued[0].headers["x-trace-id"])
        assert row["lineage"]["admission"]["queued_ms"] > 0
        ready = httpx.get(f"{served.url}/readyz").json()["admission"]
        assert ready["refused"] == 0 and ready["waited"] > 0 and ready["in_flight"] == 0


def test_a_caller_past_its_rate_quota_gets_429_with_retry_after_and_an_audit_row(sqlite_url: str, tmp_path: Path) -> None:
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


def test_past_the_queue_bound_a_call_is_a_429_with_an_audit_row(sqlite_url: str, tmp_path: Path) -> None:
    """One seat, a queue of one unit, and the seat held: the second waiting call is refused at once."""
    with open_gateway(sqlite_url, tmp_path, admission_capacity=1, admission_queue_units=1) as gateway:
        alice = gateway.key("alice", groups=("sales",), clearance="confidential")
        admission: Admission = gateway.client.app.state.context.admission  # type: ignore[attr-defined]
        portal = gateway.client.portal
        assert portal is not None
        held = portal.call(admission.enter, "acme", "user:alice", 1)  # the one seat
        waiting = portal.call(admission.queue.enter, "acme", "user:alice", 1)  # the queue's one unit
        refused = gateway.retrieve(alice, {"task": SALES_TASK, "query": "renewal"})
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert "queue holds 1 units" in refused.json()["error"]["message"]
        row = gateway.trace(refused.headers["x-trace-id"])
        assert (row["status_code"], row["error_code"]) == (429, "rate_limited")
        portal.call(held.release)
        assert waiting.granted_at is not None  # the seat went to the call that waited
        portal.call(admission.queue.release, waiting)
        assert gateway.retrieve(alice, {"task": SALES_TASK, "query": "renewal"}).status_code == 200


def test_the_policy_data_sets_one_tenants_rate(sqlite_url: str, tmp_path: Path, policy_copy: Path) -> None:
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


# ---------------------------------------------------------------- background work


def test_background_batches_take_turns_and_are_charged_to_their_tenant() -> None:
    """A tenant's background batches (embedding, analysis of what it wrote) wait for a background
    turn and are charged to that tenant: while calls hold every seat a batch waits (apart from the
    calls' queues), another tenant's call still starts at once. Tenants' batches take turns."""

    async def scenario() -> None:
        admission = Admission(TenantLimits(Share()), capacity=4)
        waiting = {"acme": [1, 2, 3], "globex": [1]}
        ran: list[tuple[str | None, str, str]] = []

        def step(tenant: str | None, limit: Limit) -> Done:
            ticket = held()
            assert ticket is not None
            ran.append((tenant, ticket.tenant, ticket.actor))
            if tenant is not None and waiting[tenant]:
                waiting[tenant].pop()
                charge(cpu_s=0.03)  # 3 units of work, charged to the batch's tenant
                return Done(1, 100)
            return Done()

        def next_tenant(after: str | None) -> str | None:
            names = sorted(tenant for tenant, left in waiting.items() if left)
            later = [tenant for tenant in names if after is None or tenant > after]
            return ([*later, *names, None])[0]

        worker = PendingWorker("analysis", step, lambda: sum(map(len, waiting.values())), idle_s=0.05, next_tenant=next_tenant)
        flood = [await admission.enter("acme", "user:flood", 1) for _ in range(4)]  # acme's calls hold every seat
        async with anyio.create_task_group() as group:
            group.start_soon(worker.run, Gate(admission))
            await anyio.sleep(0.1)
            state = admission.saturation()
            assert ran == [] and state["background_waiting"] == 1 and state["waiting_calls"] == 0  # the batch waits apart
            quiet = await admission.enter("globex", "user:gina", 1)
            assert quiet.queued_ms == 0.0  # another tenant's call starts at once
            for ticket in (quiet, *flood):
                ticket.release()
            await anyio.sleep(0.3)
            group.cancel_scope.cancel()
        assert [tenant for tenant, _, _ in ran[:4]] == ["acme", "globex", "acme", "acme"]  # turns, a batch each
        assert all(tenant == charged and actor == "background:analysis" for tenant, charged, actor in ran)
        assert waiting == {"acme": [], "globex": []}
        assert admission.prices.price("acme", "background:analysis", "background:analysis", 1) == 3  # priced at its use

    run(scenario)


def test_background_work_runs_after_calls_on_free_seats_inside_its_share() -> None:
    """Background batches hold at most their share of the seats, only seats no waiting call wants;
    calls do not count them; a batch that waits is never refused, however long calls keep it."""

    async def scenario() -> None:
        fair = queue(8, max_wait_s=0.05)
        assert fair.background_seats == 4  # half the capacity by default
        batches = [fair.enter("acme", "background:embedding", 99, background=True) for _ in range(2)]
        assert granted(batches) == [True, False] and batches[0].units == 4  # priced at most its share
        assert fair.snapshot()["background_in_flight"] == 4
        call = fair.enter("acme", "user:writer", 8)  # the writer's bulk load, priced at every seat
        assert call.granted_at is not None  # at once: calls do not wait for background work
        fair.release(batches[0])
        assert granted(batches) == [True, False]  # the seats are the call's: the next batch waits
        await anyio.sleep(0.1)  # past the calls' wait bound: a batch is never refused for waiting
        assert batches[1].refused is None and fair.snapshot()["refused"] == 0
        fair.release(call)
        assert granted(batches) == [True, True]  # free seats again: the batch runs
        fair.release(batches[1])

        # A call waiting for seats wants the free ones: a batch that would fit them waits behind it.
        light = [fair.enter("acme", "user:reader", 1) for _ in range(5)]
        heavy = fair.enter("acme", "user:report", 8)
        assert heavy.granted_at is None  # 5 seats in use, 3 free
        batch = fair.enter("acme", "background:analysis", 2, background=True)
        assert batch.granted_at is None  # 3 free seats would hold it, but the waiting call wants them
        for seat in light:
            fair.release(seat)
        assert heavy.granted_at is not None and batch.granted_at is None
        fair.release(heavy)
        assert batch.granted_at is not None
        fair.release(batch)
        assert fair.snapshot()["background_in_flight"] == 0 and fair.snapshot()["in_flight"] == 0

        # Between tenants, the batch of the tenant with fewer background units in flight goes first.
        first = fair.enter("acme", "background:embedding", 2, background=True)
        blocker = fair.enter("acme", "user:a", 8)
        more = fair.enter("acme", "background:analysis", 2, background=True)
        other = fair.enter("globex", "background:embedding", 2, background=True)
        assert first.granted_at is not None and more.granted_at is None and other.granted_at is None
        fair.release(blocker)
        assert other.granted_at is not None and more.granted_at is None  # globex had none in flight; the share is full
        assert fair.snapshot()["background_in_flight"] <= fair.background_seats

    run(scenario)


def test_a_call_arriving_while_background_batches_run_is_served_by_the_next_batch_boundary() -> None:
    """The service's own batches run back to back while nothing else happens; calls that arrive
    start at once, and no batch starts while a call waits for seats. A batch never holds more than
    its share."""

    async def scenario() -> None:
        admission = Admission(TenantLimits(Share()), capacity=2, max_wait_s=1.0)
        assert admission.queue.background_seats == 1
        starts: list[dict[str, Any]] = []

        def step(tenant: str | None, limit: Limit) -> Done:
            starts.append(admission.saturation())
            charge(cpu_s=0.05)  # each batch measures 5 units: its price rises to its share, no further
            threading.Event().wait(0.02)
            return Done(1, 10)

        worker = PendingWorker("embedding", step, lambda: 1, idle_s=0.05, next_tenant=lambda after: "acme")
        async with anyio.create_task_group() as group:
            group.start_soon(worker.run, Gate(admission))
            await anyio.sleep(0.1)
            assert len(starts) >= 2  # alone, batches run back to back
            for _ in range(20):
                tickets = [await admission.enter("acme", "user:reader", 1) for _ in range(2)]
                assert [t.queued_ms for t in tickets] == [0.0, 0.0]  # never behind a batch
                await anyio.sleep(0.01)
                waiting = admission.queue.enter("acme", "user:reader", 1)  # a third call waits for a seat
                for ticket in tickets:
                    ticket.release()
                assert waiting.granted_at is not None
                admission.queue.release(waiting)
                await anyio.sleep(0.01)
            group.cancel_scope.cancel()
        assert all(state["waiting_calls"] == 0 for state in starts)  # no batch started while a call waited
        assert all(state["background_in_flight"] <= 1 for state in starts)
        assert admission.saturation()["refused"] == 0

    run(scenario)


def test_a_batch_is_sized_by_what_the_last_ones_cost() -> None:
    """Each batch's time and bytes teach the next one's limit: a slow batch shrinks it at once, a
    quick one grows it at most twofold; a batch always takes at least one item, however long."""
    pace = Pace(target_s=1.0)
    first = pace.limit()
    pace.learn(Done(10, 10 * 1500), seconds=4.0)  # 4 s for ~17 KB: a quarter of that fits in a second
    assert pace.limit().bytes == pytest.approx((10 * 1500 + 10 * ITEM_BYTES) / 4, rel=0.01)
    slow = pace.limit().bytes
    pace.learn(Done(2, 100), seconds=0.001)  # quick (little waited): at most twice the last limit
    assert pace.limit().bytes == 2 * slow
    pace.learn(Done(), seconds=9.0)  # nothing done teaches nothing
    assert pace.limit().bytes == 2 * slow and first.bytes > 0

    class Row:
        def __init__(self, size: int) -> None:
            self.text = "x" * size

    rows = [Row(1000), Row(1000), Row(1000)]
    assert len(Limit(10, 2 * (1000 + ITEM_BYTES)).within(rows)) == 2
    assert len(Limit(10, 1).within(rows)) == 1  # the first item always, however long
    assert len(Limit(1, 1 << 30).within(rows)) == 1
    assert Done.of(rows[:2]) == Done(2, 2000)


def test_a_tenant_between_two_calls_still_counts_as_running_for_courtesy() -> None:
    """A client calling one call after another is between two of them for a moment, not gone: a
    busier tenant gives way for LINGER_S after the lighter tenant's call ended."""

    async def scenario() -> None:
        clock = Clock()
        fair = queue(8, clock=clock)
        for _ in range(4):
            fair.enter("acme", "user:flood", 1)
        probe = fair.enter("globex", "user:gina", 1)
        assert fair.outweighed("acme") and not fair.outweighed("globex")
        fair.release(probe)
        assert fair.outweighed("acme")  # its call just ended
        clock.now += LINGER_S + 0.001
        assert not fair.outweighed("acme")  # long enough: it is gone
        alone = queue(8, clock=clock)
        seat = alone.enter("acme", "user:a", 1)
        alone.release(seat)
        alone.enter("acme", "user:a", 1)
        assert not alone.outweighed("acme")  # a tenant never gives way to itself

    run(scenario)


def test_a_call_whose_client_leaves_while_it_waits_gives_up_its_place(sqlite_url: str, tmp_path: Path) -> None:
    """Driven as a server drives the app: the call's body arrives, it waits for the one seat, then its
    client leaves. It leaves the queue at once, is a 499 row, and the seat never goes to it."""
    with open_gateway(sqlite_url, tmp_path, admission_capacity=1) as gateway:
        key = gateway.key("alice", groups=("sales",), clearance="confidential")
        app = gateway.client.app
        admission: Admission = app.state.context.admission  # type: ignore[attr-defined]
        portal = gateway.client.portal
        assert portal is not None
        holder = portal.call(admission.enter, "acme", "user:holder", 1)
        body = json.dumps({"task": SALES_TASK, "query": "renewal", "sources": {"semantic": False}}).encode()
        scope = retrieve_scope(key, body)

        async def scenario() -> list[dict[str, Any]]:
            left, sent, messages = anyio.Event(), [], [{"type": "http.request", "body": body, "more_body": False}]

            async def receive() -> dict[str, Any]:
                if messages:
                    return messages.pop()
                await left.wait()
                return {"type": "http.disconnect"}

            async def send(message: dict[str, Any]) -> None:
                sent.append(message)

            async with anyio.create_task_group() as group:
                group.start_soon(app, scope, receive, send)  # type: ignore[arg-type]
                with anyio.fail_after(10):
                    while admission.saturation()["waiting_calls"] == 0:
                        await anyio.sleep(0.01)
                    left.set()  # the client goes away while its call waits
                    while admission.saturation()["waiting_calls"]:
                        await anyio.sleep(0.01)
            return sent

        sent = portal.call(scenario)
        start = next(message for message in sent if message["type"] == "http.response.start")
        row = gateway.trace(dict(start["headers"])[b"x-trace-id"].decode())
        assert (row["status_code"], row["error_code"]) == (499, "client_closed")
        portal.call(holder.release)
        assert admission.saturation()["in_flight"] == 0  # the seat did not go to the call that left
        assert gateway.retrieve(key, {"task": SALES_TASK, "query": "renewal"}).status_code == 200


def test_a_refusal_says_nothing_of_another_tenant() -> None:
    """A tenant refused past its own bound learns its own bound and a Retry-After from its own queue:
    not which tenant is flooding, nor that tenant's bound or what it has waiting."""

    async def scenario() -> None:
        fair = queue(2, {"acme-secret-flooder": Share(queue=128), "globex": Share(queue=4)})
        for _ in range(100):
            fair.enter("acme-secret-flooder", "user:flood", 1)
        for _ in range(5):  # one runs at once (its fair share), four wait: globex's queue is full
            fair.enter("globex", "user:gina", 1)
        with pytest.raises(RateLimited) as refused:
            fair.enter("globex", "user:gina", 1)
        said = f"{refused.value} {refused.value.headers}"
        assert "4 units" in said and "acme" not in said and "128" not in said and "100" not in said

    run(scenario)


def test_retry_after_comes_from_the_tenants_own_queue_not_another_tenants_long_holds() -> None:
    """A tenant whose calls hold seats for seconds makes its own Retry-After long, not a quiet
    tenant's: each tenant's is how long its own calls held seats lately (issue 55: a process-wide
    average told a quiet tenant to wait up to 44 s)."""

    async def scenario() -> None:
        clock = Clock()
        fair = queue(2, {"slow": Share(queue=4), "quiet": Share(queue=2)}, clock=clock)
        for _ in range(5):  # the slow tenant's calls each hold a seat for 20 s
            held = [fair.enter("slow", "user:s", 1) for _ in range(2)]
            clock.now += 20
            for seat in held:
                fair.release(seat)
        slow = [fair.enter("slow", "user:s", 1) for _ in range(6)]  # 2 run, 4 wait: its queue is full
        with pytest.raises(RateLimited) as slow_refused:
            fair.enter("slow", "user:s", 1)
        for seat in slow:
            fair.release(seat)
        quiet = [fair.enter("quiet", "user:q", 1) for _ in range(4)]  # 2 run, 2 wait: full
        with pytest.raises(RateLimited) as quiet_refused:
            fair.enter("quiet", "user:q", 1)
        assert quiet[0].granted_at is not None
        assert slow_refused.value.retry_after >= 20 and quiet_refused.value.retry_after == 1

    run(scenario)
