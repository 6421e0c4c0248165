"""Masking covers every string a response carries, not only `text`: a section's heading path and
title, a slot, a source, the identifier the caller sent. A planted email, phone, name and card are
looked for in every string of the whole JSON of every mode (and of what synthesis sends the model),
not in named fields only; ids, enumerations and instants are the allowlisted exceptions."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from gateway.privacy.detect import Detector
from gateway.privacy.mask import Masking
from gateway.privacy.placeholders import Masker
from gateway.settings import PROJECT_POLICIES
from tests.conftest import Gateway, edit_json, open_gateway
from tests.llm_double import LlmDouble, echo_placeholders

PERSON, EMAIL, PHONE, CARD = "Margaret Thornton", "jane.roe@globex.example", "+44 20 7946 0958", "4111 1111 1111 1111"
# What must appear nowhere, in any case: each value, its parts, and the digits of the phone and card
# (an identifier is echoed normalised: the phone as its E.164 digits).
PLANTED = (PERSON, "Thornton", EMAIL, "jane.roe", PHONE, "7946 0958", CARD)
PLANTED_DIGITS = ("442079460958", "4111111111111111")
PLACEHOLDER = re.compile(r"<([A-Z_]+)_\d+>")

MASKED_TASK = {"type": "account_followup", "scope": "sales"}  # masked in this module's copy of the policies
PLAIN_TASK = {"type": "compliance_review", "scope": "sales"}  # not masked
RESEARCH = {"type": "research"}  # masked by the project's policies
QUERY = f"refund escalation for {PERSON}"

# What the memories and the property about the contact share: whom they are about, who sees them, their tags.
ON_CONTACT = {"entity": "ent_contact", "attached_to": "ent_contact", "acl": ["*"], "scope": ["sales"], "tags": ["refunds"]}
ITEMS: list[dict[str, Any]] = [
    {
        "id": "ent_contact",
        "kind": "entity",
        "entity_type": "contact",
        "name": PERSON,
        "email": EMAIL,
        "phone": PHONE,
        "acl": ["*"],
    },
    {
        "id": "ent_company",
        "kind": "entity",
        "entity_type": "company",
        "name": "Globex",
        "website": "globex.example",
        "acl": ["*"],
    },
    {
        "id": "mem_plan",
        "kind": "memory",
        **ON_CONTACT,
        "slot": f"{EMAIL}#plan",
        "text": f"Refund escalation plan: {PERSON} wants mail to {EMAIL} and calls on {PHONE}.",
        "source": {"system": f"crm notes of {PERSON}", "uri": f"mailto:{EMAIL}"},
    },
    {
        "id": "mem_card",
        "kind": "memory",
        **ON_CONTACT,
        "slot": f"{PERSON}#card",
        "text": f"Refund escalation card on file for {PERSON}: {CARD}.",
        "source": {"system": "billing", "uri": f"billing://cards/{CARD}"},
    },
    {
        "id": "prop_phone",
        "kind": "property",
        **ON_CONTACT,
        "name": "phone",
        "value": PHONE,
        "slot": f"{PHONE}#phone",
        "source": {"system": "crm", "uri": f"tel:{PHONE}"},
    },
    {
        "id": "edge_works",
        "kind": "edge",
        "from": "ent_contact",
        "to": "ent_company",
        "relation": "works_at",
        "acl": ["*"],
        "scope": ["sales"],
        "tags": ["refunds"],
        "text": f"{PERSON} works at Globex, refund escalation owner",
        "source": {"system": "crm", "uri": f"crm://contacts/{EMAIL}"},
    },
]
DOCUMENT = f"""---
acl: ["*"]
scope: [sales, research]
tags: [refunds]
title: "Refund escalation for {PERSON}"
slot: "{CARD}#card"
source_system: "wiki page of {PERSON}"
source_uri: "mailto:{EMAIL}"
---
Refund escalation guide. The test card is {CARD}.

# Escalation contact {EMAIL}

Refund escalation goes to {PERSON} at {EMAIL} or {PHONE}.
"""
# Two sections: the one before the first heading has the title as its `section` (the title is in
# no text), the other the heading, which its text starts with.


def leaks(value: Any, path: str = "$") -> list[str]:
    """Every place in a JSON value (keys included) where a planted value shows, in any case."""
    if isinstance(value, dict):
        return [hit for k, v in value.items() for hit in leaks(k, f"{path}.<key>") + leaks(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [hit for i, v in enumerate(value) for hit in leaks(v, f"{path}[{i}]")]
    if isinstance(value, str):
        lowered, digits = value.lower(), re.sub(r"\D", "", value)
        if any(p.lower() in lowered for p in PLANTED) or any(d in digits for d in PLANTED_DIGITS):
            return [f"{path}: {value!r}"]
    return []


def policies_masking_account_followup(directory: Path) -> Path:
    """A copy of the project's policies in which account_followup masks personal data; the tasks
    used here are granted to role:agent too, whatever groups the data document grants them to."""
    target = directory / "policies"
    shutil.copytree(PROJECT_POLICIES, target)

    def change(data: dict[str, Any]) -> None:
        tasks = data["task_types"]
        tasks["account_followup"]["mask_pii"] = True
        for name in ("account_followup", "compliance_review", "research"):
            if "grants" in tasks[name] and "role:agent" not in tasks[name]["grants"]:
                tasks[name]["grants"].append("role:agent")

    edit_json(target / "gateway" / "config" / "data.json", change)
    return target


@pytest.fixture(scope="module")
def llm() -> Iterator[LlmDouble]:
    with LlmDouble(echo_placeholders()) as double:
        yield double


@pytest.fixture(scope="module")
def masked(module_database_url: str, tmp_path_factory: pytest.TempPathFactory, llm: LlmDouble) -> Iterator[Gateway]:
    """One gateway per backend with the planted items and document, read by the tests below."""
    directory = tmp_path_factory.mktemp("masking-fields")
    policies = policies_masking_account_followup(directory)
    with open_gateway(module_database_url, directory, policies_dir=policies, llm_url=llm.url, llm_timeout_ms=5000) as gateway:
        gateway.ingest("acme", ITEMS)
        writer = gateway.key("writer-acme", roles=("ingest",))
        response = gateway.client.put(
            "/v1/documents/doc_refunds",
            content=DOCUMENT.encode(),
            headers={**gateway.auth(writer), "Content-Type": "text/markdown"},
        )
        assert response.status_code == 200, response.text
        yield gateway


def reader(gateway: Gateway, *groups: str) -> str:
    name = "reader-" + "-".join(groups or ("plain",))
    return gateway.key(name, groups=("sales", *groups), clearance="confidential")


def ask(gateway: Gateway, key: str, body: dict[str, Any]) -> dict[str, Any]:
    response = gateway.retrieve(key, body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


MODES: dict[str, dict[str, Any]] = {
    "brief": {"mode": "brief", "query": QUERY, "entities": [{"email": EMAIL}, {"phone": PHONE}]},
    "scout": {"mode": "scout", "query": QUERY, "entities": [{"email": EMAIL}]},
    "fetch": {
        "mode": "fetch",
        "fetch": ["mem_plan", "mem_card", "prop_phone", "edge_works", "doc_refunds:0000", "doc_refunds:0001"],
        "entities": [{"phone": PHONE}],
    },
    "filter": {"mode": "filter", "filters": {"tags": ["refunds"]}, "query": QUERY, "entities": [{"email": EMAIL}]},
}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_no_planted_value_anywhere_in_the_response_of_a_masked_task(masked: Gateway, mode: str) -> None:
    body = ask(masked, reader(masked), {"task": MASKED_TASK, **MODES[mode]})
    assert body["items"], body
    assert leaks(body) == []
    returned = {item["id"]: item for item in body["items"]}
    if "mem_plan" in returned:  # the same value, the same placeholder, in the text and in the other fields
        plan = returned["mem_plan"]
        [email] = re.findall(r"<EMAIL_ADDRESS_\d+>", plan["slot"])
        assert plan["slot"] == f"{email}#plan" and plan["source"]["uri"] == f"mailto:{email}" and email in plan["text"]
        assert PLACEHOLDER.search(plan["source"]["system"])
    if "doc_refunds:0000" in returned:
        titled = returned["doc_refunds:0000"]
        assert re.fullmatch(r"Refund escalation for <PERSON_\d+>", titled["section"]) and "<CREDIT_CARD_" in titled["slot"]
    if "doc_refunds:0001" in returned:
        assert re.fullmatch(r"Escalation contact <EMAIL_ADDRESS_\d+>", returned["doc_refunds:0001"]["section"])
    for entity in body["entities"]:  # the identifier the caller sent comes back as a placeholder
        [(kind, value)] = entity["resolved_from"].items()
        assert kind in ("email", "phone") and PLACEHOLDER.fullmatch(value), entity
    # Ids, enumerations and instants are left as they are.
    for item in body["items"]:
        assert item["kind"] in ("memory", "property", "document", "edge") and item["status"] in (
            "current",
            "superseded",
            "historical",
            "disputed",
        )
        assert not PLACEHOLDER.search(item["id"]) and not PLACEHOLDER.search(item.get("entity") or "")
    trace = masked.trace(body["trace_id"])
    assert leaks(trace) == []
    if mode == "brief":
        assert {e["id"] for e in body["entities"]} == {"ent_contact"}
        assert {"mem_plan", "mem_card", "prop_phone", "edge_works"} <= set(returned)
        assert trace["lineage"]["pii"]["masked"]["EMAIL_ADDRESS"] >= 1


def test_expanded_pages_carry_no_planted_value(masked: Gateway) -> None:
    key = reader(masked)
    first = ask(masked, key, {"task": MASKED_TASK, **MODES["filter"], "budget": {"bytes": 120}})
    pages, cursor = [first], first["cursor"]
    assert cursor, "the small budget leaves something for an expand"
    while cursor:
        page = ask(masked, key, {"task": MASKED_TASK, "cursor": cursor, "budget": {"bytes": 200}})
        assert page["mode"] == "expand"
        pages.append(page)
        cursor = page["cursor"]
    expanded = [item for page in pages[1:] for item in page["items"]]
    assert expanded and any(item["slot"] for item in expanded)
    assert leaks(pages) == []


def test_research_documents_come_back_with_title_slot_and_source_masked(masked: Gateway) -> None:
    key = masked.key("rita", clearance="internal")
    # Both sections share the front matter's slot: one is the current value, the other is history.
    body = ask(masked, key, {"task": RESEARCH, "query": "refund escalation", "include_historical": True})
    returned = {item["id"]: item for item in body["items"]}
    assert set(returned) == {"doc_refunds:0000", "doc_refunds:0001"}
    titled, headed = returned["doc_refunds:0000"], returned["doc_refunds:0001"]
    assert titled["document"] == "doc_refunds" and titled["section"].startswith("Refund escalation for <PERSON_")
    assert all(item["source"]["uri"].startswith("mailto:<EMAIL_ADDRESS_") for item in returned.values())
    assert leaks(body) == []
    # The title's name and the other section's name share one placeholder; so do the heading's
    # address and the one in the text.
    [name] = re.findall(r"<PERSON_\d+>", titled["section"])
    [email] = re.findall(r"<EMAIL_ADDRESS_\d+>", headed["section"])
    assert name in headed["text"] and email in headed["text"]


def test_the_model_receives_no_planted_value_from_any_field_or_the_question(masked: Gateway, llm: LlmDouble) -> None:
    before = len(llm.requests)
    body = ask(
        masked,
        reader(masked),
        {
            "task": MASKED_TASK,
            **MODES["brief"],
            "synthesize": True,
            "query": f"Who is {PERSON} ({EMAIL}, {PHONE}) and which card {CARD}?",
        },
    )
    sent = llm.requests[before:]
    assert len(sent) == 1 and sent[0].messages
    assert leaks(sent[0].body) == []
    assert "<EMAIL_ADDRESS_" in sent[0].raw_text and "<PERSON_" in sent[0].raw_text
    assert body["answer"]["text"] and leaks(body) == []  # this reader may see no type: the answer stays masked


def test_a_reader_allowed_some_types_sees_exactly_those_in_clear_in_every_field(masked: Gateway) -> None:
    cleared = reader(masked, "privacy-cleared")  # EMAIL_ADDRESS and PHONE_NUMBER in clear
    body = ask(masked, cleared, {"task": MASKED_TASK, **MODES["brief"]})
    returned = {item["id"]: item for item in body["items"]}
    plan, card = returned["mem_plan"], returned["mem_card"]
    assert plan["slot"] == f"{EMAIL}#plan" and plan["source"]["uri"] == f"mailto:{EMAIL}"
    assert returned["prop_phone"]["slot"] == f"{PHONE}#phone"
    assert PERSON not in plan["source"]["system"] and PERSON not in card["slot"] and CARD not in card["source"]["uri"]
    assert card["slot"].startswith("<PERSON_") and "<CREDIT_CARD_" in card["source"]["uri"]
    assert {tuple(e["resolved_from"].items())[0] for e in body["entities"]} <= {("email", EMAIL), ("phone", "442079460958")}


def test_a_task_whose_policy_does_not_mask_returns_every_field_as_stored(masked: Gateway) -> None:
    body = ask(masked, reader(masked), {"task": PLAIN_TASK, **MODES["brief"]})
    returned = {item["id"]: item for item in body["items"]}
    assert returned["mem_plan"]["slot"] == f"{EMAIL}#plan"
    assert returned["mem_plan"]["source"] == {"system": f"crm notes of {PERSON}", "uri": f"mailto:{EMAIL}"}
    assert returned["mem_card"]["text"] == ITEMS[3]["text"]
    assert {"email": EMAIL} in [e["resolved_from"] for e in body["entities"]]


def test_without_a_detector_a_masked_task_still_fails_closed(sqlite_url: str, tmp_path: Path) -> None:
    policies = policies_masking_account_followup(tmp_path)
    with open_gateway(sqlite_url, tmp_path, policies_dir=policies, pii="none") as gateway:
        gateway.ingest("acme", ITEMS)
        response = gateway.retrieve(reader(gateway), {"task": MASKED_TASK, **MODES["brief"]})
        assert response.status_code == 503 and response.json()["error"]["code"] == "masking_unavailable"
        assert leaks(response.json()) == []


# -- Masking.fields on its own -------------------------------------------------------------------


def masking(detector: Detector) -> Masking:
    return Masking(Masker(), {}, {}, detector=detector)


def fields(
    mask: Masking,
    objects: list[tuple[dict[str, Any], frozenset[str]]],
    keep: frozenset[str] = frozenset(),
    whole: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    return anyio.run(mask.fields, objects, keep, whole)


def test_everything_but_the_allowlisted_top_level_keys_is_masked_at_any_depth(detector: Detector) -> None:
    item = {
        "id": EMAIL,
        "kind": "memory",
        "slot": f"{EMAIL}#plan",
        "count": 3,
        "flag": True,
        "none": None,
        "source": {"system": f"notes of {PERSON}", "uri": f"mailto:{EMAIL}", "id": EMAIL},
        "extra": [[f"call {PHONE}"], {"deeper": CARD}],
    }
    [out] = fields(masking(detector), [(item, frozenset({"id", "kind"}))])
    assert out["id"] == EMAIL and out["kind"] == "memory"  # allowlisted at the top level only
    assert out["count"] == 3 and out["flag"] is True and out["none"] is None
    assert out["slot"] == "<EMAIL_ADDRESS_1>#plan"
    assert out["source"] == {"system": "notes of <PERSON_1>", "uri": "mailto:<EMAIL_ADDRESS_1>", "id": "<EMAIL_ADDRESS_1>"}
    assert out["extra"] == [["call <PHONE_NUMBER_1>"], {"deeper": "<CREDIT_CARD_1>"}]
    assert item["slot"] == f"{EMAIL}#plan"  # the input is not changed


def test_fields_share_the_texts_placeholders_and_honour_reveal(detector: Detector) -> None:
    mask = masking(detector)
    text = mask.masker.mask(f"ask {PERSON}", detector.analyze(f"ask {PERSON}"))
    assert text == "ask <PERSON_1>"
    nothing: frozenset[str] = frozenset()
    objects: list[tuple[dict[str, Any], frozenset[str]]] = [
        ({"title": f"Notes on {PERSON}", "uri": f"mailto:{EMAIL}"}, nothing),
        ({"resolved_from": {"email": "a@b"}, "other": {"phone": "12"}}, nothing),
    ]
    first, second = fields(mask, objects, frozenset({"EMAIL_ADDRESS"}), {"email": "EMAIL_ADDRESS", "phone": "PHONE_NUMBER"})
    assert first == {"title": "Notes on <PERSON_1>", "uri": f"mailto:{EMAIL}"}  # the reader may see emails
    assert second == {"resolved_from": {"email": "a@b"}, "other": {"phone": "<PHONE_NUMBER_1>"}}  # typed as a whole


def test_a_value_masked_elsewhere_is_masked_where_the_analyzer_alone_misses_it(detector: Detector) -> None:
    mask = masking(detector)
    hidden = "notes://Zorblat Quenk/2024"  # a name in no gazetteer
    assert detector.analyze(hidden) == ()  # too little context for the language model
    mask.masker.mask("Zorblat Quenk called", detector.analyze("Zorblat Quenk called"))
    [out] = fields(mask, [({"uri": hidden, "other": "Zorblat Quenk2"}, frozenset())])
    # whole words only: "Quenk2" is no word of the name; "Zorblat" alone names its person too
    assert out == {"uri": "notes://<PERSON_1>/2024", "other": "<PERSON_2> Quenk2"}


def test_nothing_to_mask_needs_no_detector() -> None:
    mask = Masking(Masker(), {}, {})
    assert fields(mask, [({"id": "x", "n": 1}, frozenset({"id"}))]) == [{"id": "x", "n": 1}]


def test_batched_analysis_finds_what_one_by_one_analysis_finds(detector: Detector) -> None:
    texts = [
        f"{EMAIL}#plan",
        "4111 1111",
        "1111 1111",
        f"tel:{PHONE}",
        "",
        "  ",
        "192.168.1.20",
        "555",
        "0100",
        CARD,
        "DE89 3704 0044 0532 0130 00",
        "ops@corp.internal",
        "Pricing > Discounts",
        PERSON,
    ]
    one_by_one = [detector.analyze(t) for t in texts]
    batched = detector.analyze_many(texts)
    assert len(batched) == len(texts)
    for text, alone, together in zip(texts, one_by_one, batched):
        # No value found by pattern reaches over the separator into the next string.
        assert {(s.type, s.start, s.end) for s in alone if s.type != "PERSON"} == {
            (s.type, s.start, s.end) for s in together if s.type != "PERSON"
        }, text
        assert all(0 <= s.start < s.end <= len(text) for s in together)
    json.dumps([[s.as_json() for s in spans] for spans in batched])
