"""The bounded graph through the HTTP API: PUT /v1/edges, then brief retrieves walking from the
resolved entities inside the policy's relations, depth and fan-out."""

from __future__ import annotations

from typing import Any

from tests.conftest import Gateway
from tests.gateway.fixtures import SALES_TASK


def entity(entity_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": entity_id, "kind": "entity", "entity_type": "contact", "acl": ["*"], **fields}


def edge(source: str, relation: str, target: str, **fields: Any) -> dict[str, Any]:
    return {"from": source, "relation": relation, "to": target, "acl": ["*"], **fields}


def put_edges(gateway: Gateway, edges: list[dict[str, Any]]) -> dict[str, Any]:
    writer = gateway.auth(gateway.key("writer-acme", roles=("ingest",)))
    response = gateway.client.put("/v1/edges", json=edges, headers=writer)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def walk(gateway: Gateway, **body: Any) -> list[dict[str, Any]]:
    key = gateway.key("alice", groups=("sales",), clearance="confidential")
    response = gateway.retrieve(key, {"task": SALES_TASK, "mode": "brief", "entities": [{"id": "ent_a"}], **body})
    assert response.status_code == 200, response.text
    assert response.json()["sources"]["graph"]["status"] in ("ok", "empty")
    return [i for i in response.json()["items"] if i["kind"] == "edge"]


def test_edges_are_written_with_derived_ids_and_bad_ones_rejected_alone(gateway: Gateway) -> None:
    gateway.ingest("acme", [entity("ent_a"), entity("ent_b")])
    report = put_edges(
        gateway,
        [
            edge("ent_a", "reports_to", "ent_b", confidence=0.9, weight=2.0),
            {"from": "ent_a", "relation": "owns", "acl": ["*"]},
            edge("ent_a", "works_at", "ent_b", confidence=1.5),
        ],
    )
    assert report["created"] == 1 and len(report["rejected"]) == 2
    assert "to" in str(report["rejected"][0]["errors"]) and "confidence" in str(report["rejected"][1]["errors"])
    [found] = walk(gateway)
    assert found["id"] == "edge:ent_a:reports_to:ent_b"
    assert (found["from"], found["to"], found["relation"], found["confidence"], found["weight"]) == (
        "ent_a",
        "ent_b",
        "reports_to",
        0.9,
        2.0,
    )
    writer = gateway.auth(gateway.key("writer-acme", roles=("ingest",)))
    wrong = gateway.client.put("/v1/edges", json=[{"id": "m", "kind": "memory", "text": "x", "acl": ["*"]}], headers=writer)
    assert wrong.status_code == 400 and "kind" in wrong.json()["error"]["message"]


def test_traversal_respects_depth_and_fan_out(gateway: Gateway) -> None:
    chain = ["ent_a", "ent_b", "ent_c", "ent_d"]
    fans = [f"ent_f{i:02d}" for i in range(14)]
    gateway.ingest("acme", [entity(e) for e in chain + fans])
    put_edges(gateway, [edge(a, "reports_to", b, confidence=0.99) for a, b in zip(chain, chain[1:])])
    put_edges(gateway, [edge("ent_a", "works_at", f, confidence=i / 100) for i, f in enumerate(fans)])
    reached = walk(gateway)
    chain_edges = {(e["from"], e["to"]) for e in reached if e["relation"] == "reports_to"}
    assert chain_edges == {("ent_a", "ent_b"), ("ent_b", "ent_c")}  # account_followup allows depth 2
    fan_edges = [e for e in reached if e["relation"] == "works_at"]
    assert len(fan_edges) == 10 - 1  # fan-out 10 out of ent_a, one slot taken by its reports_to edge
    assert [e["confidence"] for e in fan_edges] == sorted((e["confidence"] for e in fan_edges), reverse=True)
    shallow = walk(gateway, graph={"max_depth": 1})
    assert {(e["from"], e["to"]) for e in shallow if e["relation"] == "reports_to"} == {("ent_a", "ent_b")}
    deeper = walk(gateway, graph={"max_depth": 3})  # the caller cannot widen past the policy's 2
    assert ("ent_c", "ent_d") not in {(e["from"], e["to"]) for e in deeper}


def test_traversal_never_crosses_a_forbidden_relation_or_entity(gateway: Gateway) -> None:
    gateway.ingest(
        "acme",
        [
            entity("ent_a"),
            entity("ent_b"),
            entity("ent_secret", acl=["group:executives"]),
            entity("ent_behind"),
            entity("ent_rival"),
        ],
    )
    put_edges(
        gateway,
        [
            edge("ent_a", "reports_to", "ent_secret"),
            edge("ent_secret", "reports_to", "ent_behind"),
            edge("ent_a", "competes_with", "ent_rival"),  # not a relation the task allows
            edge("ent_a", "owns", "ent_b"),
            edge("ent_a", "works_at", "ent_b", acl=["group:finance"]),  # the edge itself is forbidden
        ],
    )
    reached = {(e["from"], e["relation"], e["to"]) for e in walk(gateway)}
    assert reached == {("ent_a", "owns", "ent_b")}
    narrowed = walk(gateway, graph={"relations": ["reports_to"]})  # the caller's narrower list
    assert narrowed == []
    assert "ent_secret" not in str(walk(gateway))


def test_only_active_edges_valid_at_as_of_are_followed(gateway: Gateway) -> None:
    gateway.ingest("acme", [entity("ent_a"), entity("ent_old"), entity("ent_new"), entity("ent_gone")])
    put_edges(
        gateway,
        [
            edge("ent_a", "works_at", "ent_old", valid_from="2020-01-01T00:00:00Z", valid_to="2024-01-01T00:00:00Z"),
            edge("ent_a", "works_at", "ent_new", valid_from="2024-01-01T00:00:00Z"),
            edge("ent_a", "reports_to", "ent_gone", status="superseded"),
        ],
    )
    assert [e["to"] for e in walk(gateway)] == ["ent_new"]
    assert [e["to"] for e in walk(gateway, as_of="2022-06-01T00:00:00Z")] == ["ent_old"]


def test_graph_is_skipped_for_a_task_without_edges_and_without_entities(gateway: Gateway) -> None:
    key = gateway.key("alice", groups=("sales", "support"), clearance="confidential")
    no_entity = gateway.retrieve(key, {"task": SALES_TASK, "mode": "brief", "query": "x"}).json()
    assert no_entity["sources"]["graph"]["status"] == "skipped"
    support = gateway.retrieve(key, {"task": {"type": "support_ticket"}, "mode": "brief", "entities": [{"id": "ent_a"}]}).json()
    assert support["sources"]["graph"]["status"] == "skipped"
