"""One byte budget split across sources, the five modes, fetch, and expand cursors, through HTTP."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, update

from core.errors import ConfigurationError
from core.instants import utc_now
from core.store import writer
from core.tables import RetrieveCursor
from gateway.settings import parse_split
from tests.conftest import Gateway, open_gateway
from tests.gateway.fixtures import SALES_TASK, memory

JANE = {"id": "ent_jane", "kind": "entity", "entity_type": "contact", "email": "jane@acme.com", "acl": ["*"]}


def alice(gateway: Gateway) -> str:
    return gateway.key("alice", groups=("sales",), clearance="confidential")


def ask(gateway: Gateway, key: str | None = None, **body: Any) -> dict[str, Any]:
    response = gateway.retrieve(key or alice(gateway), {"task": SALES_TASK, **body})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def doc(item_id: str, text: str) -> dict[str, Any]:
    return {"id": item_id, "kind": "document", "text": text, "acl": ["*"], "scope": ["sales"]}


def test_budget_split_redistributes_empty_shares_and_never_cuts_an_item(gateway: Gateway) -> None:
    gateway.ingest(
        "acme",
        [memory(f"mem_{i}", f"otter pricing memory {i} " + "x" * 180) for i in range(20)]
        + [doc(f"doc_{i}", f"otter pricing document {i} " + "y" * 180) for i in range(20)],
    )
    body = ask(gateway, query="otter pricing", budget={"bytes": 2000}, limit=100)
    per = body["budget"]["per_source"]
    # Only memories and documents had anything: their 35:30 shares grow to fill the whole budget.
    assert per["memory"]["share_bytes"] == 2000 * 35 // 65
    assert per["document"]["share_bytes"] == 2000 * 30 // 65
    assert per["graph"]["share_bytes"] == per["external"]["share_bytes"] == per["property"]["share_bytes"] == 0
    sizes = [len(i["text"].encode()) for i in body["items"]]
    assert sum(sizes) == body["budget"]["used_bytes"] <= 2000
    assert all(i["text"].endswith("x" * 180) or i["text"].endswith("y" * 180) for i in body["items"])  # whole items
    kinds = [i["kind"] for i in body["items"]]
    assert kinds.count("memory") >= 4 and kinds.count("document") >= 4
    assert per["memory"]["dropped"] + per["document"]["dropped"] == 40 - len(body["items"])
    trace = gateway.trace(body["trace_id"])["lineage"]
    assert len(trace["dropped_for_budget"]) == 40 - len(body["items"])
    assert not set(trace["dropped_for_budget"]) & set(trace["packed"])


def test_split_setting_is_validated() -> None:
    assert parse_split("memory=1,document=1")["memory"] == 0.5
    for bad in ("memory=35,memory=10", "memories=35", "memory=x", "memory=0,document=0", "memory=-1,document=2"):
        with pytest.raises(ConfigurationError):
            parse_split(bad)


def test_an_item_larger_than_the_budget_is_dropped_not_cut(gateway: Gateway) -> None:
    gateway.ingest("acme", [memory("mem_big", "heron " + "z" * 5000), memory("mem_small", "heron small")])
    body = ask(gateway, query="heron", budget={"bytes": 1000})
    assert [i["id"] for i in body["items"]] == ["mem_small"]
    assert body["budget"]["per_source"]["memory"]["dropped"] == 1


def test_modes_choose_sources_and_explicit_false_wins(gateway: Gateway) -> None:
    gateway.ingest("acme", [JANE, memory("mem_j", "lynx note", entity="ent_jane")])
    brief = ask(gateway, mode="brief", query="lynx", entities=[{"id": "ent_jane"}])
    assert brief["mode"] == "brief" and brief["sources"]["graph"]["status"] in ("ok", "empty")
    scout = ask(gateway, query="lynx", entities=[{"id": "ent_jane"}])
    assert scout["mode"] == "scout" and scout["sources"]["graph"]["detail"] == "not requested"
    no_lexical = ask(gateway, mode="brief", query="lynx", sources={"lexical": False, "graph": False})
    assert no_lexical["sources"]["lexical"]["status"] == no_lexical["sources"]["graph"]["status"] == "skipped"
    assert ask(gateway, fetch=["mem_j"])["mode"] == "fetch"
    assert ask(gateway, filters={"tags": ["x"]})["mode"] == "filter"


def test_filter_mode_lists_items_carrying_every_tag_inside_the_policy(gateway: Gateway) -> None:
    gateway.ingest(
        "acme",
        [
            memory("mem_both", "a", tags=["pricing", "emea"]),
            memory("mem_one", "b", tags=["pricing"]),
            memory("mem_both_forbidden", "c", tags=["pricing", "emea"], acl=["group:finance"]),
        ],
    )
    body = ask(gateway, filters={"tags": ["pricing", "emea"]})
    assert [i["id"] for i in body["items"]] == ["mem_both"]


def test_caller_narrows_kinds_never_widens(gateway: Gateway) -> None:
    gateway.ingest("acme", [memory("mem_k", "puffin"), doc("doc_k", "puffin")])
    only_docs = ask(gateway, query="puffin", kinds=["document"])
    assert [i["id"] for i in only_docs["items"]] == ["doc_k"]
    research = gateway.retrieve(
        alice(gateway), {"task": {"type": "research"}, "query": "puffin", "kinds": ["memory", "document"]}
    )
    assert {i["kind"] for i in research.json()["items"]} == {"document"}


def test_fetch_forbidden_and_unknown_ids_are_indistinguishable(gateway: Gateway) -> None:
    gateway.ingest("acme", [memory("mem_ok", "fine"), memory("mem_secret", "hidden", acl=["group:finance"])])
    gateway.ingest("globex", [memory("mem_theirs", "other tenant")])
    ok = ask(gateway, fetch=["mem_ok", "mem_secret", "mem_theirs", "mem_nope"])
    assert [i["id"] for i in ok["items"]] == ["mem_ok"]
    forbidden, unknown = ask(gateway, fetch=["mem_secret"]), ask(gateway, fetch=["mem_nope"])
    strip = lambda b: (
        {k: v for k, v in b.items() if k not in ("trace_id", "timings")}
        | {  # noqa: E731
            "sources": {n: {k: v for k, v in s.items() if k != "ms"} for n, s in b["sources"].items()}
        }
    )
    assert strip(forbidden) == strip(unknown)
    too_many = gateway.retrieve(alice(gateway), {"task": SALES_TASK, "fetch": [f"m{i}" for i in range(21)]})
    assert too_many.status_code == 422 and "fetch" in too_many.json()["error"]["message"]


def seed_pages(gateway: Gateway) -> list[str]:
    gateway.ingest("acme", [memory(f"mem_{i:02d}", f"walrus pricing note {i:02d} " + "w" * 150) for i in range(12)])
    return [f"mem_{i:02d}" for i in range(12)]


@pytest.fixture(scope="module")
def seeded_pages(module_gateway: Gateway) -> tuple[Gateway, list[str]]:
    """The pages loaded once per backend, for the expand tests that change nothing but their own
    cursor. Those that revoke an item, age the cursors, or need SQLite keep a gateway of their own."""
    return module_gateway, seed_pages(module_gateway)


def test_expand_pages_through_without_repeats_then_the_cursor_is_spent(seeded_pages: tuple[Gateway, list[str]]) -> None:
    gateway, ids = seeded_pages
    first = ask(gateway, query="walrus pricing", budget={"bytes": 700})
    seen = [i["id"] for i in first["items"]]
    cursor = first["cursor"]
    assert cursor and cursor.startswith("cur_") and 0 < len(seen) < 12
    pages = 0
    while cursor:
        page = ask(gateway, cursor=cursor, budget={"bytes": 700})
        assert page["mode"] == "expand"
        seen += [i["id"] for i in page["items"]]
        cursor, pages = page["cursor"], pages + 1
        assert pages < 12
    assert sorted(seen) == ids and len(seen) == len(set(seen))
    spent = gateway.retrieve(alice(gateway), {"task": SALES_TASK, "cursor": first["cursor"]})
    assert spent.status_code == 404


def test_expand_cursor_of_another_actor_or_tenant_gets_nothing(seeded_pages: tuple[Gateway, list[str]]) -> None:
    gateway, _ = seeded_pages
    cursor = ask(gateway, query="walrus pricing", budget={"bytes": 700})["cursor"]
    bob = gateway.key("bob", groups=("sales",), clearance="confidential")
    mallory = gateway.key("mallory", tenant="globex", groups=("sales",), clearance="confidential")
    for key in (bob, mallory):
        stolen = gateway.retrieve(key, {"task": SALES_TASK, "cursor": cursor})
        assert stolen.status_code == 404 and "walrus" not in stolen.text
        assert stolen.json()["error"]["message"] == "cursor: unknown or expired"
    # The owner can still use it: a failed theft does not spend it.
    assert ask(gateway, cursor=cursor, budget={"bytes": 700})["items"]


def test_expand_never_returns_an_item_forbidden_since_the_cursor_was_issued(gateway: Gateway) -> None:
    seed_pages(gateway)
    first = ask(gateway, query="walrus pricing", budget={"bytes": 700})
    trace = gateway.trace(first["trace_id"])["lineage"]
    revoked = trace["dropped_for_budget"][0]
    gateway.ingest("acme", [memory(revoked, "walrus pricing now finance only", acl=["group:finance"])])
    cursor, seen = first["cursor"], []
    while cursor:
        page = ask(gateway, cursor=cursor, budget={"bytes": 5000})
        seen += [i["id"] for i in page["items"]]
        cursor = page["cursor"]
    assert revoked not in seen and len(seen) == 12 - len(first["items"]) - 1


def test_expand_cursor_expires_after_an_idle_hour(gateway: Gateway) -> None:
    seed_pages(gateway)
    cursor = ask(gateway, query="walrus pricing", budget={"bytes": 700})["cursor"]
    table = RetrieveCursor.__table__  # type: ignore[attr-defined]
    with writer(gateway.store).begin() as conn:
        conn.execute(update(table).values(last_used_at=utc_now() - timedelta(seconds=3601)))
    assert gateway.retrieve(alice(gateway), {"task": SALES_TASK, "cursor": cursor}).status_code == 404


def test_concurrent_expands_of_one_cursor_never_return_the_same_item(sqlite_gateway: Gateway) -> None:
    gateway = sqlite_gateway
    seed_pages(gateway)
    first = ask(gateway, query="walrus pricing", budget={"bytes": 400})
    returned: list[list[str]] = []

    def page() -> None:
        response = gateway.retrieve(alice(gateway), {"task": SALES_TASK, "cursor": first["cursor"], "budget": {"bytes": 400}})
        returned.append([i["id"] for i in response.json().get("items", [])] if response.status_code == 200 else [])

    threads = [threading.Thread(target=page) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    flat = [i for page_ids in returned for i in page_ids] + [i["id"] for i in first["items"]]
    assert len(flat) == len(set(flat)) and len(returned) == 6


def test_expand_must_continue_the_same_task(seeded_pages: tuple[Gateway, list[str]]) -> None:
    gateway, _ = seeded_pages
    cursor = ask(gateway, query="walrus pricing", budget={"bytes": 700})["cursor"]
    other = gateway.retrieve(alice(gateway), {"task": {"type": "support_ticket"}, "cursor": cursor})
    assert other.status_code == 400 and "task" in other.json()["error"]["message"]


def test_an_expand_that_can_place_nothing_spends_what_it_left_out(gateway: Gateway) -> None:
    """Issue 30: an item larger than the page budget made every later expand empty with the same
    cursor, and the client's pages() looped for ever. A page that places nothing spends the
    entries it could not place (named in its trace), so following the cursor ends."""
    gateway.ingest(
        "acme",
        [
            memory("mem_small_a", "narwhal tusk note " + "n" * 40),
            memory("mem_huge", "narwhal tusk note " + "h" * 3000),
            memory("mem_small_b", "narwhal tusk note " + "m" * 60),
        ],
    )
    first = ask(gateway, query="narwhal tusk", budget={"bytes": 400})
    seen = [i["id"] for i in first["items"]]
    cursor, pages = first["cursor"], 0
    assert cursor, first
    while cursor:
        page = ask(gateway, cursor=cursor, budget={"bytes": 400})
        seen += [i["id"] for i in page["items"]]
        if not page["items"]:
            trace = gateway.trace(page["trace_id"])
            assert "mem_huge" in trace["lineage"]["dropped_for_budget"], trace["lineage"]
        cursor, pages = page["cursor"], pages + 1
        assert pages <= 3, "the cursor is never spent"
    assert "mem_huge" not in seen and {"mem_small_a", "mem_small_b"} <= set(seen)


def test_an_actors_live_cursors_are_capped_oldest_dropped(database_url: str, tmp_path: Path) -> None:
    """Issue 30: nothing bounded an actor's live cursors. Past the cap the oldest go; another
    actor's are not touched."""
    from tests.conftest import open_gateway

    with open_gateway(database_url, tmp_path, cursor_max_per_actor=3) as capped:
        seed_pages(capped)
        cursors = [ask(capped, query="walrus pricing", budget={"bytes": 700})["cursor"] for _ in range(5)]
        bob = capped.key("bob", groups=("sales",), clearance="confidential")
        bobs = capped.retrieve(bob, {"task": SALES_TASK, "query": "walrus pricing", "budget": {"bytes": 700}}).json()["cursor"]
        alive = [
            capped.retrieve(alice(capped), {"task": SALES_TASK, "cursor": c, "budget": {"bytes": 700}}).status_code
            for c in cursors
        ]
        assert alive == [404, 404, 200, 200, 200], alive
        assert capped.retrieve(bob, {"task": SALES_TASK, "cursor": bobs, "budget": {"bytes": 700}}).status_code == 200


def cursor_rows(gateway: Gateway) -> int:
    with gateway.store.connect() as conn:
        return len(conn.execute(RetrieveCursor.__table__.select()).all())  # type: ignore[attr-defined]


def test_a_retrieve_writes_its_cursor_and_its_audit_row_in_one_transaction(database_url: str, tmp_path: Path) -> None:
    # Without the background workers: their batches run beside calls, and their writes are not the call's.
    with open_gateway(database_url, tmp_path, background_embedding=False, pii_background=False) as gateway:
        one_transaction(gateway)


def one_transaction(gateway: Gateway) -> None:
    seed_pages(gateway)
    key = alice(gateway)
    ask(gateway, key, query="walrus pricing", budget={"bytes": 700})  # warm: the key, the tenant's tables
    transactions: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.strip().upper().startswith(("BEGIN", "INSERT", "DELETE", "UPDATE")):
            transactions.append(" ".join(statement.split()[:2]).upper())

    event.listen(gateway.store, "before_cursor_execute", seen)
    try:
        before = cursor_rows(gateway)
        body = ask(gateway, key, query="walrus pricing", budget={"bytes": 700})
    finally:
        event.remove(gateway.store, "before_cursor_execute", seen)
    assert body["cursor"] and cursor_rows(gateway) == before + 1
    if gateway.store.dialect.name == "sqlite":  # every write transaction begins IMMEDIATE (core.store.writer)
        assert transactions.count("BEGIN IMMEDIATE") == 1, transactions


def test_a_call_whose_audit_row_cannot_be_written_leaves_no_cursor(gateway: Gateway) -> None:
    seed_pages(gateway)
    key = alice(gateway)
    assert ask(gateway, key, query="walrus pricing", budget={"bytes": 700})["cursor"]
    before = cursor_rows(gateway)

    def broken(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        """The store refuses the audit row (and only it), after the cursor's insert in its transaction."""
        if statement.lstrip().upper().startswith("INSERT INTO AUDIT_TRACE"):
            raise RuntimeError("the audit table is gone")

    event.listen(gateway.store, "before_cursor_execute", broken)
    try:
        response = gateway.retrieve(key, {"task": SALES_TASK, "query": "walrus pricing", "budget": {"bytes": 700}})
    finally:
        event.remove(gateway.store, "before_cursor_execute", broken)
    assert response.status_code == 503 and "cur_" not in response.text
    assert cursor_rows(gateway) == before
