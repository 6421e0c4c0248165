"""The decision log in OPA's format: one line per policy evaluation, with OPA's field names, the
bundle revision, and nothing that could hold text or personal data."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.policy.decision_log import erase
from tests.conftest import open_gateway
from tests.gateway.fixtures import SALES_TASK, memory

PLANTED = "jane.secret@northwind.com"


def test_each_decision_is_a_line_in_opas_format_without_planted_values(sqlite_url: str, tmp_path: Path) -> None:
    log = tmp_path / "decisions" / "log.jsonl"
    with open_gateway(sqlite_url, tmp_path, decision_log=log) as gateway:
        gateway.ingest("acme", [memory("mem_1", f"quokka note, write to {PLANTED}"),
                                {"id": "ent_j", "kind": "entity", "entity_type": "contact", "email": PLANTED, "acl": ["*"]}])
        key = gateway.key("alice", groups=("sales",), clearance="confidential")
        ok = gateway.retrieve(key, {"task": SALES_TASK, "query": f"quokka {PLANTED}", "entities": [{"email": PLANTED}]})
        assert ok.status_code == 200 and ok.json()["items"]
        denied = gateway.retrieve(key, {"task": {"type": "no_such_task"}, "query": PLANTED})
        assert denied.status_code == 403
        revision = gateway.client.get("/v1/policy", headers=gateway.auth(key)).json()["revision"]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    request_decisions = [e for e in lines if e["path"] == "gateway/request"]
    item_decisions = [e for e in lines if e["path"] == "gateway/items"]
    assert len(request_decisions) >= 2 and item_decisions
    for entry in lines:
        assert {"decision_id", "path", "input", "result", "bundles", "timestamp", "metrics"} <= set(entry)
        assert entry["bundles"] == {"gateway": {"revision": revision}}
        assert entry["metrics"]["timer_rego_query_eval_ns"] > 0
    assert any(e["result"]["allow"] is False for e in request_decisions)
    assert any(e["input"]["items"] for e in item_decisions)
    assert PLANTED not in log.read_text() and "quokka" not in log.read_text()


def test_erase_removes_text_bearing_keys_and_lists_their_paths() -> None:
    kept, erased = erase({"items": [{"id": "m1", "text": "secret"}], "request": {"query": "q", "kinds": ["memory"]}})
    assert kept == {"items": [{"id": "m1"}], "request": {"kinds": ["memory"]}}
    assert erased == ["input/items/*/text", "input/request/query"]
