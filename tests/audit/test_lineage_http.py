"""The lineage through the HTTP stack: new rows are version 2 with typed reasons; a row of the previous
shape, already in the trail, still reads in the review API and on the audit page."""

from __future__ import annotations

import re
from typing import get_args

from audit.record import new_trace_id
from core.instants import utc_now
from gateway.pipeline.stages import TimingField
from tests.audit.test_audit_checkpoints import retrieve_row
from tests.conftest import Gateway
from tests.gateway.fixtures import SALES_TASK, memory
from tests.gateway.http.test_audit_page import signed_in

# As a version-1 gateway wrote it: no version, the skip reason only as text.
VERSION_1 = {
    "request": {"task": {"type": "account_followup", "scope": "sales"}, "mode": "scout"},
    "decision": {"allow": True, "reasons": [], "ms": 0.4},
    "retrieved": {"lexical": ["mem_old"]},
    "dropped_by_policy": [{"id": "mem_hidden", "reason": "acl"}],
    "packed": ["mem_old"],
    "sources": {"semantic": {"status": "skipped", "count": 0, "ms": 0.0, "detail": "query has no words to embed"}},
    "depth": {"requested": "standard", "effective": "fast", "fallback_reason": "no_words_to_embed"},
}


def test_a_new_row_is_version_2_with_its_reasons_as_codes(sqlite_gateway: Gateway) -> None:
    gateway = sqlite_gateway
    gateway.ingest("acme", [memory("mem_1", "wombat note")])
    key = gateway.key("alice", groups=("sales",))
    response = gateway.retrieve(key, {"task": SALES_TASK, "query": "4471 -- ??"}, semantic=True)
    body = response.json()
    assert body["sources"]["semantic"] == {"status": "skipped", "count": 0, "ms": 0.0, "detail": "query has no words to embed"}
    assert body["depth"]["fallback_reason"] == "no_words_to_embed"
    lineage = gateway.trace(body["trace_id"])["lineage"]
    assert lineage["version"] == 2
    assert lineage["sources"]["semantic"]["skip"] == "query has no words to embed"
    assert lineage["sources"]["graph"]["skip"] == "not requested"
    assert lineage["depth"] == {"requested": "standard", "effective": "fast", "fallback_reason": "no_words_to_embed"}
    # Every stage's (but the queue's and synthesis': neither ran) and the total, as docs/http-api.md lists (POST /v1/retrieve).
    assert set(body["timings"]) == set(get_args(TimingField)) - {"queue_ms", "synthesis_ms"} | {"total_ms"}
    assert lineage["timings"] == body["timings"]


def test_a_version_1_row_still_reads_in_the_review_api_and_on_the_page(sqlite_gateway: Gateway) -> None:
    gateway = sqlite_gateway
    trace_id = new_trace_id()
    old = retrieve_row(trace_id, "acme", "user:alice", VERSION_1, utc_now())
    gateway.client.app.state.context.audit.write_sync(old)  # type: ignore[attr-defined]
    auditor = gateway.auth(gateway.key("auditor-acme", roles=("auditor",)))

    opened = gateway.client.get(f"/v1/audit/traces/{trace_id}", headers=auditor).json()
    assert opened["lineage"] == VERSION_1  # returned as it was written (the chain covers it)
    assert opened["task"] == "account_followup"
    by_item = gateway.client.get("/v1/audit/traces", params={"item": "mem_old"}, headers=auditor).json()["traces"]
    assert [t["trace_id"] for t in by_item] == [trace_id]
    assert gateway.client.get("/v1/audit/verify", headers=auditor).json()["ok"] is True

    page = signed_in(gateway).client.get(f"/audit/traces/{trace_id}").text
    assert re.search(r"mem_hidden.*acl", page, re.S)  # dropped by policy, with its reason
    assert "query has no words to embed" in page
