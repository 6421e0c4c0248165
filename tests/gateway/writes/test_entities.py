"""Entity resolution through the HTTP API: normalised identifiers, merges, tombstones, aliases."""

from __future__ import annotations

from typing import Any

import pytest

from core import identifiers
from core import store as db
from tests.conftest import Gateway
from tests.gateway.fixtures import SALES_TASK, memory


def entity(entity_id: str, entity_type: str = "contact", **fields: Any) -> dict[str, Any]:
    return {"id": entity_id, "kind": "entity", "entity_type": entity_type, "acl": ["*"], **fields}


def writer(gateway: Gateway) -> dict[str, str]:
    return gateway.auth(gateway.key("writer-acme", roles=("ingest",)))


def agent(gateway: Gateway) -> str:
    return gateway.key("alice", groups=("sales",), clearance="confidential")


def resolve(gateway: Gateway, *refs: dict[str, str], **extra: Any) -> Any:
    response = gateway.retrieve(agent(gateway), {"task": SALES_TASK, "entities": list(refs), **extra})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("https://www.Acme.co.uk/about", ("domain", "acme.co.uk")),
        ("shop.acme.com", ("domain", "acme.com")),
        ("ACME.COM.", ("domain", "acme.com")),
        ("https://www.linkedin.com/in/Jane-Doe/?trk=x", ("profile", "linkedin.com/in/jane-doe")),
        ("http://[::1", ("domain", "")),
    ],
)
def test_websites_reduce_to_registrable_domain_or_profile(given: str, expected: tuple[str, str]) -> None:
    found = identifiers.website(given)
    assert (found.kind, found.value) == expected


def test_phones_and_emails_normalise() -> None:
    assert identifiers.phone("+44 (0)20 7946 0958") == identifiers.phone("+44 20 7946 0958") == "442079460958"
    assert identifiers.phone("(555) 010-2000") == "5550102000"
    assert identifiers.email("  Jane@Acme.COM ") == "jane@acme.com"


def test_each_identifier_resolves_to_its_kind_of_entity(gateway: Gateway) -> None:
    gateway.ingest(
        "acme",
        [
            entity("ent_jane", email="Jane@Acme.co.uk", phone="+1 (555) 010-2000", website="https://linkedin.com/in/jane-doe"),
            entity("ent_acme", "company", name="Acme", website="https://www.acme.co.uk"),
        ],
    )
    body = resolve(
        gateway,
        {"email": " JANE@acme.CO.UK"},
        {"phone": "+1 555 010 2000"},
        {"website": "https://www.linkedin.com/in/Jane-Doe/"},
        {"website": "http://shop.acme.co.uk/about"},
    )
    by_id = {e["id"]: e for e in body["entities"]}
    assert set(by_id) == {"ent_jane", "ent_acme"}
    assert by_id["ent_jane"]["kind"] == "contact" and by_id["ent_jane"]["resolved_from"] == {"email": "jane@acme.co.uk"}
    assert by_id["ent_acme"]["kind"] == "company" and by_id["ent_acme"]["resolved_from"] == {"website": "acme.co.uk"}
    # A contact's email domain is never mistaken for a company website, and vice versa.
    assert [e["id"] for e in resolve(gateway, {"website": "acme.co.uk"})["entities"]] == ["ent_acme"]


def test_merged_entity_resolves_to_its_survivor_through_a_chain(gateway: Gateway) -> None:
    gateway.ingest(
        "acme",
        [
            entity("ent_old", email="old@acme.com"),
            entity("ent_mid"),
            entity("ent_new"),
            memory("mem_old", "zebrafact said by the old record", entity="ent_old"),
            memory("mem_new", "zebrafact said by the survivor", entity="ent_new"),
        ],
    )
    for source, into in (("ent_old", "ent_mid"), ("ent_mid", "ent_new")):
        response = gateway.client.post(f"/v1/entities/{source}/merge", json={"into": into}, headers=writer(gateway))
        assert response.status_code == 200, response.text
    assert response.json()["survivor"] == "ent_new"
    body = resolve(gateway, {"email": "old@acme.com"}, query="zebrafact")
    [survivor] = body["entities"]
    assert survivor["id"] == "ent_new" and survivor["status"] == "live"
    assert set(survivor["merged_from"]) == {"ent_old", "ent_mid"}
    # What the merged records said now belongs to the survivor.
    assert {i["id"] for i in body["items"]} == {"mem_old", "mem_new"}
    # Asking for the survivor directly finds what was merged into it, however many merges back.
    direct = resolve(gateway, {"id": "ent_new"})
    assert set(direct["entities"][0]["merged_from"]) == {"ent_old", "ent_mid"}
    assert {i["id"] for i in direct["items"]} == {"mem_old", "mem_new"}


def test_merge_refuses_cycles_self_merges_and_unknown_ids(gateway: Gateway) -> None:
    gateway.ingest("acme", [entity("ent_a"), entity("ent_b"), entity("ent_c")])
    post = lambda source, into: gateway.client.post(f"/v1/entities/{source}/merge", json={"into": into}, headers=writer(gateway))  # noqa: E731
    assert post("ent_a", "ent_b").status_code == 200
    assert post("ent_b", "ent_c").status_code == 200
    cycle = post("ent_c", "ent_a")
    assert cycle.status_code == 409 and "cycle" in cycle.json()["error"]["message"]
    assert post("ent_a", "ent_a").status_code == 400
    assert post("ent_a", "ent_nope").status_code == 404
    bad = gateway.client.post("/v1/entities/ent_a/merge", json={"into": 7}, headers=writer(gateway))
    assert bad.status_code == 400 and "into" in bad.json()["error"]["message"]
    # Agents cannot merge.
    denied = gateway.client.post("/v1/entities/ent_a/merge", json={"into": "ent_b"}, headers=gateway.auth(agent(gateway)))
    assert denied.status_code == 403


def test_a_cycle_already_in_the_store_resolves_every_member_to_one_record(gateway: Gateway) -> None:
    gateway.ingest("acme", [entity("ent_x"), entity("ent_y"), entity("ent_z")])
    from sqlalchemy import update

    from connectors.sql.pushdown import item

    with db.writer(gateway.store).begin() as conn:  # written behind the API's back, as a bad import might
        for source, into in (("ent_x", "ent_y"), ("ent_y", "ent_z"), ("ent_z", "ent_x")):
            conn.execute(update(item).where(item.c.id == source).values(merged_into=into))
    ids = {resolve(gateway, {"id": name})["entities"][0]["id"] for name in ("ent_x", "ent_y", "ent_z")}
    assert ids == {"ent_x"}


def test_merge_into_an_entity_the_actor_cannot_see_resolves_to_nothing(gateway: Gateway) -> None:
    gateway.ingest("acme", [entity("ent_public", email="p@acme.com"), entity("ent_hidden", acl=["group:executives"])])
    gateway.client.post("/v1/entities/ent_public/merge", json={"into": "ent_hidden"}, headers=writer(gateway))
    body = resolve(gateway, {"email": "p@acme.com"})
    assert body["entities"] == []
    assert "ent_hidden" not in str(body)


def test_tombstoned_entity_is_bare_and_its_items_vanish_from_every_connector_at_once(gateway: Gateway) -> None:
    gateway.ingest(
        "acme",
        [
            entity("ent_gone", email="gone@acme.com", name="Gone Person"),
            entity("ent_boss", name="Boss"),
            memory("mem_gone", "narwhal pricing remark about the gone contact", entity="ent_gone", attached_to="ent_gone"),
            memory("mem_about", "narwhal pricing note mentioning the gone contact", entity="ent_gone"),
            memory("mem_stays", "narwhal pricing note about nobody"),
            {"id": "edge_gone", "kind": "edge", "from": "ent_gone", "to": "ent_boss", "relation": "reports_to", "acl": ["*"]},
        ],
    )
    gateway.embed_all()
    ask = {"task": SALES_TASK, "query": "narwhal pricing", "entities": [{"email": "gone@acme.com"}], "mode": "brief"}
    before = gateway.retrieve(agent(gateway), ask, semantic=True).json()
    found = {i["id"] for i in before["items"]}
    assert {"mem_gone", "mem_about", "edge_gone", "mem_stays"} <= found
    assert {"semantic", "lexical"} <= {s for i in before["items"] if i["id"] == "mem_about" for s in i["found_by"]}

    deleted = gateway.client.delete("/v1/entities/ent_gone", headers=writer(gateway))
    assert deleted.status_code == 200 and deleted.json()["hidden_items"] == 3

    after = gateway.retrieve(agent(gateway), ask, semantic=True).json()
    assert after["entities"] == [{"id": "ent_gone", "kind": "contact", "status": "pending_deletion"}]
    assert {i["id"] for i in after["items"]} == {"mem_stays"}
    for name in ("lexical", "semantic", "graph", "exact"):
        assert after["sources"][name]["status"] in ("ok", "empty", "skipped"), after["sources"]
    # Fetching the hidden ids by name gives nothing either, and nothing says why.
    fetched = gateway.retrieve(agent(gateway), {"task": SALES_TASK, "fetch": ["mem_about", "edge_gone"]}).json()
    assert fetched["items"] == [] and fetched["empty_reason"] == "no_relevant_permitted_items"
    # The tombstone cannot be undone by writing the entity again.
    rewrite = gateway.client.put("/v1/entities/ent_gone", json=entity("ent_gone"), headers=writer(gateway))
    assert rewrite.status_code == 422 and "pending deletion" in str(rewrite.json()["rejected"])
    assert gateway.client.delete("/v1/entities/ent_nope", headers=writer(gateway)).status_code == 404


def test_tombstone_of_a_forbidden_entity_is_not_revealed(gateway: Gateway) -> None:
    gateway.ingest("acme", [entity("ent_secret", email="s@acme.com", acl=["group:executives"])])
    gateway.client.delete("/v1/entities/ent_secret", headers=writer(gateway))
    assert resolve(gateway, {"email": "s@acme.com"})["entities"] == []


def test_live_entities_sharing_the_company_domain_join_as_aliases_at_most_20(gateway: Gateway) -> None:
    colleagues = [entity(f"ent_c{i:02d}", email=f"person{i}@acme.com") for i in range(25)]
    gateway.ingest(
        "acme",
        [
            entity("ent_jane", email="jane@acme.com"),
            entity("ent_acme", "company", website="https://acme.com"),
            entity("ent_hidden_colleague", email="h@acme.com", acl=["group:executives"]),
            entity("ent_elsewhere", email="x@globex.com"),
            *colleagues,
        ],
    )
    gateway.client.delete("/v1/entities/ent_c00", headers=writer(gateway))
    [jane] = resolve(gateway, {"email": "jane@acme.com"})["entities"]
    assert len(jane["aliases"]) == 20
    assert "ent_acme" in jane["aliases"]
    assert not {"ent_jane", "ent_hidden_colleague", "ent_elsewhere", "ent_c00"} & set(jane["aliases"])


def test_alias_lookup_failure_degrades_and_says_so(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    from connectors.sql.exact import SqlExactConnector
    from core.errors import ConnectorError

    gateway.ingest("acme", [entity("ent_jane", email="jane@acme.com"), memory("mem_j", "jane said yes", entity="ent_jane")])

    async def broken(*_: Any, **__: Any) -> Any:
        raise ConnectorError("alias lookup failed: OperationalError")

    monkeypatch.setattr(SqlExactConnector, "sharing_domain", broken)
    body = resolve(gateway, {"email": "jane@acme.com"})
    assert [e["id"] for e in body["entities"]] == ["ent_jane"] and body["entities"][0]["aliases"] == []
    assert [i["id"] for i in body["items"]] == ["mem_j"]
    assert body["partial"] is True and "alias lookup failed" in body["sources"]["exact"]["aliases"]


def test_entity_endpoints_validate_input(gateway: Gateway) -> None:
    headers = writer(gateway)
    assert gateway.client.put("/v1/entities/ent_1", json=entity("ent_2"), headers=headers).status_code == 400
    assert gateway.client.put("/v1/entities/ent_1", json=[1], headers=headers).status_code == 400
    missing_type = gateway.client.put("/v1/entities/ent_1", json={"acl": ["*"]}, headers=headers)
    assert missing_type.status_code == 422 and "entity_type" in missing_type.text
    assert gateway.client.put("/v1/entities/bad%20id", json=entity("bad id"), headers=headers).status_code == 400
    ok = gateway.client.put(
        "/v1/entities/ent_1", json={"entity_type": "company", "acl": ["*"], "website": "a.example.com"}, headers=headers
    )
    assert ok.status_code == 200 and ok.json()["created"] == 1
