"""One mask per value in a response: a value masked anywhere (an item's text, a field, the question)
is masked wherever else it appears in that response and in the prompt sent to the model, where the
analyzer on its own missed it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.privacy.detect import Detector
from tests.conftest import Gateway, open_gateway
from tests.gateway.fixtures import SALES_TASK
from tests.gateway.privacy.test_masking_fields import policies_masking_account_followup
from tests.llm_double import LlmDouble, echo_placeholders

FOUND = "Sales lead Tomomi Nishiyama approved the renewal discount."  # the analyzer finds the name here
MISSED_PART = "Osaka renewal - Tomomi - after lunch"  # and misses "Tomomi" here
MISSED_FROM_QUESTION = "Osaka renewal - Rubija - signed"  # misses "Rubija"
QUESTION = "What did Rubija Kovač and Tomomi Nishiyama agree about the renewal?"  # names both
HIDDEN = "see notes://Zorblat Quenk/2024 before the renewal call"  # a name too bare to find here...
SOURCE = "notes from Zorblat Quenk"  # ... and found in another item's source field
ITEMS: list[dict[str, Any]] = [
    {"id": "mem_found", "kind": "memory", "acl": ["*"], "scope": ["sales"], "text": FOUND},
    {"id": "mem_part", "kind": "memory", "acl": ["*"], "scope": ["sales"], "text": MISSED_PART},
    {"id": "mem_question", "kind": "memory", "acl": ["*"], "scope": ["sales"], "text": MISSED_FROM_QUESTION},
    {"id": "mem_hidden", "kind": "memory", "acl": ["*"], "scope": ["sales"], "text": HIDDEN},
    {
        "id": "mem_source",
        "kind": "memory",
        "acl": ["*"],
        "scope": ["sales"],
        "text": "The renewal call is booked.",
        "source": {"system": SOURCE},
    },
    # entity ids can spell a name: an edge's text names its ends by id
    {"id": "ent_tomomi_nishiyama", "kind": "entity", "entity_type": "contact", "acl": ["*"]},
    {"id": "ent_northwind", "kind": "entity", "entity_type": "company", "acl": ["*"]},
    {
        "id": "edge_works",
        "kind": "edge",
        "from": "ent_tomomi_nishiyama",
        "relation": "works_at",
        "to": "ent_northwind",
        "acl": ["*"],
        "scope": ["sales"],
    },
]
NAMES = ("Tomomi", "Nishiyama", "Rubija", "Kovač", "Zorblat", "Quenk")


@pytest.fixture(scope="module")
def llm() -> Iterator[LlmDouble]:
    with LlmDouble(echo_placeholders()) as double:
        yield double


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, llm: LlmDouble) -> Iterator[Gateway]:
    directory = tmp_path_factory.mktemp("one-mask")
    with open_gateway(
        f"sqlite:///{directory / 'g.db'}",
        directory,
        policies_dir=policies_masking_account_followup(directory),
        llm_url=llm.url,
        llm_timeout_ms=5000,
    ) as gateway:
        gateway.ingest("acme", ITEMS)
        yield gateway


def test_the_analyzer_alone_misses_these_names_where_they_stand() -> None:
    """The premise: without one mask per value, these would reach the reader and the model."""
    detector = Detector()

    def names(text: str) -> list[str]:
        return [text[s.start : s.end] for s in detector.analyze(text) if s.type == "PERSON"]

    assert names(FOUND) == ["Tomomi Nishiyama"] and names(MISSED_PART) == [] and names(MISSED_FROM_QUESTION) == []
    assert names(HIDDEN) == [] and "Zorblat Quenk" in names(SOURCE)


def ask(gateway: Gateway, **body: Any) -> dict[str, Any]:
    key = gateway.key("alice", groups=("sales",), clearance="confidential")
    response = gateway.retrieve(
        key,
        {
            "task": SALES_TASK,
            "query": QUESTION,
            "limit": 10,
            "budget": {"bytes": 8000},
            "sources": {"exact": False, "semantic": False, "graph": False},
            **body,
        },
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_every_value_masked_somewhere_is_masked_everywhere_in_the_response(gateway: Gateway) -> None:
    body = ask(gateway, query="renewal")  # the question names no one here
    texts = {item["id"]: item["text"] for item in body["items"]}
    assert set(texts) >= {"mem_found", "mem_part", "mem_hidden", "mem_source"}
    assert re.fullmatch(r"Sales lead <PERSON_\d+> approved the renewal discount\.", texts["mem_found"]), texts["mem_found"]
    assert re.fullmatch(r"Osaka renewal - <PERSON_\d+> - after lunch", texts["mem_part"]), texts[
        "mem_part"
    ]  # a part of a masked name
    assert "Zorblat" not in texts["mem_hidden"] and "Quenk" not in texts["mem_hidden"]  # found in another item's source
    source = next(i for i in body["items"] if i["id"] == "mem_source")["source"]["system"]
    placeholder = source.removeprefix("notes from ")
    assert placeholder.startswith("<PERSON_") and placeholder in texts["mem_hidden"]  # the same placeholder
    assert not any(name in str(body) for name in ("Tomomi", "Nishiyama", "Zorblat", "Quenk"))


def test_what_the_question_names_is_masked_in_the_response_and_the_prompt(gateway: Gateway, llm: LlmDouble) -> None:
    llm.requests.clear()
    body = ask(gateway, synthesize=True)
    texts = {item["id"]: item["text"] for item in body["items"]}
    assert "Rubija" not in texts["mem_question"] and texts["mem_question"].startswith("Osaka renewal - <PERSON_")
    assert len(llm.requests) == 1
    sent = "\n".join(r.raw_text for r in llm.requests)
    for name in NAMES:
        assert name not in sent, name
    assert "<PERSON_" in sent
    # the edge went to the model with its ends as placeholders, never as entity ids
    assert "edge_works" in gateway.trace(body["trace_id"])["lineage"]["synthesis"]["sent"]
    assert "ent_" not in sent and "tomomi" not in sent.lower() and "northwind" not in sent
    assert "<ENTITY_1> works_at <ENTITY_2>" in sent


def test_a_reader_who_sees_names_still_sends_none_to_the_model(tmp_path: Path, llm: LlmDouble) -> None:
    """account_followup does not mask for the reader (the shipped policies): the response shows the
    names, the prompt masks them all, a name missed in one item included, whichever item comes first."""
    with open_gateway(f"sqlite:///{tmp_path / 'g.db'}", tmp_path, llm_url=llm.url, llm_timeout_ms=5000) as gateway:
        gateway.ingest("acme", ITEMS)
        llm.requests.clear()
        body = ask(gateway, query="renewal Tomomi", synthesize=True)
        assert any("Tomomi" in item["text"] for item in body["items"])  # the reader may see names
        assert {"mem_found", "mem_part"} <= set(gateway.trace(body["trace_id"])["lineage"]["synthesis"]["sent"])
        sent = "\n".join(r.raw_text for r in llm.requests)
        assert "Tomomi" not in sent and "Nishiyama" not in sent
