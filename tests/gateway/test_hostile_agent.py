"""An ordinary agent key against the gateway, trying what an adversarial review found: choosing a task
it was not granted, reading ahead of now, and reaching a hidden entity through an edge or a note."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import connectors.sql.graph
import connectors.sql.pushdown
from tests.conftest import Gateway, edit_json, open_gateway
from tests.gateway.fixtures import SALES_TASK, memory

CARD = "4111 1111 1111 1111"


def agent(gateway: Gateway, *groups: str) -> str:
    return gateway.key("agent-" + "-".join(groups or ("none",)), groups=groups, clearance="restricted")


def refusal(response: Any) -> list[str]:
    assert response.status_code == 403, response.text
    body = response.json()["error"]
    assert body["code"] == "policy_denied"
    return list(body["reasons"])


# ---------------------------------------------------------------- 1. task types are granted


def test_a_task_type_the_actor_was_not_granted_is_refused_and_audited(gateway: Gateway) -> None:
    gateway.ingest("acme", [memory("mem_card", f"card on file {CARD}", scope=["sales"])])
    seller = agent(gateway, "sales")
    response = gateway.retrieve(seller, {"task": {"type": "compliance_review"}, "query": "card on file"})
    assert refusal(response) == ["task_not_granted"]
    assert CARD not in response.text
    row = gateway.trace(response.headers["x-trace-id"])
    assert (row["decision"], row["error_code"], row["status_code"]) == ("deny", "policy_denied", 403)
    assert row["lineage"]["decision"]["reasons"] == ["task_not_granted"]
    # the group the data document grants it to gets it, with what that task allows
    auditor = agent(gateway, "compliance")
    granted = gateway.retrieve(auditor, {"task": {"type": "compliance_review"}, "query": "card on file"})
    assert granted.status_code == 200 and [i["id"] for i in granted.json()["items"]] == ["mem_card"]
    # and every agent may still research, where personal data is masked
    assert gateway.retrieve(seller, {"task": {"type": "research"}, "query": "card"}).status_code == 200


def test_a_task_type_with_no_grant_is_usable_by_nobody(sqlite_url: str, tmp_path: Path, policy_copy: Path) -> None:
    edit_json(policy_copy / "gateway" / "config" / "data.json", lambda d: d["task_types"]["research"].pop("grants"))
    with open_gateway(sqlite_url, tmp_path, policies_dir=policy_copy) as gateway:
        for groups in ((), ("sales",), ("compliance",)):
            refused = gateway.retrieve(agent(gateway, *groups), {"task": {"type": "research"}, "query": "x"})
            assert refusal(refused) == ["task_not_granted"]


# ---------------------------------------------------------------- 2. time travel is bounded

EMBARGO = memory("doc_embargo_q3", "quarterly results embargoed until july", valid_from="2027-07-01T00:00:00Z")


def test_an_as_of_in_the_future_is_refused(gateway: Gateway) -> None:
    gateway.ingest("acme", [EMBARGO])
    seller = agent(gateway, "sales")
    assert gateway.retrieve(seller, {"task": SALES_TASK, "fetch": ["doc_embargo_q3"]}).json()["items"] == []
    ahead = gateway.retrieve(seller, {"task": SALES_TASK, "fetch": ["doc_embargo_q3"], "as_of": "2027-07-01T00:00:00Z"})
    assert refusal(ahead) == ["as_of_in_future"]
    assert "embargoed" not in ahead.text
    assert gateway.trace(ahead.headers["x-trace-id"])["decision"] == "deny"
    # within the clock skew, and in the past (governed by the history rules), as_of still works
    soon = (datetime.now(timezone.utc) + timedelta(seconds=2)).isoformat()
    assert gateway.retrieve(seller, {"task": SALES_TASK, "query": "results", "as_of": soon}).status_code == 200
    assert gateway.retrieve(seller, {"task": SALES_TASK, "query": "results", "as_of": "2025-01-01T00:00:00Z"}).status_code == 200


def test_future_reads_can_be_granted_per_task(sqlite_url: str, tmp_path: Path, policy_copy: Path) -> None:
    edit_json(
        policy_copy / "gateway" / "config" / "data.json",
        lambda d: d["task_types"]["account_followup"].update(future_reads=["group:planning"]),
    )
    with open_gateway(sqlite_url, tmp_path, policies_dir=policy_copy) as gateway:
        gateway.ingest("acme", [EMBARGO])
        body = {"task": SALES_TASK, "fetch": ["doc_embargo_q3"], "as_of": "2027-07-01T00:00:00Z"}
        planner = agent(gateway, "sales", "planning")
        assert [i["id"] for i in gateway.retrieve(planner, body).json()["items"]] == ["doc_embargo_q3"]
        assert refusal(gateway.retrieve(agent(gateway, "sales"), body)) == ["as_of_in_future"]


# ---------------------------------------------------------------- 3. links to hidden entities


def hidden_entity_world(gateway: Gateway) -> None:
    gateway.ingest(
        "acme",
        [
            {"id": "ent_jane", "kind": "entity", "entity_type": "contact", "name": "Jane", "acl": ["*"]},
            {"id": "ent_secret", "kind": "entity", "entity_type": "company", "name": "Secretco", "acl": ["group:finance"]},
            {"id": "ent_public", "kind": "entity", "entity_type": "company", "name": "Publicco", "acl": ["*"]},
            {"id": "edge_secret", "kind": "edge", "from": "ent_jane", "relation": "works_at", "to": "ent_secret", "acl": ["*"]},
            {"id": "edge_public", "kind": "edge", "from": "ent_jane", "relation": "works_at", "to": "ent_public", "acl": ["*"]},
            memory("mem_about_secret", "zebrafirm acquisition talks", entity="ent_secret"),
            memory("mem_about_public", "zebrafirm public note", entity="ent_public"),
        ],
    )


def visible(gateway: Gateway, key: str, **body: Any) -> list[str]:
    response = gateway.retrieve(key, {"task": SALES_TASK, **body})
    assert response.status_code == 200, response.text
    ids = sorted(i["id"] for i in response.json()["items"])
    if "edge_secret" not in ids and "mem_about_secret" not in ids:
        assert "ent_secret" not in response.text and "Secretco" not in response.text
    return ids


def test_an_edge_or_a_note_naming_a_hidden_entity_is_never_returned(gateway: Gateway) -> None:
    hidden_entity_world(gateway)
    seller = agent(gateway, "sales")
    assert visible(gateway, seller, fetch=["edge_secret", "edge_public", "mem_about_secret", "mem_about_public"]) == [
        "edge_public",
        "mem_about_public",
    ]
    assert visible(gateway, seller, query="zebrafirm") == ["mem_about_public"]
    assert visible(gateway, seller, mode="brief", entities=[{"id": "ent_jane"}]) == ["edge_public"]
    # the finance group sees the other end, so it sees the edge and the note too
    finance = agent(gateway, "sales", "finance")
    assert "edge_secret" in visible(gateway, finance, fetch=["edge_secret", "mem_about_secret"])
    assert "mem_about_secret" in visible(gateway, finance, fetch=["edge_secret", "mem_about_secret"])


def test_the_item_policy_alone_keeps_the_edge_out(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the pushdown's link clause switched off, the verify step still drops the edge and the note,
    and counts them as pushdown mismatches."""
    hidden_entity_world(gateway)
    from sqlalchemy import true

    monkeypatch.setattr(connectors.sql.pushdown, "_linked_entity_visible", lambda *_: true())
    built = (
        connectors.sql.pushdown._permitted,
        connectors.sql.pushdown._conjuncts,
        connectors.sql.graph._reachable_edges,
    )  # templates built once per process
    for cached in built:
        cached.cache_clear()
    seller = agent(gateway, "sales")
    try:
        response = gateway.retrieve(seller, {"task": SALES_TASK, "fetch": ["edge_secret", "mem_about_secret", "edge_public"]})
    finally:
        monkeypatch.undo()
        for cached in built:
            cached.cache_clear()  # later tests build them again, with the link clause
    assert [i["id"] for i in response.json()["items"]] == ["edge_public"]
    lineage = gateway.trace(response.headers["x-trace-id"])["lineage"]
    assert sorted((d["id"], d["reason"]) for d in lineage["dropped_by_policy"]) == [
        ("edge_secret", "linked_entity"),
        ("mem_about_secret", "linked_entity"),
    ]


def test_the_pushdown_alone_keeps_the_edge_out(sqlite_url: str, tmp_path: Path, policy_copy: Path) -> None:
    """With the item policy's link rule removed, the SQL pushdown still never reads the edge or the note."""
    items = policy_copy / "gateway" / "items" / "items.rego"
    source = items.read_text()
    cut = source.index('failures contains [item.id, "linked_entity"]')
    items.write_text(source[:cut])
    with open_gateway(sqlite_url, tmp_path, policies_dir=policy_copy) as gateway:
        hidden_entity_world(gateway)
        seller = agent(gateway, "sales")
        response = gateway.retrieve(seller, {"task": SALES_TASK, "fetch": ["edge_secret", "mem_about_secret", "edge_public"]})
        assert [i["id"] for i in response.json()["items"]] == ["edge_public"]
        lineage = gateway.trace(response.headers["x-trace-id"])["lineage"]
        assert lineage["retrieved"] == {"exact": ["edge_public"]} and lineage["dropped_by_policy"] == []


# ---------------------------------------------------------------- 6. no caller text in the trail


def test_tags_reach_the_trail_only_as_fingerprints_and_are_bounded(gateway: Gateway) -> None:
    seller = agent(gateway, "sales")
    planted = ["jane.roe@globex.example", CARD.replace(" ", ""), "x" * 200]
    response = gateway.retrieve(seller, {"task": SALES_TASK, "filters": {"tags": planted}})
    assert response.status_code == 200, response.text
    row = gateway.trace(response.headers["x-trace-id"])
    stored = str(row)
    assert all(tag not in stored for tag in planted)
    tags = row["lineage"]["request"]["tags"]
    assert [t["length"] for t in tags] == [len(t) for t in planted] and all(len(t["hmac"]) == 32 for t in tags)

    too_long = gateway.retrieve(seller, {"task": SALES_TASK, "filters": {"tags": ["x" * 201]}})
    assert too_long.status_code == 400 and "at most 200 characters" in too_long.json()["error"]["message"]
    too_many = gateway.retrieve(seller, {"task": SALES_TASK, "filters": {"tags": [f"t{i}" for i in range(21)]}})
    assert too_many.status_code == 400 and "at most 20 tags" in too_many.json()["error"]["message"]
    huge = gateway.retrieve(seller, {"task": SALES_TASK, "filters": {"tags": ["y" * 100_000]}})
    assert huge.status_code == 400
    assert len(str(gateway.trace(huge.headers["x-trace-id"]))) < 5_000  # the refused call's row stays small


# ---------------------------------------------------------------- 8. expand keeps what was allowed


def test_expand_pages_keep_the_historical_items_the_first_call_was_allowed(gateway: Gateway) -> None:
    ended = [
        memory(
            f"mem_old_{i}",
            f"walrus renewal history note {i} " + "padding " * 20,
            valid_from="2024-01-01T00:00:00Z",
            valid_to="2025-01-01T00:00:00Z",
        )
        for i in range(6)
    ]
    gateway.ingest("acme", ended)
    seller = agent(gateway, "sales")
    body = {"task": SALES_TASK, "query": "walrus renewal", "include_historical": True, "budget": {"bytes": 400}}
    first = gateway.retrieve(seller, body).json()
    seen = [i["id"] for i in first["items"]]
    cursor = first["cursor"]
    assert cursor and 0 < len(seen) < 6
    while cursor:
        page = gateway.retrieve(seller, {"task": SALES_TASK, "cursor": cursor, "budget": {"bytes": 400}}).json()
        assert page["items"], page  # historical items are not dropped on later pages
        seen += [i["id"] for i in page["items"]]
        cursor = page["cursor"]
    assert sorted(seen) == sorted(m["id"] for m in ended)
