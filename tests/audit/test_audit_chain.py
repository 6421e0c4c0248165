"""The audit hash chain: every call appends to its tenant's chain; editing, deleting or reordering
a row makes verify point at it; concurrent writers keep one valid chain on both backends."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import delete, select, update

from audit.chain import GENESIS, audit_trace
from audit.integrity import verify
from audit.record import Trace
from audit.store import AuditStore
from core import store as db
from core.errors import AuditWriteError
from gateway.cli import main
from tests.conftest import Gateway
from tests.gateway.fixtures import SALES_TASK


def calls(gateway: Gateway, n: int, tenant: str = "acme") -> None:
    key = gateway.key(f"agent-{tenant}", tenant=tenant, groups=("sales",), clearance="confidential")
    for i in range(n):
        gateway.retrieve(key, {"task": SALES_TASK, "query": f"chain check {i}"})


def auditor(gateway: Gateway, tenant: str = "acme") -> dict[str, str]:
    return gateway.auth(gateway.key(f"auditor-{tenant}", tenant=tenant, roles=("auditor",)))


def rows(gateway: Gateway, tenant: str = "acme") -> list[dict[str, Any]]:
    with gateway.store.connect() as conn:
        return [
            dict(r._mapping)
            for r in conn.execute(select(audit_trace).where(audit_trace.c.chain == tenant).order_by(audit_trace.c.seq))
        ]


def test_every_call_extends_its_tenants_chain_and_verify_says_ok(gateway: Gateway) -> None:
    calls(gateway, 5)
    calls(gateway, 2, tenant="globex")
    chain = rows(gateway)
    assert [r["seq"] for r in chain] == list(range(1, len(chain) + 1)) and len(chain) >= 5
    assert chain[0]["prev_hash"] == GENESIS
    assert all(b["prev_hash"] == a["row_hash"] for a, b in zip(chain, chain[1:]))
    response = gateway.client.get("/v1/audit/verify", headers=auditor(gateway))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["ok"] is True and body["first_broken"] is None
    assert set(body["chains"]) == {"acme"}  # an auditor checks its own tenant's chain only
    agent = gateway.key("agent-acme", groups=("sales",), clearance="confidential")
    assert gateway.client.get("/v1/audit/verify", headers=gateway.auth(agent)).status_code == 403


def test_editing_deleting_or_reordering_a_row_is_pointed_at(gateway: Gateway) -> None:
    calls(gateway, 6)
    chain = rows(gateway)
    target = chain[2]
    with db.writer(gateway.store).begin() as conn:
        conn.execute(update(audit_trace).where(audit_trace.c.pk == target["pk"]).values(status_code=299))
    edited = verify(gateway.store, "acme").wire()["first_broken"]
    assert edited["seq"] == target["seq"] and edited["trace_id"] == target["trace_id"] and "edited" in edited["reason"]
    with db.writer(gateway.store).begin() as conn:
        conn.execute(update(audit_trace).where(audit_trace.c.pk == target["pk"]).values(status_code=target["status_code"]))
    assert verify(gateway.store, "acme").ok is True

    with db.writer(gateway.store).begin() as conn:  # swap two rows' positions
        a, b = chain[3], chain[4]
        conn.execute(update(audit_trace).where(audit_trace.c.pk == a["pk"]).values(seq=-1))
        conn.execute(update(audit_trace).where(audit_trace.c.pk == b["pk"]).values(seq=a["seq"]))
        conn.execute(update(audit_trace).where(audit_trace.c.pk == a["pk"]).values(seq=b["seq"]))
    reordered = verify(gateway.store, "acme").wire()["first_broken"]
    assert reordered["seq"] == a["seq"] and reordered["trace_id"] == b["trace_id"]

    with db.writer(gateway.store).begin() as conn:
        conn.execute(delete(audit_trace).where(audit_trace.c.pk == a["pk"]))
    deleted = verify(gateway.store, "acme").wire()["first_broken"]
    assert deleted["reason"].startswith("expected position") or "link" in deleted["reason"]


def _trace(trace_id: str, tenant: str, lineage: dict[str, Any]) -> Trace:
    return Trace(
        trace_id=trace_id,
        created_at=datetime.now(timezone.utc),
        endpoint="test",
        status_code=200,
        decision="allow",
        tenant=tenant,
        actor="user:x",
        policy_engine=None,
        policy_revision=None,
        error_code=None,
        lineage=lineage,
    )


@pytest.mark.parametrize("writers", ["one store, grouped commits", "eight replicas"])
def test_eight_concurrent_writers_keep_one_valid_chain(gateway: Gateway, writers: str) -> None:
    """Eight threads on one store commit in groups; eight stores on one database (replicas) race
    for the head and retry. Either way: one chain, no gap, no fork."""
    shared = AuditStore(gateway.store)
    stores = [shared] * 8 if writers.startswith("one") else [AuditStore(gateway.store) for _ in range(8)]

    def write(n: int) -> None:
        for i in range(10):
            stores[n].write_sync(_trace(f"tr_c{n}_{i}", "busy", {"n": n, "i": i}))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    chain = rows(gateway, "busy")
    assert len(chain) == 80 and [r["seq"] for r in chain] == list(range(1, 81))
    assert verify(gateway.store, "busy").wire() == {
        "ok": True,
        "chains": {"busy": {"rows": 80, "ok": True}},
        "first_broken": None,
    }


def test_one_trace_the_store_cannot_take_fails_alone_in_its_group(sqlite_gateway: Gateway) -> None:
    store = AuditStore(sqlite_gateway.store)
    outcomes: dict[str, str] = {}

    def write(trace: Trace) -> None:
        try:
            store.write_sync(trace)
            outcomes[trace.trace_id] = "written"
        except AuditWriteError:
            outcomes[trace.trace_id] = "refused"

    traces = [
        _trace("tr_good_1", "grouped", {"n": 1}),
        _trace("tr_bad", "grouped", {"unstorable": object()}),
        _trace("tr_good_2", "grouped", {"n": 2}),
    ]
    with store._turn:  # hold the turn so that all three queue up and are committed as one group
        threads = [threading.Thread(target=write, args=(t,)) for t in traces]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while len(store._queue) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(store._queue) == 3
    for thread in threads:
        thread.join()
    assert outcomes == {"tr_good_1": "written", "tr_bad": "refused", "tr_good_2": "written"}
    assert [r["trace_id"] for r in rows(sqlite_gateway, "grouped")] == ["tr_good_1", "tr_good_2"]
    assert verify(sqlite_gateway.store, "grouped").ok is True


def test_the_cli_verifies_every_chain_and_exits_1_when_one_is_broken(sqlite_gateway: Gateway, tmp_path: Path) -> None:
    gateway = sqlite_gateway
    calls(gateway, 3)
    runner = CliRunner()
    args = ["audit", "verify", "--database-url", gateway.settings.effective_database_url]
    ok = runner.invoke(main, args)
    assert ok.exit_code == 0, ok.output
    with db.writer(gateway.store).begin() as conn:
        conn.execute(update(audit_trace).where(audit_trace.c.chain == "acme", audit_trace.c.seq == 2).values(decision="deny"))
    broken = runner.invoke(main, args)
    assert broken.exit_code == 1 and '"seq": 2' in broken.output


def test_fingerprints_are_keyed_and_the_key_is_shared_through_the_store(sqlite_url: str, tmp_path: Path) -> None:
    import hashlib

    from tests.conftest import open_gateway

    query = "jane.roe@acme.com"
    fingerprints = []
    for run in range(2):  # a restart reads the same key from the store
        with open_gateway(sqlite_url, tmp_path / str(run)) as gateway:
            key = gateway.key(f"a{run}", groups=("sales",), clearance="confidential")
            trace_id = gateway.retrieve(key, {"task": SALES_TASK, "query": query}).json()["trace_id"]
            fingerprints.append(gateway.trace(trace_id)["lineage"]["request"]["query"])
    assert fingerprints[0] == fingerprints[1]
    assert fingerprints[0]["hmac"] != hashlib.sha256(query.encode()).hexdigest()[:32]  # not a bare hash
    with open_gateway(sqlite_url, tmp_path / "own", audit_key="k" * 40) as gateway:
        key = gateway.key("a-own", groups=("sales",), clearance="confidential")
        trace_id = gateway.retrieve(key, {"task": SALES_TASK, "query": query}).json()["trace_id"]
        assert gateway.trace(trace_id)["lineage"]["request"]["query"] != fingerprints[0]


def test_prune_removes_old_rows_and_the_chain_stays_verifiable_from_its_anchor(gateway: Gateway) -> None:
    from datetime import timedelta

    from audit.chain import prune, rederive

    calls(gateway, 6)
    chain = rows(gateway)
    old = chain[:3]
    with db.writer(gateway.store).begin() as conn:  # make the first three a year old (hashes recomputed)
        from audit.chain import row_hash

        prev = GENESIS
        for r in chain:
            created = r["created_at"] - timedelta(days=365) if r in old else r["created_at"]
            updated = {**r, "created_at": created, "prev_hash": prev}
            digest = row_hash(updated)
            conn.execute(
                update(audit_trace).where(audit_trace.c.pk == r["pk"]).values(created_at=created, prev_hash=prev, row_hash=digest)
            )
            prev = digest
        rederive(conn, "acme")  # the rollup follows the rows' new hours, as the append would have counted them
    assert verify(gateway.store, "acme").ok is True
    removed = prune(gateway.store, datetime.now(timezone.utc) - timedelta(days=30))
    assert {chain: p.removed for chain, p in removed.items()} == {"acme": 3} and removed["acme"].oldest == 4
    kept = rows(gateway)
    assert [r["seq"] for r in kept][:3] == [4, 5, 6]
    assert verify(gateway.store, "acme").ok is True
    calls(gateway, 1)
    assert verify(gateway.store, "acme").ok is True
    with db.writer(gateway.store).begin() as conn:  # tampering with the oldest kept row is still caught
        conn.execute(update(audit_trace).where(audit_trace.c.pk == kept[0]["pk"]).values(decision="deny"))
    assert verify(gateway.store, "acme").wire()["first_broken"]["seq"] == 4
    runner = CliRunner()
    pruned = runner.invoke(main, ["audit", "prune", "--days", "0", "--database-url", gateway.settings.effective_database_url])
    assert pruned.exit_code != 0 and "at least one day" in pruned.output


def test_rows_hashed_before_every_column_counted_still_verify_at_the_start_of_a_chain(sqlite_gateway: Gateway) -> None:
    """A store written by an earlier version: its rows' hashes (version 1) left out task_type and
    about. They verify where they are, but their review columns must match their lineage, and a
    version 1 row after a version 2 one is an edit."""
    from audit.chain import row_hash, row_hash_v1

    gateway = sqlite_gateway
    calls(gateway, 4)
    with db.writer(gateway.store).begin() as conn:  # the first two rows as an earlier version wrote them
        prev = GENESIS
        for r in rows(gateway)[:2]:
            r["prev_hash"] = prev
            r["row_hash"] = row_hash_v1(r)
            conn.execute(update(audit_trace).where(audit_trace.c.pk == r["pk"]).values(prev_hash=prev, row_hash=r["row_hash"]))
            prev = r["row_hash"]
        later = rows(gateway)[2]
        conn.execute(
            update(audit_trace)
            .where(audit_trace.c.pk == later["pk"])
            .values(prev_hash=prev, row_hash=row_hash({**later, "prev_hash": prev}))
        )
    chain = rows(gateway)
    prev = chain[2]["row_hash"]
    with db.writer(gateway.store).begin() as conn:
        for r in chain[3:]:
            r["prev_hash"] = prev
            r["row_hash"] = row_hash(r)
            conn.execute(update(audit_trace).where(audit_trace.c.pk == r["pk"]).values(prev_hash=prev, row_hash=r["row_hash"]))
            prev = r["row_hash"]
    assert verify(gateway.store, "acme").ok is True
    with db.writer(gateway.store).begin() as conn:  # a version 1 row's review column edited: caught
        conn.execute(update(audit_trace).where(audit_trace.c.pk == chain[1]["pk"]).values(task_type="compliance_review"))
    broken = verify(gateway.store, "acme").wire()["first_broken"]
    assert broken["seq"] == chain[1]["seq"] and "does not match the row's lineage" in broken["reason"]
    with db.writer(gateway.store).begin() as conn:
        conn.execute(update(audit_trace).where(audit_trace.c.pk == chain[1]["pk"]).values(task_type=chain[1]["task_type"]))
        target = chain[3]  # a version 2 row turned into version 1 (dropping task_type from its hash)
        conn.execute(update(audit_trace).where(audit_trace.c.pk == target["pk"]).values(row_hash=row_hash_v1(target)))
    assert verify(gateway.store, "acme").wire()["first_broken"]["seq"] == target["seq"]
