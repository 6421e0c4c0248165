"""PUT /v1/documents/{id} and document hits read as whole sections, through the HTTP API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from gateway.writes.vectorize import item_vector
from tests.conftest import Gateway, open_gateway

RESEARCH = {"type": "research"}
GUIDE = """---
acl: [group:sales]
scope: [sales]
authority: approved
title: Pricing guideline
---
# Discounts
Discounts above twenty percent need approval from the sales director.

## Annual billing
{billing}

# Refunds
Refunds are prorated for annual plans.
"""
LONG_BILLING = "\n\n".join(
    f"Paragraph {n} on annual billing: invoices are issued yearly and the periwinkle clause number {n} applies here."
    for n in range(40)
)


def put(gateway: Gateway, document_id: str, body: str, key: str | None = None) -> Any:
    key = key or gateway.key("writer", roles=("ingest",))
    return gateway.client.put(f"/v1/documents/{document_id}", content=body.encode(), headers=gateway.auth(key))


def embeddings(gateway: Gateway) -> dict[int, int]:
    """Every stored vector's write stamp, after everything waiting has been embedded (by the test
    or by the service's own worker, whichever gets there first)."""
    gateway.embed_all()
    with gateway.store.connect() as conn:
        return {row.item_pk: row.seq for row in conn.execute(select(item_vector.c.item_pk, item_vector.c.seq))}


@pytest.fixture
def quiet_gateway(database_url: str, tmp_path: Path) -> Iterator[Gateway]:
    """No background embedding: the test alone decides when vectors are written."""
    with open_gateway(database_url, tmp_path, background_embedding=False) as gateway:
        yield gateway


def test_unchanged_re_push_writes_and_embeds_nothing(quiet_gateway: Gateway) -> None:
    gateway = quiet_gateway
    first = put(gateway, "guide", GUIDE.format(billing="Annual billing earns ten percent.")).json()
    assert first["changed"] is True and first["created"] == first["pieces"] == 3
    before = embeddings(gateway)
    assert len(before) == 3
    again = put(gateway, "guide", GUIDE.format(billing="Annual billing earns ten percent.")).json()
    assert again["changed"] is False and again["created"] == again["updated"] == 0
    assert embeddings(gateway) == before  # not one vector written again
    edited = put(gateway, "guide", GUIDE.format(billing="Annual billing earns twelve percent.")).json()
    assert edited["changed"] is True and edited["updated"] == 1 and edited["unchanged"] == 2
    after = embeddings(gateway)
    assert sum(after[pk] != before[pk] for pk in before) == 1  # only the changed piece is embedded again


def test_a_shorter_document_removes_the_pieces_past_its_end(gateway: Gateway) -> None:
    put(gateway, "guide", GUIDE.format(billing="Annual billing earns ten percent."))
    shorter = put(gateway, "guide", "---\nacl: [group:sales]\n---\n# Discounts\nOnly discounts now.\n").json()
    assert shorter["removed"] == 2
    key = gateway.key("agent", groups=("sales",))
    body = gateway.retrieve(key, {"task": RESEARCH, "query": "prorated refunds"}).json()
    assert body["items"] == []


def test_a_hit_returns_its_whole_section_once(gateway: Gateway) -> None:
    report = put(gateway, "guide", GUIDE.format(billing=LONG_BILLING)).json()
    billing_pieces = report["pieces"] - 2
    assert billing_pieces >= 3
    key = gateway.key("agent", groups=("sales",))
    body = gateway.retrieve(key, {"task": RESEARCH, "query": "periwinkle clause", "budget": {"bytes": 100000}}).json()
    sections = [
        i
        for i in body["items"]
        if i["section"] == "Pricing guideline > Discounts > Annual billing" or i["section"].endswith("Annual billing")
    ]
    assert len(sections) == 1, [i["section"] for i in body["items"]]
    whole = sections[0]
    assert len(whole["pieces"]) == billing_pieces
    for n in (0, 17, 39):
        assert f"periwinkle clause number {n} applies" in whole["text"]
    merged = gateway.trace(body["trace_id"])["lineage"]["merged_into_sections"]
    assert len(merged) == body["sources"]["lexical"]["count"] - 1  # every other hit folded into the one section


def test_a_piece_the_actor_may_not_see_is_left_out_of_the_section(gateway: Gateway) -> None:
    section = {"kind": "document", "document": "handbook", "section": "Handbook > Travel", "scope": ["sales"]}
    gateway.ingest(
        "acme",
        [
            {**section, "id": "handbook:0000", "text": "Travel is booked through the portal.", "acl": ["*"]},
            {
                **section,
                "id": "handbook:0001",
                "text": "Executive travel uses the falcon jet account.",
                "acl": ["group:executives"],
            },
            {**section, "id": "handbook:0002", "text": "Receipts are filed within a week of travel.", "acl": ["*"]},
        ],
    )
    key = gateway.key("agent", groups=("sales",))
    response = gateway.retrieve(key, {"task": RESEARCH, "query": "receipts travel"})
    [item] = response.json()["items"]
    assert item["pieces"] == ["handbook:0000", "handbook:0002"]
    assert "falcon" not in response.text and "handbook:0001" not in response.text


def test_document_writes_need_the_ingest_role_and_valid_front_matter(gateway: Gateway) -> None:
    agent = gateway.key("agent")
    denied = put(gateway, "guide", GUIDE.format(billing="x"), key=agent)
    assert denied.status_code == 403
    missing_acl = put(gateway, "guide", "---\nscope: [sales]\n---\n# A\ntext\n")
    assert missing_acl.status_code == 400 and "acl" in missing_acl.json()["error"]["message"]
    no_front_matter = put(gateway, "guide", "# A\ntext\n")
    assert no_front_matter.status_code == 400
    bad_id = put(gateway, "bad%20id", GUIDE.format(billing="x"))
    assert bad_id.status_code == 400
    key = gateway.key("reader", groups=("sales",))
    assert gateway.retrieve(key, {"task": RESEARCH, "query": "discounts"}).json()["items"] == []
