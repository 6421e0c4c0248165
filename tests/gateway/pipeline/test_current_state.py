"""Current-state ranking through the HTTP API: authority, validity, scope, recency; slots; as_of."""

from __future__ import annotations

from typing import Any

from tests.conftest import Gateway
from tests.gateway.fixtures import SALES_TASK, memory

JANE = {"id": "ent_jane", "kind": "entity", "entity_type": "contact", "email": "jane@acme.com", "acl": ["*"]}


def fact(item_id: str, value: str, **envelope: Any) -> dict[str, Any]:
    return {
        "id": item_id,
        "kind": "property",
        "entity": "ent_jane",
        "name": "plan",
        "value": value,
        "slot": "ent_jane#plan",
        "acl": ["*"],
        **envelope,
    }


def ask(gateway: Gateway, **body: Any) -> dict[str, Any]:
    key = gateway.key("alice", groups=("sales",), clearance="confidential")
    response = gateway.retrieve(key, {"task": SALES_TASK, **body})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_recent_speculative_note_ranks_below_older_approved_decision(gateway: Gateway) -> None:
    gateway.ingest(
        "acme",
        [
            memory(
                "mem_guess",
                "Discount rule for annual billing: maybe 25 percent off",
                authority="speculative",
                recorded_at="2026-11-20T00:00:00Z",
            ),
            memory(
                "mem_decision",
                "Discount rule for annual billing: 10 percent off, approved by finance",
                authority="approved",
                recorded_at="2025-03-01T00:00:00Z",
                valid_from="2025-03-01T00:00:00Z",
            ),
        ],
    )
    items = ask(gateway, query="discount rule annual billing")["items"]
    assert [i["id"] for i in items] == ["mem_decision", "mem_guess"]
    assert [i["status"] for i in items] == ["current", "current"]


def test_authority_does_not_override_a_much_stronger_match(gateway: Gateway) -> None:
    # Relevance tiers first: an approved item that barely matches does not jump a strong match.
    gateway.ingest(
        "acme",
        [memory(f"mem_filler_{i}", f"renewal call notes number {i}", authority="speculative") for i in range(30)]
        + [
            memory("mem_strong", "renewal escalation playbook renewal escalation", authority="unreviewed"),
            memory("mem_weak_approved", "renewal", authority="approved"),
        ],
    )
    body = ask(gateway, query="renewal escalation playbook", sources={"semantic": False})
    ids = [i["id"] for i in body["items"]]
    assert ids[0] == "mem_strong"


def test_scope_match_then_recency_break_ties(gateway: Gateway) -> None:
    gateway.ingest(
        "acme",
        [
            memory("mem_general_new", "kiwi onboarding checklist", scope=[], recorded_at="2026-10-01T00:00:00Z"),
            memory("mem_sales_old", "kiwi onboarding checklist", scope=["sales"], recorded_at="2026-01-01T00:00:00Z"),
            memory("mem_sales_new", "kiwi onboarding checklist", scope=["sales"], recorded_at="2026-06-01T00:00:00Z"),
        ],
    )
    ids = [i["id"] for i in ask(gateway, query="kiwi onboarding checklist")["items"]]
    assert ids == ["mem_sales_new", "mem_sales_old", "mem_general_new"]


def test_slot_keeps_one_current_winner_and_labels_the_rest_on_request(gateway: Gateway) -> None:
    gateway.ingest(
        "acme",
        [
            JANE,
            fact("plan_approved", "Pro", authority="approved", recorded_at="2026-02-01T00:00:00Z"),
            fact("plan_newer_guess", "Enterprise", authority="speculative", recorded_at="2026-11-01T00:00:00Z"),
            fact("plan_older", "Starter", authority="reviewed", recorded_at="2025-01-01T00:00:00Z"),
            fact("plan_replaced", "Basic", authority="approved", status="superseded", recorded_at="2024-01-01T00:00:00Z"),
        ],
    )
    current = ask(gateway, entities=[{"id": "ent_jane"}])
    assert [(i["id"], i["status"], i["current"]) for i in current["items"]] == [("plan_approved", "current", True)]
    trace = gateway.trace(current["trace_id"])
    assert set(trace["lineage"]["dropped_as_historical"]) == {"plan_newer_guess", "plan_older", "plan_replaced"}

    history = ask(gateway, entities=[{"id": "ent_jane"}], include_historical=True)
    labelled = {i["id"]: (i["status"], i["current"]) for i in history["items"]}
    assert history["items"][0]["id"] == "plan_approved"
    assert labelled == {
        "plan_approved": ("current", True),
        "plan_newer_guess": ("disputed", False),
        "plan_older": ("superseded", False),
        "plan_replaced": ("superseded", False),
    }


def test_disputed_current_item_says_so(gateway: Gateway) -> None:
    gateway.ingest("acme", [JANE, fact("plan_contested", "Pro", authority="approved", status="disputed")])
    [only] = ask(gateway, entities=[{"id": "ent_jane"}])["items"]
    assert (only["id"], only["status"], only["current"]) == ("plan_contested", "disputed", True)


def test_as_of_in_the_past_returns_what_was_true_then(gateway: Gateway) -> None:
    gateway.ingest(
        "acme",
        [
            JANE,
            fact(
                "plan_2024", "Starter", authority="approved", valid_from="2024-01-01T00:00:00Z", valid_to="2025-06-01T00:00:00Z"
            ),
            fact("plan_2025", "Pro", authority="approved", valid_from="2025-06-01T00:00:00Z"),
            fact("plan_guess", "Enterprise", authority="speculative", valid_from="2026-03-01T00:00:00Z"),
        ],
    )
    then = ask(gateway, entities=[{"id": "ent_jane"}], as_of="2025-01-15T00:00:00Z", include_historical=True)
    assert [i["id"] for i in then["items"]] == ["plan_2024"]
    assert then["items"][0]["status"] == "current"
    now = ask(gateway, entities=[{"id": "ent_jane"}], include_historical=True)
    assert [(i["id"], i["status"]) for i in now["items"]] == [
        ("plan_2025", "current"),
        ("plan_2024", "historical"),
        ("plan_guess", "disputed"),
    ]
    assert [i["id"] for i in ask(gateway, entities=[{"id": "ent_jane"}])["items"]] == ["plan_2025"]
    assert ask(gateway, entities=[{"id": "ent_jane"}], as_of="2023-01-01T00:00:00Z")["items"] == []


def test_fetch_returns_a_named_superseded_item_labelled(gateway: Gateway) -> None:
    gateway.ingest(
        "acme",
        [
            JANE,
            fact("plan_now", "Pro", authority="approved"),
            fact("plan_was", "Basic", authority="approved", status="superseded"),
        ],
    )
    items = ask(gateway, fetch=["plan_was"])["items"]
    assert [(i["id"], i["status"], i["current"]) for i in items] == [("plan_was", "superseded", False)]
