"""Personal data in returned items, through the HTTP API: masked when the policy says so, per type
for whom it says so, from spans stored after ingest; never in the trace."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from core import store as db
from gateway.privacy.store import analyze_all, item_pii, pending
from tests.conftest import Gateway, open_gateway

RESEARCH = {"type": "research"}
VALUES = {
    "PERSON": "Margaret Thornton",
    "EMAIL_ADDRESS": "m.thornton@northwind.com",
    "PHONE_NUMBER": "+44 20 7946 0958",
    "CREDIT_CARD": "4111 1111 1111 1111",
}
TEXT = (
    f"Escalation guide: {VALUES['PERSON']} owns refunds; write to {VALUES['EMAIL_ADDRESS']} or call "
    f"{VALUES['PHONE_NUMBER']}. Test card {VALUES['CREDIT_CARD']} is used for refund drills."
)


def doc(item_id: str = "doc_refunds", text: str = TEXT, **fields: Any) -> dict[str, Any]:
    return {"id": item_id, "kind": "document", "text": text, "acl": ["*"], "scope": ["research"], **fields}


def ask(gateway: Gateway, key: str, **body: Any) -> dict[str, Any]:
    response = gateway.retrieve(key, {"task": RESEARCH, "query": "refund escalation guide", **body})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def analyse(gateway: Gateway) -> None:
    """Everything waiting analysed and stored. The service's own analysis worker may hold an item's
    claim when this runs (`analyze_all` then leaves it to the worker): wait until none is pending, or
    a request would analyse it itself (seen once in CI: `analysed_at_request` 1)."""
    privacy = gateway.client.app.state.context.privacy  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while True:
        analyze_all(gateway.store, privacy.detector)
        if pending(gateway.store, privacy.detector.version) == 0:
            return
        assert time.monotonic() < deadline, "an item is still waiting for analysis after 60 s"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def analysed(module_gateway: Gateway) -> Gateway:
    """The research document, loaded and analysed once per backend, for the tests that only read it.
    The tests that load another version of it (or other documents the question matches) keep their own."""
    module_gateway.ingest("acme", [doc()])
    analyse(module_gateway)
    return module_gateway


def test_research_items_come_back_masked_and_the_trace_holds_types_and_counts_only(analysed: Gateway) -> None:
    gateway = analysed
    body = ask(gateway, gateway.key("rita", clearance="internal"))
    [item] = body["items"]
    for value in VALUES.values():
        assert value not in item["text"]
    assert "<PERSON_1>" in item["text"] and "<EMAIL_ADDRESS_1>" in item["text"] and "<CREDIT_CARD_1>" in item["text"]
    assert body["budget"]["used_bytes"] == len(item["text"].encode())  # the budget counts what is returned
    trace = gateway.trace(body["trace_id"])
    assert trace["lineage"]["pii"]["masked"] == {"PERSON": 1, "EMAIL_ADDRESS": 1, "PHONE_NUMBER": 1, "CREDIT_CARD": 1}
    assert trace["lineage"]["pii"]["analysed_at_request"] == 0
    stored = json.dumps(trace, default=str)
    for value in VALUES.values():
        assert value not in stored


def test_the_policy_reveals_types_per_principal(analysed: Gateway) -> None:
    gateway = analysed
    cleared = gateway.key("carl", groups=("privacy-cleared",), clearance="internal")
    [item] = ask(gateway, cleared)["items"]
    assert VALUES["EMAIL_ADDRESS"] in item["text"] and VALUES["PHONE_NUMBER"] in item["text"]
    assert VALUES["PERSON"] not in item["text"] and VALUES["CREDIT_CARD"] not in item["text"]


def test_a_task_whose_policy_does_not_mask_returns_values(gateway: Gateway) -> None:
    gateway.ingest("acme", [doc(scope=["sales"])])
    key = gateway.key("alice", groups=("sales",), clearance="confidential")
    response = gateway.retrieve(key, {"task": {"type": "account_followup"}, "query": "refund escalation guide"})
    [item] = response.json()["items"]
    assert item["text"] == TEXT


def test_spans_are_stored_after_ingest_and_text_without_them_is_analysed_at_request(sqlite_url: str, tmp_path: Path) -> None:
    with open_gateway(sqlite_url, tmp_path, pii_background=False) as gateway:
        gateway.ingest("acme", [doc()])
        key = gateway.key("rita", clearance="internal")
        version = gateway.client.app.state.context.privacy.detector.version  # type: ignore[attr-defined]
        assert pending(gateway.store, version) == 1
        first = ask(gateway, key)
        assert gateway.trace(first["trace_id"])["lineage"]["pii"]["analysed_at_request"] == 1
        analyse(gateway)
        assert pending(gateway.store, version) == 0
        second = ask(gateway, key)
        assert gateway.trace(second["trace_id"])["lineage"]["pii"]["analysed_at_request"] == 0
        assert second["items"][0]["text"] == first["items"][0]["text"]
        # Another analyzer configuration makes every stored analysis stale again.
        with db.writer(gateway.store).begin() as conn:
            conn.execute(update(item_pii).values(version="presidio:older"))
        assert pending(gateway.store, version) == 1
        # A changed text is analysed again too.
        analyse(gateway)
        gateway.ingest("acme", [doc(text="Escalations now go to Daniel Okafor.")])
        assert pending(gateway.store, version) == 1


def test_expanded_pages_are_masked_too(gateway: Gateway) -> None:
    gateway.ingest(
        "acme",
        [
            doc(f"doc_{i}", f"Refund escalation guide part {i}: ask {VALUES['PERSON']} at {VALUES['EMAIL_ADDRESS']}.")
            for i in range(8)
        ],
    )
    key = gateway.key("rita", clearance="internal")
    first = ask(gateway, key, budget={"bytes": 200})
    texts = [i["text"] for i in first["items"]]
    cursor = first["cursor"]
    while cursor:
        page = gateway.retrieve(key, {"task": RESEARCH, "cursor": cursor, "budget": {"bytes": 400}}).json()
        texts += [i["text"] for i in page["items"]]
        cursor = page["cursor"]
    assert len(texts) == 8
    assert all(VALUES["PERSON"] not in t and VALUES["EMAIL_ADDRESS"] not in t for t in texts)


def test_masking_without_a_detector_fails_closed(sqlite_url: str, tmp_path: Path) -> None:
    with open_gateway(sqlite_url, tmp_path, pii="none") as gateway:
        gateway.ingest("acme", [doc()])
        key = gateway.key("rita", clearance="internal")
        response = gateway.retrieve(key, {"task": RESEARCH, "query": "refund escalation guide"})
        assert response.status_code == 503 and response.json()["error"]["code"] == "masking_unavailable"
        assert VALUES["PERSON"] not in response.text
        sales = gateway.key("alice", groups=("sales",), clearance="confidential")
        assert gateway.retrieve(sales, {"task": {"type": "account_followup"}, "query": "x"}).status_code == 200
