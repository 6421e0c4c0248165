"""E-mail addresses on any domain are personal data: internal and reserved domains too, which
Presidio's stock recognizer (public suffixes only) let through unmasked. Things that merely contain
an `@` are not addresses."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.privacy import detect
from gateway.privacy.detect import Detector
from gateway.privacy.placeholders import Masker
from tests.conftest import Gateway

ADDRESSES = (
    "ops@corp.internal",
    "admin@mail.local",
    "hr@intranet.acme",
    "x@globex.example",
    "m.thornton@northwind.com",
    "admin@localhost",
    "root@buildbox",
)  # a bare host too
NOT_ADDRESSES = (
    "@mention",
    "ping @jane.roe on chat",
    "user@",
    "a@b",
    "lodash@4.17.21",
    "pkg@1.2.3-rc1",
    "@babel/core@7.0.0",
    "x@y.z",
    "python@sha256:9f86d081884c7d65",
    "price 5@3.50 each",
    "npm i react@latest",
    "pkg@next",
    "node@18",
    "admin@localhost:8080/path",
)


@pytest.mark.parametrize("address", ADDRESSES)
def test_an_address_on_any_domain_is_found_in_running_text_and_masked(detector: Detector, address: str) -> None:
    text = f"For refunds write to {address}, or ask at the desk; always copy {address}."
    spans = [s for s in detector.analyze(text) if s.type == "EMAIL_ADDRESS"]
    assert [text[s.start : s.end] for s in spans] == [address, address]  # never the comma or full stop after it
    masked = Masker().mask(text, detector.analyze(text))
    assert address not in masked
    assert masked == "For refunds write to <EMAIL_ADDRESS_1>, or ask at the desk; always copy <EMAIL_ADDRESS_1>."


def test_addresses_in_urls_slots_and_headings_are_found(detector: Detector) -> None:
    for text, address in (
        ("mailto:ops@corp.internal", "ops@corp.internal"),
        ("hr@intranet.acme#plan", "hr@intranet.acme"),
        ("<admin@mail.local>", "admin@mail.local"),
        ("Jane.Roe+billing@Globex.Example", "Jane.Roe+billing@Globex.Example"),
    ):
        assert [text[s.start : s.end] for s in detector.analyze(text) if s.type == "EMAIL_ADDRESS"] == [address], text


@pytest.mark.parametrize("text", NOT_ADDRESSES)
def test_what_only_contains_an_at_sign_is_not_an_address(detector: Detector, text: str) -> None:
    assert [text[s.start : s.end] for s in detector.analyze(text) if s.type == "EMAIL_ADDRESS"] == []


def test_the_rule_itself() -> None:
    assert all(detect.email_domain_ok(a) for a in ADDRESSES + ("a@xn--80ak6aa92e.xn--p1ai", "b@пример.рф"))
    assert not any(
        detect.email_domain_ok(a) for a in ("v@1.2.3", "x@y.z", "p@1.2.3-rc1", "q@host.9a", "r@latest", "s@ab", "t@9x")
    )


def test_a_new_recognizer_configuration_makes_stored_spans_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    before = detect.analyzer_version()
    monkeypatch.setattr(detect, "CLEANING_VERSION", detect.CLEANING_VERSION + 1)
    assert detect.analyzer_version() != before
    assert detect.CLEANING_VERSION - 1 >= 4  # 3: addresses on any domain; 4: on a bare host


def test_a_masked_task_returns_no_address_on_an_internal_domain(gateway: Gateway) -> None:
    text = "Escalation contacts: " + ", ".join(ADDRESSES) + "."
    item: dict[str, Any] = {
        "id": "doc_contacts",
        "kind": "document",
        "text": text,
        "acl": ["*"],
        "scope": ["research"],
        "source": {"system": "wiki", "uri": "mailto:ops@corp.internal"},
    }
    gateway.ingest("acme", [item])
    response = gateway.retrieve(
        gateway.key("rita", clearance="internal"), {"task": {"type": "research"}, "query": "escalation contacts"}
    )
    assert response.status_code == 200, response.text
    [returned] = response.json()["items"]
    assert (
        returned["text"]
        == "Escalation contacts: " + ", ".join(f"<EMAIL_ADDRESS_{n}>" for n in range(1, len(ADDRESSES) + 1)) + "."
    )
    assert returned["source"]["uri"] == "mailto:<EMAIL_ADDRESS_1>"
    assert not any(address in response.text for address in ADDRESSES)
