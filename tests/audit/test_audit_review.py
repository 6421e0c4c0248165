"""The review API: auditors list, filter, page, open and export their own tenant's traces; agents
report usage and feedback about their own calls; nothing of another tenant, no text, ever."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from tests.conftest import Gateway
from tests.gateway.fixtures import SALES_TASK, memory

SECRET_QUERY = "zanzibar pricing for the merger"


def seed(gateway: Gateway) -> tuple[str, list[str]]:
    gateway.ingest("acme", [memory("mem_a", "zanzibar pricing note"), memory("mem_b", "zanzibar renewal note")])
    gateway.ingest("globex", [memory("mem_g", "zanzibar globex note")])
    alice = gateway.key("alice", groups=("sales",), clearance="confidential")
    traces = []
    for _ in range(3):
        traces.append(gateway.retrieve(alice, {"task": SALES_TASK, "query": SECRET_QUERY}).json()["trace_id"])
    gateway.retrieve(alice, {"task": {"type": "no_such_task"}, "query": "x"})  # a denial
    mallory = gateway.key("mallory", tenant="globex", groups=("sales",), clearance="confidential")
    gateway.retrieve(mallory, {"task": SALES_TASK, "query": SECRET_QUERY})
    return alice, traces


def auditor(gateway: Gateway, tenant: str = "acme") -> dict[str, str]:
    return gateway.auth(gateway.key(f"auditor-{tenant}", tenant=tenant, roles=("auditor",)))


def get(gateway: Gateway, path: str, tenant: str = "acme", **params: Any) -> Any:
    return gateway.client.get(path, params=params, headers=auditor(gateway, tenant))


def test_list_filters_pages_newest_first_and_stays_in_the_tenant(gateway: Gateway) -> None:
    _, traces = seed(gateway)
    everything = get(gateway, "/v1/audit/traces").json()["traces"]
    assert [t["trace_id"] for t in everything if t["endpoint"] == "retrieve" and t["decision"] == "allow"] == traces[::-1]
    assert {t["decision"] for t in everything} >= {"allow", "deny"}
    assert all(t["actor"] != "user:mallory" for t in everything)
    denied = get(gateway, "/v1/audit/traces", decision="deny").json()["traces"]
    assert len(denied) == 1 and denied[0]["task"] == "no_such_task"
    by_item = get(gateway, "/v1/audit/traces", item="mem_a").json()["traces"]
    assert [t["trace_id"] for t in by_item] == traces[::-1]
    assert get(gateway, "/v1/audit/traces", item="mem_g").json()["traces"] == []  # globex's item, globex's calls
    pages, cursor = [], None
    while True:
        body = get(gateway, "/v1/audit/traces", actor="user:alice", limit=2, **({"cursor": cursor} if cursor else {})).json()
        pages.append([t["trace_id"] for t in body["traces"]])
        cursor = body["cursor"]
        if not cursor:
            break
    flat = [t for page in pages for t in page]
    assert len(flat) == len(set(flat)) == 4 and all(len(p) <= 2 for p in pages)
    assert get(gateway, "/v1/audit/traces", limit=0).status_code == 400
    assert get(gateway, "/v1/audit/traces", since="yesterday").status_code == 400
    assert get(gateway, "/v1/audit/traces", bogus="1").status_code == 400


def test_one_trace_whole_with_usage_and_feedback_from_its_own_agent(gateway: Gateway) -> None:
    alice, traces = seed(gateway)
    trace_id = traces[0]
    used = gateway.client.post(
        f"/v1/traces/{trace_id}/usage", json={"used": ["mem_a", "mem_never_returned"]}, headers=gateway.auth(alice)
    )
    assert used.status_code == 200 and used.json() == {"trace_id": trace_id, "recorded": ["mem_a"], "ignored": 1}
    rated = gateway.client.post(
        f"/v1/traces/{trace_id}/feedback", json={"rating": 4, "comment": "Jane Roe found it useful"}, headers=gateway.auth(alice)
    )
    assert rated.status_code == 200
    whole = get(gateway, f"/v1/audit/traces/{trace_id}").json()
    assert whole["used"] == ["mem_a"] and whole["feedback"][0]["rating"] == 4
    assert set(whole["lineage"]["packed"]) == {"mem_a", "mem_b"}
    assert "Jane Roe" not in json.dumps(whole) and SECRET_QUERY not in json.dumps(whole)
    # Only the agent that made the call may report on it; anyone else gets the same 404.
    bob = gateway.key("bob", groups=("sales",), clearance="confidential")
    mallory = gateway.key("mallory", tenant="globex", groups=("sales",), clearance="confidential")
    for key in (bob, mallory):
        response = gateway.client.post(f"/v1/traces/{trace_id}/usage", json={"used": ["mem_a"]}, headers=gateway.auth(key))
        assert response.status_code == 404 and response.json()["error"]["message"] == "trace: no such trace"
    assert (
        gateway.client.post(f"/v1/traces/{trace_id}/feedback", json={"rating": 9}, headers=gateway.auth(alice)).status_code == 400
    )
    assert (
        gateway.client.post(f"/v1/traces/{trace_id}/usage", json={"used": "mem_a"}, headers=gateway.auth(alice)).status_code
        == 400
    )


def test_an_auditor_of_one_tenant_reads_nothing_of_another(gateway: Gateway) -> None:
    _, traces = seed(gateway)
    assert get(gateway, f"/v1/audit/traces/{traces[0]}", tenant="globex").status_code == 404
    theirs = get(gateway, "/v1/audit/traces", tenant="globex").json()["traces"]
    assert theirs and all(t["trace_id"] not in traces for t in theirs)
    exported = get(gateway, "/v1/audit/export", tenant="globex").text
    assert all(t not in exported for t in traces)
    agent = gateway.key("alice", groups=("sales",), clearance="confidential")
    assert gateway.client.get("/v1/audit/traces", headers=gateway.auth(agent)).status_code == 403


def test_export_streams_jsonl_and_csv_without_text(gateway: Gateway) -> None:
    _, traces = seed(gateway)
    jsonl = get(gateway, "/v1/audit/export", format="jsonl")
    assert jsonl.status_code == 200 and jsonl.headers["content-type"].startswith("application/x-ndjson")
    records = [json.loads(line) for line in jsonl.text.splitlines()]
    assert {r["trace_id"] for r in records} >= set(traces)
    assert [r["seq"] for r in records] == sorted(r["seq"] for r in records)
    table = list(csv.DictReader(io.StringIO(get(gateway, "/v1/audit/export", format="csv").text)))
    assert {row["trace_id"] for row in table} >= set(traces)
    assert SECRET_QUERY not in jsonl.text
    assert get(gateway, "/v1/audit/export", format="xml").status_code == 400
