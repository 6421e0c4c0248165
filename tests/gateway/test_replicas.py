"""Replicas agree: two `gateway serve` processes on one PostgreSQL database, as two pods would be.

What one replica writes the other reads at once (lexically) and once embedded (semantically, from
vectors only the other replica made, even one committed out of stamp order); a cursor issued by one
pages on the other; a tenant's audit chain stays one gap-free chain under calls on both, its
appenders taking turns; a policy reload through one reaches the other (LISTEN/NOTIFY), also when
the other's source lags, and a replica whose listening connection dropped catches up on reconnect.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, make_url, text

from audit.chain import CHAIN_LOCK_CLASS, append
from audit.record import TraceBuilder, new_trace_id
from core.instants import utc_now
from core.store import close_store, open_store
from gateway.auth import create_api_key
from gateway.policy.broadcast import LISTENER_NAME
from gateway.settings import PROJECT_POLICIES
from tests.conftest import edit_json, free_port, require_postgres, wait_ready
from tests.policies.test_policy_reload import CONFIG, without_sales

GATEWAY = Path(sys.executable).parent / "gateway"
SALES_TASK = {"type": "account_followup", "scope": "sales"}
pytestmark = pytest.mark.skipif(not GATEWAY.exists(), reason="no gateway command beside this Python")


@dataclass
class Replica:
    name: str
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def call(self, method: str, path: str, key: str, body: Any = None) -> httpx.Response:
        return httpx.request(method, f"{self.url}{path}", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60)

    def retrieve(self, key: str, body: dict[str, Any]) -> httpx.Response:
        return self.call("POST", "/v1/retrieve", key, body)

    def revision(self, key: str) -> str:
        return str(self.call("GET", "/v1/policy", key).json()["revision"])

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@dataclass
class Cluster:
    a: Replica
    b: Replica
    database_url: str
    policies: tuple[Path, Path]  # each replica's own copy, as each pod mounts its own ConfigMap
    keys: dict[str, str]

    def sql(self, statement: str, **params: Any) -> list[Any]:
        engine = create_engine(self.database_url)
        try:
            with engine.begin() as conn:
                return list(conn.execute(text(statement), params))
        finally:
            engine.dispose()


def prepare(database_url: str) -> dict[str, str]:
    """The schema (through `gateway migrate` where it exists) and the callers' keys."""
    commands = subprocess.run([str(GATEWAY), "--help"], capture_output=True, text=True, timeout=60).stdout
    if " migrate " in commands:
        subprocess.run([str(GATEWAY), "migrate", "--database-url", database_url], check=True, capture_output=True, timeout=120)
    else:
        migrate_in_process(database_url)
    engine = open_store(database_url)
    try:

        def key(
            principal: str, roles: list[str], groups: tuple[str, ...] = (), clearance: str = "internal", tenant: str = "acme"
        ) -> str:
            return create_api_key(
                engine, tenant=tenant, principal=principal, roles=roles, groups=list(groups), clearance=clearance
            )

        return {
            "writer": key("user:writer", ["ingest"]),
            "alice": key("user:alice", ["agent"], ("sales",), "confidential"),
            "auditor": key("user:audrey", ["auditor"]),
            "admin": key("user:pat", ["policy_admin"], tenant="platform"),
        }
    finally:
        close_store(engine)


def migrate_in_process(database_url: str) -> None:
    """What `gateway migrate` does, for a checkout whose CLI does not have it yet."""
    try:
        from core.migrate import upgrade
        from core.store import create_store_engine  # type: ignore[attr-defined,unused-ignore]
    except ImportError:  # no migrations: open_store makes the schema itself
        return
    engine = create_store_engine(database_url)
    try:
        upgrade(engine, backup=False)
    finally:
        engine.dispose()


def start(name: str, database_url: str, policies: Path, directory: Path, **env: str) -> Replica:
    port = free_port()
    data = directory / name
    data.mkdir()
    log = directory / f"{name}.log"
    environ = {
        **os.environ,
        "GATEWAY_DATABASE_URL": database_url,
        "GATEWAY_DATA_DIR": str(data),
        "GATEWAY_PORT": str(port),
        "GATEWAY_POLICIES_DIR": str(policies),
        "GATEWAY_PII_BACKGROUND": "false",
        "GATEWAY_CONNECTOR_DEADLINE_MS": "20000",
        **env,
    }
    with log.open("wb") as out:
        process = subprocess.Popen([str(GATEWAY), "serve"], env=environ, stdout=out, stderr=subprocess.STDOUT)
    return Replica(name, f"http://127.0.0.1:{port}", process, log)


def replica_ready(replica: Replica) -> None:
    wait_ready(replica.process, replica.url, 180, why=lambda: f"replica {replica.name} did not start:\n{replica.tail()}")


def eventually(check: Callable[[], Any], seconds: float, what: str, replica: Replica | None = None) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}" + (f"\n{replica.tail()}" if replica else "")
        time.sleep(0.25)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two replicas on a database of their own; B embeds nothing itself, so every vector it
    searches was written by A."""
    postgres = require_postgres()
    name = "gw_replicas_" + secrets.token_hex(5)
    admin = create_engine(postgres, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    database_url = make_url(postgres).set(database=name).render_as_string(hide_password=False)
    directory = tmp_path_factory.mktemp("replicas")
    policies = (directory / "policies-a", directory / "policies-b")
    for copy in policies:
        shutil.copytree(PROJECT_POLICIES, copy)
    replicas: list[Replica] = []
    try:
        keys = prepare(database_url)
        replicas.append(start("a", database_url, policies[0], directory))
        replicas.append(start("b", database_url, policies[1], directory, GATEWAY_BACKGROUND_EMBEDDING="false"))
        for replica in replicas:
            replica_ready(replica)
        yield Cluster(replicas[0], replicas[1], database_url, policies, keys)
    finally:
        for replica in replicas:
            replica.process.send_signal(signal.SIGTERM)
        for replica in replicas:
            try:
                replica.process.wait(30)
            except subprocess.TimeoutExpired:
                replica.process.kill()
                replica.process.wait(10)
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


def memory(item_id: str, text_: str, **envelope: Any) -> dict[str, Any]:
    return {"id": item_id, "kind": "memory", "text": text_, "acl": ["*"], "scope": ["sales"], **envelope}


def ingest(replica: Replica, key: str, items: list[dict[str, Any]]) -> None:
    answer = replica.call("PUT", "/v1/items", key, items)
    assert answer.status_code == 200 and answer.json()["rejected"] == [], answer.text


def found(answer: httpx.Response, source: str | None = None) -> dict[str, list[str]]:
    assert answer.status_code == 200, answer.text
    return {i["id"]: i["found_by"] for i in answer.json()["items"] if source is None or source in i["found_by"]}


SEMANTIC_ONLY = {"exact": False, "lexical": False, "graph": False, "semantic": True}


def test_an_item_written_through_one_replica_is_found_through_the_other(cluster: Cluster) -> None:
    a, b, keys = cluster.a, cluster.b, cluster.keys
    ingest(a, keys["writer"], [memory("mem_lexical_1", "The customer renewed the quarrelsome zeppelin maintenance contract.")])
    # lexically: at once, nothing to wait for
    assert "lexical" in found(b.retrieve(keys["alice"], {"task": SALES_TASK, "query": "quarrelsome zeppelin"}))["mem_lexical_1"]

    def semantic_on_b(item_id: str, query: str) -> bool:
        return item_id in found(
            b.retrieve(keys["alice"], {"task": SALES_TASK, "query": query, "sources": SEMANTIC_ONLY}), "semantic"
        )

    # semantically: once A's worker has embedded it; B embeds nothing, its index mirrors A's rows
    eventually(lambda: semantic_on_b("mem_lexical_1", "airship upkeep agreement renewal"), 90, "B finds A's first vector")
    # B's index for the tenant is warm now; a second item must still reach it
    ingest(a, keys["writer"], [memory("mem_semantic_2", "Their finance lead wants invoices split across three cost centres.")])
    eventually(
        lambda: semantic_on_b("mem_semantic_2", "billing divided between several departments"), 90, "B finds A's later vector"
    )
    worker_b = b.call("GET", "/readyz", keys["alice"]).json()
    assert worker_b["status"] == "ready"


def test_a_vector_committed_out_of_order_by_another_writer_still_reaches_the_index(cluster: Cluster) -> None:
    """Two embedding writers (replicas, or `gateway embed` beside the service) stamp their rows with
    their clock before they commit, so a row can commit after a newer-stamped one the index has
    already read. It must still be read: the index looks back over the last few seconds of stamps
    until they are settled, not only past the newest stamp it holds."""
    a, b, keys = cluster.a, cluster.b, cluster.keys
    ingest(a, keys["writer"], [memory("mem_race_old", "Walrus sanctuary volunteers counted the pups at dawn.")])
    eventually(
        lambda: (
            "mem_race_old"
            in found(
                b.retrieve(keys["alice"], {"task": SALES_TASK, "query": "walrus pup census", "sources": SEMANTIC_ONLY}),
                "semantic",
            )
        ),
        90,
        "embedded",
    )
    ingest(a, keys["writer"], [memory("mem_race_new", "The kiln firing schedule for the stoneware glaze batch slipped a week.")])
    query = {"task": SALES_TASK, "query": "pottery kiln glaze firing delayed", "sources": SEMANTIC_ONLY}
    eventually(lambda: "mem_race_new" in found(b.retrieve(keys["alice"], query), "semantic"), 90, "B reads the newest stamp")
    # The late writer: the old item gets the kiln vector, stamped one second before the newest row
    # B holds, committed now (a writer that embedded, then took a while to commit).
    late = cluster.sql(
        "UPDATE item_vector SET vector = n.vector, seq = n.seq - 1000000000 FROM item_vector n, item i, item j "
        "WHERE n.item_pk = j.pk AND j.id = 'mem_race_new' AND item_vector.item_pk = i.pk AND i.id = 'mem_race_old' "
        "RETURNING item_vector.item_pk"
    )
    assert len(late) == 1
    assert "mem_race_old" in found(b.retrieve(keys["alice"], query), "semantic")


def test_a_cursor_issued_by_one_replica_pages_on_the_other(cluster: Cluster) -> None:
    a, b, keys = cluster.a, cluster.b, cluster.keys
    ids = [f"mem_page_{n}" for n in range(8)]
    ingest(a, keys["writer"], [memory(i, f"Pagination marmalade note {n}: " + "filler words " * 40) for n, i in enumerate(ids)])
    body = {"task": SALES_TASK, "query": "pagination marmalade", "sources": {"semantic": False}, "budget": {"bytes": 1500}}
    first = a.retrieve(keys["alice"], body)
    seen = list(found(first))
    cursor = first.json()["cursor"]
    assert cursor and len(seen) < len(ids), first.json()
    pages = 0
    while cursor:
        page = (b if pages % 2 == 0 else a).retrieve(
            keys["alice"], {"task": SALES_TASK, "cursor": cursor, "budget": {"bytes": 1500}}
        )
        new = list(found(page))
        assert new and not set(new) & set(seen), (new, seen)
        seen += new
        cursor = page.json()["cursor"]
        pages += 1
    assert pages >= 1 and sorted(seen) == sorted(ids)
    # spent: neither replica serves it again
    assert b.retrieve(keys["alice"], {"task": SALES_TASK, "cursor": first.json()["cursor"]}).status_code == 404


def test_a_tenant_audit_chain_stays_one_chain_under_calls_on_both(cluster: Cluster) -> None:
    a, b, keys = cluster.a, cluster.b, cluster.keys
    body = {"task": SALES_TASK, "query": "quarrelsome zeppelin", "sources": {"semantic": False}}

    def calls(replica: Replica) -> list[int]:
        return [replica.retrieve(keys["alice"], body).status_code for _ in range(12)]

    with ThreadPoolExecutor(6) as pool:
        statuses = [s for f in [pool.submit(calls, r) for r in (a, b, a, b, a, b)] for s in f.result()]
    assert set(statuses) == {200}, statuses
    for replica in (a, b):
        report = replica.call("GET", "/v1/audit/verify", keys["auditor"]).json()
        assert report["ok"] is True and report["first_broken"] is None, report
    rows = cluster.sql("SELECT seq FROM audit_trace WHERE tenant = 'acme' ORDER BY seq")
    seqs = [r.seq for r in rows]
    assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= 72  # one chain, gap-free, nothing unchained
    assert cluster.sql("SELECT count(DISTINCT chain) AS n FROM audit_trace WHERE tenant = 'acme'")[0].n == 1


def test_two_appenders_of_one_chain_take_turns_instead_of_racing(cluster: Cluster) -> None:
    """The lock per chain: a second appender waits for the first to commit and appends on its row,
    where without it both would read the same head and the loser fail on the (chain, seq) index."""
    engine = create_engine(cluster.database_url)

    def row() -> dict[str, Any]:
        trace = TraceBuilder(new_trace_id(), "replica_test", utc_now(), key=b"k" * 32)
        trace.tenant = "acme"
        frozen = trace.freeze(200)
        return {f.name: getattr(frozen, f.name) for f in fields(frozen)}

    def second() -> int:
        with engine.begin() as conn:
            return append(conn, row()).seq

    try:
        with engine.connect() as conn, ThreadPoolExecutor(1) as pool:
            with conn.begin():
                mine = append(conn, row()).seq
                waiting = pool.submit(second)
                time.sleep(1.0)
                assert not waiting.done()  # it waits its turn: the chain's head is not settled yet
                # in the two-key space (objsubid 2), apart from any single-key lock such as the background lease
                held = cluster.sql(
                    "SELECT classid::bigint AS c, objsubid, granted FROM pg_locks WHERE locktype = 'advisory' "
                    "AND classid::bigint = :c",
                    c=CHAIN_LOCK_CLASS,
                )
                assert sorted((r.objsubid, r.granted) for r in held) == [(2, False), (2, True)], held
            assert waiting.result(timeout=30) == mine + 1
    finally:
        engine.dispose()
    report = cluster.b.call("GET", "/v1/audit/verify", cluster.keys["auditor"]).json()
    assert report["ok"] is True, report


def skew(policies: Path, seconds: int) -> None:
    """A harmless change: a new revision that decides alike."""
    edit_json(policies / CONFIG, lambda d: d.__setitem__("as_of_skew_seconds", seconds))


def reload_triggers(cluster: Cluster) -> list[str]:
    rows = cluster.sql("SELECT lineage FROM audit_trace WHERE endpoint = 'policy_reload' ORDER BY pk")
    return [r.lineage["policy_reload"]["trigger"] for r in rows]


def test_a_policy_reload_through_one_replica_reaches_the_other(cluster: Cluster) -> None:
    a, b, keys = cluster.a, cluster.b, cluster.keys
    before = a.revision(keys["admin"])
    assert b.revision(keys["admin"]) == before
    question = {"task": SALES_TASK, "query": "quarrelsome zeppelin", "sources": {"semantic": False}}
    assert b.retrieve(keys["alice"], question).status_code == 200
    for copy in cluster.policies:  # the change reaches both replicas' sources; only A is asked to reload
        without_sales(copy)
    answer = a.call("POST", "/v1/policy/reload", keys["admin"])
    assert answer.status_code == 200, answer.text
    switched = answer.json()["reload"]
    assert switched["status"] == "switched" and switched["revision"] != before
    eventually(lambda: b.revision(keys["admin"]) == switched["revision"], 10, "B switches", b)
    denied = b.retrieve(keys["alice"], question)
    assert denied.status_code == 403 and "task_not_granted" in denied.json()["error"]["reasons"]
    trace = b.call("GET", f"/v1/audit/traces/{denied.headers['x-trace-id']}", keys["auditor"]).json()
    assert trace["policy_revision"] == switched["revision"], trace
    # each replica audited its own switch: A the call, B the reload it made on hearing of it
    assert sorted(reload_triggers(cluster)) == ["http", "notify"]


def test_a_replica_whose_source_lags_switches_when_its_source_has_the_revision(cluster: Cluster) -> None:
    """A ConfigMap reaches each pod in its own time: B hears of A's revision before its own copy has
    it, finds nothing new, and looks again until it does."""
    a, b, keys = cluster.a, cluster.b, cluster.keys
    before = b.revision(keys["admin"])
    skew(cluster.policies[0], 6)
    switched = a.call("POST", "/v1/policy/reload", keys["admin"]).json()["reload"]
    assert switched["status"] == "switched"
    time.sleep(1.5)
    assert b.revision(keys["admin"]) == before  # its source does not have it yet
    skew(cluster.policies[1], 6)
    eventually(lambda: b.revision(keys["admin"]) == switched["revision"], 15, "B switches once its source has it", b)
    assert reload_triggers(cluster)[-1] == "notify"


def test_a_replica_whose_listener_dropped_catches_up_on_reconnect(cluster: Cluster) -> None:
    a, b, keys = cluster.a, cluster.b, cluster.keys
    before = a.revision(keys["admin"])
    assert b.revision(keys["admin"]) == before
    for copy in cluster.policies:
        skew(copy, 7)
    # Nobody reloads: the change is on disk only. Cut B's listening connection; on reconnecting it
    # reloads once, since it cannot know what it missed. A, whose connection stayed, does not.
    cut = cluster.sql(
        "SELECT pg_terminate_backend(pid) AS cut FROM pg_stat_activity WHERE application_name = :name",
        name=f"{LISTENER_NAME} {b.process.pid}",
    )
    assert [r.cut for r in cut] == [True], f"B's listener was not found:\n{b.tail()}"
    eventually(lambda: b.revision(keys["admin"]) != before, 15, "B catches up", b)
    assert a.revision(keys["admin"]) == before
    assert reload_triggers(cluster)[-1] == "reconnect"
    # and it listens again: A's reload of the same change is heard and changes nothing on B
    answer = a.call("POST", "/v1/policy/reload", keys["admin"]).json()["reload"]
    assert answer["status"] == "switched" and answer["revision"] == b.revision(keys["admin"])
    eventually(
        lambda: (
            cluster.sql(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE application_name LIKE :name", name=f"{LISTENER_NAME} %"
            )[0].n
            == 2
        ),
        10,
        "both replicas listen",
    )
