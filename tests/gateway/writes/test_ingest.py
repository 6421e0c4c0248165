"""PUT /v1/items on SQLite and PostgreSQL: JSON arrays and NDJSON, idempotent by id, each item whole or
not at all, bad items reported beside the good ones, and the tenant always the writer's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import func
from sqlmodel import Session, col, select

from core.tables import Item, ItemPrincipal, ItemScope, ItemValues
from tests.conftest import Gateway
from tests.gateway.fixtures import SALES_TASK, memory

NDJSON = {"Content-Type": "application/x-ndjson"}


def writer(gateway: Gateway, tenant: str = "acme") -> dict[str, str]:
    return gateway.auth(gateway.key(f"writer-{tenant}", tenant=tenant, roles=("ingest",)))


def put(gateway: Gateway, items: list[Any], tenant: str = "acme") -> Any:
    return gateway.client.put("/v1/items", json=items, headers=writer(gateway, tenant))


def put_ndjson(gateway: Gateway, lines: list[str], tenant: str = "acme") -> Any:
    content = "\n".join(lines) + "\n"
    return gateway.client.put("/v1/items", content=content.encode(), headers={**writer(gateway, tenant), **NDJSON})


def report(response: Any) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"created", "updated", "unchanged", "rejected"}
    return body


def counts(body: dict[str, Any]) -> tuple[int, int, int]:
    return body["created"], body["updated"], body["unchanged"]


def sales_agent(gateway: Gateway, tenant: str = "acme") -> str:
    return gateway.key(f"sales-{tenant}", tenant=tenant, groups=("sales",), clearance="confidential")


def found(gateway: Gateway, key: str, query: str, task: dict[str, Any] = SALES_TASK) -> list[str]:
    response = gateway.retrieve(key, {"task": task, "query": query})
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


def texts(gateway: Gateway, key: str, query: str) -> list[str]:
    response = gateway.retrieve(key, {"task": SALES_TASK, "query": query})
    assert response.status_code == 200, response.text
    return [item["text"] for item in response.json()["items"]]


def stored(gateway: Gateway, tenant: str, item_id: str) -> Item | None:
    with Session(gateway.store) as session:
        return session.exec(select(Item).where(Item.tenant == tenant, Item.id == item_id)).first()


def item_count(gateway: Gateway) -> int:
    with Session(gateway.store) as session:
        return int(session.exec(select(func.count()).select_from(Item)).one())


ITEMS = [
    memory("mem_one", "platypusone first note"),
    memory("mem_two", "platypustwo second note"),
    {
        "id": "doc_one",
        "kind": "document",
        "document": "guide",
        "section": "Intro",
        "text": "platypusdoc guide section",
        "acl": ["*"],
        "scope": ["sales"],
    },
    {"id": "ent_one", "kind": "entity", "entity_type": "contact", "name": "One", "email": "one@example.com", "acl": ["*"]},
    {
        "id": "prop_one",
        "kind": "property",
        "entity": "ent_one",
        "name": "stage",
        "value": "platypusprop",
        "acl": ["*"],
        "scope": ["sales"],
    },
]


# ---------------------------------------------------------------------------
# Formats and idempotency
# ---------------------------------------------------------------------------


def test_json_array_is_ingested(gateway: Gateway) -> None:
    body = report(put(gateway, ITEMS))
    assert counts(body) == (5, 0, 0) and body["rejected"] == []
    key = sales_agent(gateway)
    assert found(gateway, key, "platypusone") == ["mem_one"]
    assert found(gateway, key, "platypusdoc") == ["doc_one"]
    assert stored(gateway, "acme", "ent_one") is not None


def test_ndjson_is_ingested(gateway: Gateway) -> None:
    lines = ["", *(json.dumps(item) for item in ITEMS[:3]), "   "]
    body = report(put_ndjson(gateway, lines))
    assert counts(body) == (3, 0, 0) and body["rejected"] == []
    key = sales_agent(gateway)
    assert found(gateway, key, "platypustwo") == ["mem_two"]
    assert found(gateway, key, "platypusdoc") == ["doc_one"]


def test_json_and_ndjson_are_the_same_items(gateway: Gateway) -> None:
    report(put(gateway, ITEMS))
    again = report(put_ndjson(gateway, [json.dumps(item) for item in ITEMS]))
    assert counts(again) == (0, 0, 5)


def test_reingesting_the_same_items_changes_nothing(gateway: Gateway) -> None:
    assert counts(report(put(gateway, ITEMS))) == (5, 0, 0)
    assert counts(report(put(gateway, ITEMS))) == (0, 0, 5)
    reordered = [{**ITEMS[0], "acl": ["user:b", "user:a", "*"]}]
    assert counts(report(put(gateway, reordered))) == (0, 1, 0)
    shuffled = [{**ITEMS[0], "acl": ["*", "user:a", "user:b", "user:a"]}]
    assert counts(report(put(gateway, shuffled))) == (0, 0, 1)  # same set of principals: unchanged
    assert item_count(gateway) == 5


def test_changed_text_is_an_update_and_the_old_text_is_gone(gateway: Gateway) -> None:
    report(put(gateway, ITEMS))
    changed = [ITEMS[0] | {"text": "echidnanew replacement note"}, *ITEMS[1:]]
    body = report(put(gateway, changed))
    assert counts(body) == (0, 1, 4)
    key = sales_agent(gateway)
    assert texts(gateway, key, "echidnanew") == ["echidnanew replacement note"]
    assert found(gateway, key, "platypusone") == []
    fetched = gateway.retrieve(key, {"task": SALES_TASK, "fetch": ["mem_one"]}).json()["items"]
    assert [i["text"] for i in fetched] == ["echidnanew replacement note"]
    assert item_count(gateway) == 5


def test_a_mixed_batch_counts_each_outcome(gateway: Gateway) -> None:
    report(put(gateway, ITEMS[:2]))
    body = report(put(gateway, [ITEMS[0], ITEMS[1] | {"text": "platypustwo edited"}, ITEMS[2], {"id": "x"}]))
    assert counts(body) == (1, 1, 1)
    assert [r["index"] for r in body["rejected"]] == [3]


# ---------------------------------------------------------------------------
# Bad items beside good ones
# ---------------------------------------------------------------------------

BAD_ITEMS: list[tuple[str, Any, str | None, str]] = [
    # (case, entry, id reported, a reason starts with)
    ("missing_acl", {"id": "bad_acl", "kind": "memory", "text": "platypusbad"}, "bad_acl", "acl:"),
    ("empty_acl", memory("bad_empty_acl", "platypusbad") | {"acl": []}, "bad_empty_acl", "acl:"),
    ("bad_principal", memory("bad_principal", "platypusbad", acl=["team:sales"]), "bad_principal", "acl:"),
    ("bad_timestamp", memory("bad_time", "platypusbad", valid_from="yesterday"), "bad_time", "valid_from:"),
    ("timestamp_without_offset", memory("bad_offset", "platypusbad", valid_to="2030-01-01T00:00:00"), "bad_offset", "valid_to:"),
    (
        "timestamp_out_of_range",
        memory("bad_range", "platypusbad", recorded_at="0001-01-01T00:00:00+01:00"),
        "bad_range",
        "recorded_at:",
    ),
    ("unknown_kind", memory("bad_kind", "platypusbad") | {"kind": "note"}, "bad_kind", "kind:"),
    ("unknown_field", memory("bad_field", "platypusbad", colour="blue"), "bad_field", "colour:"),
    ("tenant_field", memory("bad_tenant", "platypusbad", tenant="globex"), "bad_tenant", "tenant:"),
    ("bad_sensitivity", memory("bad_sens", "platypusbad", sensitivity="secret"), "bad_sens", "sensitivity:"),
    ("bad_id", memory("bad id with spaces", "platypusbad"), "bad id with spaces", "id:"),
    ("memory_without_text", memory("bad_text", "   "), "bad_text", "item:"),
    ("non_object", 42, None, "item:"),
    ("list_entry", [memory("bad_nested", "platypusbad")], None, "item:"),
]


@pytest.mark.parametrize(("case", "entry", "reported_id", "reason"), BAD_ITEMS, ids=[c[0] for c in BAD_ITEMS])
def test_one_bad_item_does_not_block_the_others(
    gateway: Gateway, case: str, entry: Any, reported_id: str | None, reason: str
) -> None:
    body = report(put(gateway, [ITEMS[0], entry, ITEMS[1]]))
    assert counts(body) == (2, 0, 0)
    assert len(body["rejected"]) == 1
    rejection = body["rejected"][0]
    assert rejection["index"] == 1
    assert rejection["id"] == reported_id
    assert any(error.startswith(reason) for error in rejection["errors"]), rejection
    key = sales_agent(gateway)
    assert found(gateway, key, "platypusone") == ["mem_one"]
    assert found(gateway, key, "platypustwo") == ["mem_two"]
    assert found(gateway, key, "platypusbad") == []
    if reported_id:
        assert stored(gateway, "acme", reported_id) is None
        assert stored(gateway, "globex", reported_id) is None
    assert item_count(gateway) == 2


def test_every_bad_item_is_reported_in_one_batch(gateway: Gateway) -> None:
    entries = [ITEMS[0]] + [entry for _, entry, _, _ in BAD_ITEMS] + [ITEMS[1]]
    body = report(put(gateway, entries))
    assert counts(body) == (2, 0, 0)
    assert [r["index"] for r in body["rejected"]] == list(range(1, len(BAD_ITEMS) + 1))
    assert [r["id"] for r in body["rejected"]] == [reported for _, _, reported, _ in BAD_ITEMS]


def test_bad_ndjson_line_is_reported_in_place(gateway: Gateway) -> None:
    lines = [json.dumps(ITEMS[0]), "", "{not json", json.dumps(ITEMS[1]), "[1, 2]", '{"id": "half", "kind": "memo']
    body = report(put_ndjson(gateway, lines))
    assert counts(body) == (2, 0, 0)
    rejected = body["rejected"]
    assert [r["index"] for r in rejected] == [1, 3, 4]  # blank lines are not entries
    assert rejected[0] == {"index": 1, "id": None, "errors": ["line 3: not valid JSON"]}
    assert rejected[1]["errors"] == ["item: expected a JSON object"]
    assert rejected[2]["errors"] == ["line 6: not valid JSON"]
    key = sales_agent(gateway)
    assert found(gateway, key, "platypusone") == ["mem_one"]
    assert found(gateway, key, "platypustwo") == ["mem_two"]


def test_rejection_reasons_do_not_echo_values(gateway: Gateway) -> None:
    marker = "qqsecretmarkerqq"
    entries = [
        memory("r1", "platypusbad", valid_from=f"2026-01-01T{marker}"),
        memory("r2", "platypusbad", acl=[f"team:{marker}"]),
        memory("r3", "platypusbad", sensitivity=marker),
        memory("r4", "platypusbad") | {"kind": marker},
    ]
    response = put(gateway, entries)
    assert len(report(response)["rejected"]) == 4
    assert marker not in response.text


def test_rejected_update_keeps_the_previous_version(gateway: Gateway) -> None:
    report(put(gateway, [memory("mem_keep", "platypuskeep original", acl=["group:sales"])]))
    body = report(put(gateway, [memory("mem_keep", "platypuskeep broken", acl=["group:sales"], valid_from="nope")]))
    assert counts(body) == (0, 0, 0) and len(body["rejected"]) == 1
    key = sales_agent(gateway)
    assert texts(gateway, key, "platypuskeep") == ["platypuskeep original"]


# ---------------------------------------------------------------------------
# Each item whole: its principals and scopes follow it
# ---------------------------------------------------------------------------


def values_of(gateway: Gateway, table: type[ItemValues], column: Any, tenant: str, item_id: str) -> set[str]:
    """An item's rows of `table` (its principals, scopes or tags), read as `column`."""
    with Session(gateway.store) as session:
        rows = session.exec(
            select(column).join(Item, col(Item.pk) == col(table.item_pk)).where(Item.tenant == tenant, Item.id == item_id)
        ).all()
    return set(rows)


def principals_of(gateway: Gateway, tenant: str, item_id: str) -> set[str]:
    return values_of(gateway, ItemPrincipal, ItemPrincipal.principal, tenant, item_id)


def scopes_of(gateway: Gateway, tenant: str, item_id: str) -> set[str]:
    return values_of(gateway, ItemScope, ItemScope.scope, tenant, item_id)


def test_changing_acl_replaces_the_principals(gateway: Gateway) -> None:
    report(put(gateway, [memory("mem_acl", "wallabyacl account note", acl=["group:sales", "user:carol"])]))
    sales = sales_agent(gateway)
    # A policy admin is granted the sales task without being in the sales group: the ACL decides.
    finance = gateway.key("finance", roles=("agent", "policy_admin"), groups=("finance",), clearance="confidential")
    assert found(gateway, sales, "wallabyacl") == ["mem_acl"]
    assert found(gateway, finance, "wallabyacl") == []

    body = report(put(gateway, [memory("mem_acl", "wallabyacl account note", acl=["group:finance"])]))
    assert counts(body) == (0, 1, 0)
    assert principals_of(gateway, "acme", "mem_acl") == {"group:finance"}
    assert found(gateway, sales, "wallabyacl") == []
    assert gateway.retrieve(sales, {"task": SALES_TASK, "fetch": ["mem_acl"]}).json()["items"] == []
    assert found(gateway, finance, "wallabyacl") == ["mem_acl"]


def test_changing_scope_replaces_the_scopes(gateway: Gateway) -> None:
    report(put(gateway, [memory("mem_scope", "wallabyscope note")]))
    sales = sales_agent(gateway)
    assert found(gateway, sales, "wallabyscope") == ["mem_scope"]
    report(put(gateway, [memory("mem_scope", "wallabyscope note", scope=["support"])]))
    assert scopes_of(gateway, "acme", "mem_scope") == {"support"}
    assert found(gateway, sales, "wallabyscope") == []
    support = gateway.key("support", groups=("support",))
    assert found(gateway, support, "wallabyscope", {"type": "support_ticket", "scope": "support"}) == ["mem_scope"]


# ---------------------------------------------------------------------------
# Who may write, and where it lands
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("roles", [("agent",), ("auditor",), ("policy_admin",), ()])
def test_writer_without_the_ingest_role_is_403_and_nothing_is_written(gateway: Gateway, roles: tuple[str, ...]) -> None:
    key = gateway.key("notawriter", roles=roles)
    response = gateway.client.put("/v1/items", json=ITEMS, headers=gateway.auth(key))
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "forbidden" and "ingest" in error["message"]
    assert item_count(gateway) == 0
    row = gateway.trace(response.headers["x-trace-id"])
    assert (row["status_code"], row["tenant"], row["actor"]) == (403, "acme", "user:notawriter")
    assert found(gateway, sales_agent(gateway), "platypusone") == []


def test_ingest_without_credential_writes_nothing(gateway: Gateway) -> None:
    response = gateway.client.put("/v1/items", json=ITEMS)
    assert response.status_code == 401
    assert item_count(gateway) == 0


def test_items_land_in_the_writers_tenant(gateway: Gateway) -> None:
    report(put(gateway, [memory("mem_acme", "bilbyacme tenant note")], tenant="acme"))
    assert stored(gateway, "acme", "mem_acme") is not None
    assert stored(gateway, "globex", "mem_acme") is None
    assert found(gateway, sales_agent(gateway, "acme"), "bilbyacme") == ["mem_acme"]
    globex = sales_agent(gateway, "globex")
    response = gateway.retrieve(globex, {"task": SALES_TASK, "query": "bilbyacme"})
    assert response.json()["items"] == [] and "mem_acme" not in response.text
    assert gateway.retrieve(globex, {"task": SALES_TASK, "fetch": ["mem_acme"]}).json()["items"] == []


def test_ingest_audit_row_records_the_writer_and_counts(gateway: Gateway) -> None:
    response = put(gateway, ITEMS[:2] + [{"id": "x"}])
    row = gateway.trace(response.headers["x-trace-id"])
    assert (row["tenant"], row["actor"], row["status_code"]) == ("acme", "user:writer-acme", 200)
    assert row["lineage"]["ingest"] == {"received": 3, "created": 2, "updated": 0, "unchanged": 0, "rejected": 1}
    assert "platypusone" not in json.dumps(row)


def test_same_id_in_two_tenants_are_two_items(gateway: Gateway) -> None:
    assert counts(report(put(gateway, [memory("mem_shared", "quollshared acme version")], tenant="acme"))) == (1, 0, 0)
    assert counts(report(put(gateway, [memory("mem_shared", "quollshared globex version")], tenant="globex"))) == (1, 0, 0)
    acme, globex = sales_agent(gateway, "acme"), sales_agent(gateway, "globex")
    assert texts(gateway, acme, "quollshared") == ["quollshared acme version"]
    assert texts(gateway, globex, "quollshared") == ["quollshared globex version"]

    assert counts(report(put(gateway, [memory("mem_shared", "quollshared acme edited")], tenant="acme"))) == (0, 1, 0)
    assert texts(gateway, acme, "quollshared") == ["quollshared acme edited"]
    assert texts(gateway, globex, "quollshared") == ["quollshared globex version"]
    report(put(gateway, [memory("mem_shared", "quollshared globex version", acl=["group:finance"])], tenant="globex"))
    assert principals_of(gateway, "acme", "mem_shared") == {"*"}
    assert texts(gateway, acme, "quollshared") == ["quollshared acme edited"]
    assert texts(gateway, globex, "quollshared") == []


# ---------------------------------------------------------------------------
# Bodies that are not a batch at all
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "headers", "expected"),
    [
        (b"", {}, "body"),
        (b"  \n\n ", {}, "body"),
        (b"", NDJSON, "body"),
        (b'[{"id": "a", "kind": "memory"', {}, "malformed JSON"),
        (b'[{"id": "a"},]', {}, "malformed JSON"),
        (b"[" * 100_000, {}, "malformed JSON"),
        (b"[" + b"1" * 5000 + b"]", {}, "malformed JSON"),
        (b"\xff\xfe[]", {}, "UTF-8"),
    ],
    ids=["empty", "whitespace", "empty_ndjson", "truncated_array", "trailing_comma", "too_deep", "integer_too_long", "not_utf8"],
)
def test_body_that_is_not_a_batch_is_400(gateway: Gateway, content: bytes, headers: dict[str, str], expected: str) -> None:
    response = gateway.client.put("/v1/items", content=content, headers={**writer(gateway), **headers})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "bad_request" and expected in error["message"]
    assert "Traceback" not in response.text
    assert gateway.trace(response.headers["x-trace-id"])["status_code"] == 400
    assert item_count(gateway) == 0
