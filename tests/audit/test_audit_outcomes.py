"""Every outcome leaves a trace (allow, deny, 4xx, 5xx, degraded), and no planted query text, item
text or personal value reaches any record the gateway keeps or emits: audit rows, the decision log,
spans, metrics and logs, searched whole for each planted value."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import MetaData, select

from tests.gateway.observed import observed_gateway
from tests.gateway.pipeline.test_semantic import EmbeddingsDouble, doc

EMAIL = "kim.plantedsson@northwind.example"
PHONE = "+1 415 555 0199"
NAME = "Kimberly Plantedsson"
WORD = "zebracornium"  # a made-up word: found in no record unless something copied text
SECRET = "obsidian ledger reconciliation"
COMMENT = "quietly-planted-comment"
PLANTED = [EMAIL, PHONE, PHONE.replace(" ", ""), "4155550199", NAME, "Plantedsson", WORD, SECRET, COMMENT]

RESEARCH = {"type": "research"}
FAILING = {"type": "explode"}  # the test policy fails to evaluate for this task


def planted_items() -> list[dict[str, Any]]:
    return [
        doc(
            "doc_planted",
            f"{WORD}: {SECRET}. Call {NAME} on {PHONE} or write to {EMAIL}.",
            scope=["research"],
            entity="ent_kim",
            attached_to="ent_kim",
        ),
        doc(
            "doc_plain",
            f"{WORD} quarterly note without personal data",
            scope=["research"],
            entity="ent_kim",
            attached_to="ent_kim",
        ),
        {"id": "ent_kim", "kind": "entity", "entity_type": "contact", "name": NAME, "email": EMAIL, "phone": PHONE, "acl": ["*"]},
    ]


def audit_dump(store: Any) -> str:
    """Every row of every audit table, as text."""
    metadata = MetaData()
    metadata.reflect(store)
    rows = []
    with store.connect() as conn:
        for table in metadata.sorted_tables:
            if table.name.startswith("audit"):
                rows += [f"{table.name}: {tuple(row)}" for row in conn.execute(select(table))]
    return "\n".join(rows)


def test_every_outcome_writes_a_trace_and_no_planted_value_reaches_any_record(
    sqlite_url: str, tmp_path: Path, policy_copy: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    rego = policy_copy / "gateway/request/request.rego"
    # regorus fails the whole evaluation when a built-in gets a bad argument: here, for one task type.
    rego.write_text(
        rego.read_text() + '\nrefusals contains "never" if {\n\tinput.task.type == "explode"\n'
        "\ttime.parse_rfc3339_ns(input.task.type) < 0\n}\n"
    )
    embeddings = EmbeddingsDouble(fail=True)  # the semantic source fails: the answer degrades
    decisions = tmp_path / "decisions.jsonl"
    settings = embeddings.settings(policies_dir=policy_copy, decision_log=decisions)
    try:
        with observed_gateway(sqlite_url, tmp_path, **settings) as seen:
            gateway = seen.gateway
            gateway.ingest("acme", planted_items())
            agent = gateway.key("agent", groups=("research",), clearance="confidential")
            asked = {"query": f"{WORD} {SECRET} {EMAIL} {NAME}", "entities": [{"email": EMAIL}, {"phone": PHONE}]}
            calls = {
                "allow": gateway.retrieve(agent, {"task": RESEARCH, **asked}),
                "degraded": gateway.retrieve(agent, {"task": RESEARCH, **asked}, semantic=True),
                "deny": gateway.retrieve(agent, {"task": {"type": "no_such_task"}, **asked}),
                "4xx": gateway.retrieve(agent, {"task": RESEARCH, **asked, "mode": f"{WORD}-mode"}),
                "5xx": gateway.retrieve(agent, {"task": FAILING, **asked}),
                "malformed": gateway.client.post(
                    "/v1/retrieve", content=f'{{"query": "{WORD} {EMAIL}"', headers=gateway.auth(agent)
                ),
                "unauthenticated": gateway.client.post(
                    "/v1/retrieve", json={"task": RESEARCH, **asked}, headers={"Authorization": f"Bearer gw_{WORD}_{EMAIL}"}
                ),
            }
            allowed = calls["allow"].json()
            assert {"doc_planted", "doc_plain"} <= {i["id"] for i in allowed["items"]}
            trace_id = allowed["trace_id"]
            usage = gateway.client.post(
                f"/v1/traces/{trace_id}/usage", json={"used": ["doc_planted", EMAIL]}, headers=gateway.auth(agent)
            )
            feedback = gateway.client.post(
                f"/v1/traces/{trace_id}/feedback",
                json={"rating": 4, "comment": f"{COMMENT} {EMAIL}"},
                headers=gateway.auth(agent),
            )
            assert usage.status_code == 200 and feedback.status_code == 200
            traces = {outcome: gateway.trace(r.headers["x-trace-id"]) for outcome, r in calls.items()}
            dump = audit_dump(gateway.store)
            spans = "\n".join(span.to_json() for span in seen.finished())
        metrics = seen.metrics_json()
    finally:
        embeddings.close()

    expected = {
        "allow": (200, "allow"),
        "degraded": (200, "allow"),
        "deny": (403, "deny"),
        "4xx": (422, "none"),
        "5xx": (503, "error"),
        "malformed": (400, "none"),
        "unauthenticated": (401, "none"),
    }
    for outcome, (status, decision) in expected.items():
        assert calls[outcome].status_code == status, (outcome, calls[outcome].text)
        assert (traces[outcome]["status_code"], traces[outcome]["decision"]) == (status, decision), outcome
    assert traces["allow"]["lineage"]["packed"] and traces["allow"]["lineage"]["pii"]["masked"]
    assert traces["degraded"]["lineage"]["sources"]["semantic"]["status"] == "error" and calls["degraded"].json()["partial"]
    assert traces["deny"]["lineage"]["decision"]["allow"] is False
    assert traces["5xx"]["error_code"] == "policy_unavailable"
    assert traces["allow"]["lineage"]["request"]["query"]["length"] == len(asked["query"])  # its shape, not its text

    records = {"audit rows": dump, "decision log": decisions.read_text(), "spans": spans, "metrics": metrics, "logs": caplog.text}
    assert all(records.values()), [name for name, text in records.items() if not text]
    assert "doc_planted" in dump and "doc_planted" in spans  # ids are kept: the search below is not vacuous
    for name, text in records.items():
        for value in PLANTED:
            assert value.lower() not in text.lower(), f"{value!r} found in {name}"
