"""Every hard filter, through the HTTP API, on SQLite and PostgreSQL: a forbidden item never appears
in results, counts, errors or timings, and the empty answer reads the same as a plain miss."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Gateway
from tests.gateway.fixtures import FORBIDDEN, JANE_PRIVATE, OTHER_TENANT, SALES_TASK, VISIBLE, seed


@pytest.fixture(scope="module")
def seeded(module_gateway: Gateway) -> tuple[Gateway, str]:
    """The planted set, loaded once per backend: every test here only retrieves."""
    return module_gateway, seed(module_gateway)


def assert_nothing_of(response: Any, forbidden: dict[str, Any]) -> None:
    raw = response.text
    assert forbidden["id"] not in raw or forbidden["id"] == "mem_acl_ok"
    for word in forbidden["text"].split():
        if word.startswith("quokka"):
            assert word not in raw


def assert_empty_like_a_miss(gateway: Gateway, key: str, response: Any) -> None:
    miss = gateway.retrieve(key, {"task": SALES_TASK, "query": "xylophonenotstored"}).json()
    body = response.json()
    assert body["items"] == []
    assert body["empty_reason"] == miss["empty_reason"] == "no_relevant_permitted_items"
    for name, source in body["sources"].items():
        assert source["count"] == 0, name
        assert source["status"] == miss["sources"][name]["status"], name
    assert set(body) == set(miss)


@pytest.mark.parametrize("filter_name", sorted(FORBIDDEN))
def test_forbidden_item_never_found_by_text(seeded: tuple[Gateway, str], filter_name: str) -> None:
    gateway, key = seeded
    forbidden = FORBIDDEN[filter_name]
    token = forbidden["text"].split()[0]
    response = gateway.retrieve(key, {"task": SALES_TASK, "query": token})
    assert response.status_code == 200
    assert_nothing_of(response, forbidden)
    assert_empty_like_a_miss(gateway, key, response)


@pytest.mark.parametrize("filter_name", sorted(VISIBLE))
def test_visible_twin_is_found(seeded: tuple[Gateway, str], filter_name: str) -> None:
    gateway, key = seeded
    visible = VISIBLE[filter_name]
    body: dict[str, Any] = {"task": SALES_TASK, "query": visible["text"].split()[0]}
    if filter_name == "attachment":
        body["entities"] = [{"id": "ent_jane"}]
    response = gateway.retrieve(key, body)
    assert response.status_code == 200
    assert [item["id"] for item in response.json()["items"]] == [visible["id"]]
    assert response.json()["sources"]["lexical"]["count"] == 1


def test_other_tenant_never_seen_even_with_the_same_id(seeded: tuple[Gateway, str]) -> None:
    gateway, key = seeded
    for item in OTHER_TENANT[:2]:
        response = gateway.retrieve(key, {"task": SALES_TASK, "query": item["text"].split()[0]})
        assert_nothing_of(response, item)
        assert "quokkacollision" not in response.text
        assert_empty_like_a_miss(gateway, key, response)
    same_id = gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl"}).json()["items"]
    assert [i["text"] for i in same_id] == [VISIBLE["acl"]["text"]]


def test_kind_outside_the_task_is_never_returned(seeded: tuple[Gateway, str]) -> None:
    gateway, key = seeded
    research = {"type": "research"}  # the research task reads documents only
    response = gateway.retrieve(key, {"task": research, "query": VISIBLE["acl"]["text"].split()[0]})
    assert response.json()["items"] == []
    assert "mem_acl_ok" not in response.text
    narrowed = gateway.retrieve(key, {"task": SALES_TASK, "kinds": ["document"], "query": "wombatacl"})
    assert narrowed.json()["items"] == []


def test_attachment_hides_items_of_other_entities_even_with_no_entity_named(seeded: tuple[Gateway, str]) -> None:
    gateway, key = seeded
    response = gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatattach"})
    assert response.json()["items"] == []
    about_other = gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatattach", "entities": [{"id": "ent_other"}]})
    assert "mem_attached_jane_ok" not in about_other.text
    assert [i["id"] for i in about_other.json()["items"]] == ["mem_attached_other"]  # the subject's own record


def test_exact_source_applies_every_filter_to_an_entitys_records(seeded: tuple[Gateway, str]) -> None:
    gateway, key = seeded
    response = gateway.retrieve(key, {"task": SALES_TASK, "mode": "brief", "entities": [{"email": " Jane@Globex.EXAMPLE "}]})
    body = response.json()
    assert [e["id"] for e in body["entities"]] == ["ent_jane"]
    assert [item["id"] for item in body["items"]] == ["mem_attached_jane_ok"]
    assert body["sources"]["exact"]["count"] == 1
    assert "quokkajane" not in response.text and "mem_jane_finance" not in response.text


def test_entity_the_actor_may_not_see_is_indistinguishable_from_unknown(seeded: tuple[Gateway, str]) -> None:
    gateway, key = seeded
    hidden = gateway.retrieve(key, {"task": SALES_TASK, "mode": "brief", "entities": [{"id": "ent_secret"}]})
    unknown = gateway.retrieve(key, {"task": SALES_TASK, "mode": "brief", "entities": [{"id": "ent_nobody"}]})
    assert hidden.status_code == unknown.status_code == 200
    assert hidden.json()["entities"] == unknown.json()["entities"] == []
    assert hidden.json()["items"] == unknown.json()["items"] == []
    assert hidden.json()["sources"] == {
        **unknown.json()["sources"],
        **{name: {**s, "ms": hidden.json()["sources"][name]["ms"]} for name, s in unknown.json()["sources"].items()},
    }
    assert "quokkasecretent" not in hidden.text


def test_fetch_of_forbidden_and_unknown_ids_look_the_same(seeded: tuple[Gateway, str]) -> None:
    gateway, key = seeded
    forbidden_ids = [item["id"] for item in FORBIDDEN.values()] + [JANE_PRIVATE[0]["id"], "mem_other_tenant"]
    forbidden = gateway.retrieve(key, {"task": SALES_TASK, "fetch": forbidden_ids})
    unknown = gateway.retrieve(key, {"task": SALES_TASK, "fetch": ["nope_1", "nope_2"]})
    assert forbidden.json()["items"] == unknown.json()["items"] == []
    assert forbidden.json()["sources"]["exact"]["count"] == 0
    assert forbidden.json()["empty_reason"] == unknown.json()["empty_reason"]
    allowed = gateway.retrieve(key, {"task": SALES_TASK, "fetch": ["mem_acl_ok", "mem_acl"]})
    assert [i["id"] for i in allowed.json()["items"]] == ["mem_acl_ok"]


def test_as_of_in_the_past_sees_what_was_valid_then(seeded: tuple[Gateway, str]) -> None:
    gateway, key = seeded
    then = gateway.retrieve(key, {"task": SALES_TASK, "query": "quokkaexpired", "as_of": "2025-06-01T00:00:00Z"})
    assert [i["id"] for i in then.json()["items"]] == ["mem_expired"]


def test_audit_row_records_shape_not_text(seeded: tuple[Gateway, str]) -> None:
    gateway, key = seeded
    response = gateway.retrieve(
        key, {"task": SALES_TASK, "query": "wombatacl secretquerytext", "entities": [{"email": "jane@globex.example"}]}
    )
    row = gateway.trace(response.headers["x-trace-id"])
    assert row["tenant"] == "acme" and row["actor"] == "user:alice" and row["decision"] == "allow"
    assert row["policy_revision"] == response.json()["decision"]["policy_revision"]
    assert set(row["lineage"]["packed"]) == {"mem_acl_ok", "mem_attached_jane_ok"}
    assert row["lineage"]["request"]["query"]["length"] == len("wombatacl secretquerytext")
    serialized = str(row)
    assert "secretquerytext" not in serialized and "jane@globex.example" not in serialized
