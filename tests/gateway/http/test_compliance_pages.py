"""The compliance pages over the real HTTP stack: the overview's charts carry the trail's numbers
(read back from the SVG's labels) and link to the traces behind them; the subject page lists the
calls about a subject; both stay in the auditor's tenant, refuse a visitor without a session, and
hold no item text, query or personal value."""

from __future__ import annotations

import html
import re

from tests.audit.test_compliance import EMAIL, SECRET_QUERY, SECRET_TEXT, seed
from tests.conftest import Gateway
from tests.gateway.http.test_audit_page import TRACE_ROW, signed_in

LEGEND = re.compile(r'class="legend" data-outcome="([a-z_]+)">.*?<strong class="total">(\d+)</strong>', re.S)
SEGMENT = re.compile(r'<a href="([^"]+)" class="bar-link"><rect class="segment" data-outcome="([a-z_]+)" data-value="(\d+)"')
RANKED = re.compile(r'<a href="([^"]+)" class="bar-link"><g class="bar" data-label="([^"]*)" data-value="(\d+)">')


def chart(text: str, chart_id: str) -> list[tuple[str, str, int]]:
    """(href, label, value) of each bar of one ranked chart."""
    start = text.index(f'id="{chart_id}"')
    body = text[start : text.index("</svg>", start)]
    return [(html.unescape(h), html.unescape(label), int(v)) for h, label, v in RANKED.findall(body)]


def traces_behind(gateway: Gateway, href: str) -> list[str]:
    answer = gateway.client.get(href)
    assert answer.status_code == 200, answer.text
    return TRACE_ROW.findall(answer.text)


def test_the_overview_page_draws_the_trails_numbers_and_links_each_to_its_traces(gateway: Gateway) -> None:
    seeded = seed(gateway)
    signed_in(gateway)
    answer = gateway.client.get("/audit/overview", params={"period": "24h"})
    assert answer.status_code == 200, answer.text
    text = answer.text
    assert "<script" not in text and answer.headers["content-security-policy"].startswith("default-src 'none'")
    assert dict((o, int(n)) for o, n in LEGEND.findall(text)) == {
        "allow": 5,
        "deny": 1,
        "error": 0,
        "rate_limited": 0,
        "invalid": 0,
    }
    segments = [(html.unescape(h), o, int(n)) for h, o, n in SEGMENT.findall(text)]
    assert sum(n for _, o, n in segments if o == "allow") == 5
    for href, _, n in segments:  # each piece of the time chart lands on exactly its calls
        assert len(traces_behind(gateway, href)) == n
    ((href, label, n),) = chart(text, "restricted-by-actor")
    assert (label, n) == ("user:boss", 1) and traces_behind(gateway, href) == [seeded["calls"]["restricted"]]
    ((href, label, n),) = chart(text, "placeholders-by-type")
    assert (label, n) == ("EMAIL_ADDRESS", 1) and traces_behind(gateway, href) == [seeded["calls"]["masked"]]
    ((href, label, n),) = chart(text, "reveals-by-actor")
    assert (label, n) == ("user:carol", 1) and traces_behind(gateway, href) == [seeded["calls"]["revealed"]]
    for href, _, n in chart(text, "denials-by-reason"):
        assert len(traces_behind(gateway, href)) == n
    assert {label: n for _, label, n in chart(text, "returned-by-sensitivity")}["restricted"] == 1
    assert 'id="chain-rows"' in text and "never checked" in text
    assert gateway.client.get("/v1/audit/verify", headers=gateway.auth(gateway.key("auditor-acme", roles=("auditor",)))).json()[
        "ok"
    ]
    assert 'data-intact="true"' in gateway.client.get("/audit/overview").text  # the check just made, at the top
    for secret in (SECRET_TEXT, SECRET_QUERY, EMAIL):
        assert secret not in text


def test_the_overview_page_refuses_a_bad_period_on_the_page(gateway: Gateway) -> None:
    signed_in(gateway)
    answer = gateway.client.get("/audit/overview", params={"since": "yesterday"})
    assert answer.status_code == 400 and "since: expected an instant" in answer.text


def test_another_tenants_auditor_sees_none_of_it_and_a_visitor_is_asked_to_sign_in(gateway: Gateway) -> None:
    seeded = seed(gateway)
    signed_in(gateway, "globex")
    overview = gateway.client.get("/audit/overview", params={"period": "24h"}).text
    assert "user:alice" not in overview and "user:boss" not in overview and "user:carol" not in overview
    assert dict((o, int(n)) for o, n in LEGEND.findall(overview))["allow"] == 1
    subject = gateway.client.get("/audit/subjects/ent_dana").text
    assert not set(seeded["calls"].values()) & set(TRACE_ROW.findall(subject)) and "user:mallory" in subject
    gateway.client.cookies.clear()
    for path in ("/audit/overview", "/audit/subjects/ent_dana", "/audit/subjects"):
        answer = gateway.client.get(path)
        assert answer.status_code == 401 and 'id="sign-in-form"' in answer.text


def test_the_subject_page_lists_the_calls_about_the_subject_and_exports_them(gateway: Gateway) -> None:
    seeded = seed(gateway)
    signed_in(gateway)
    form = gateway.client.get("/audit/subjects")
    assert form.status_code == 200 and 'id="subject-form"' in form.text
    answer = gateway.client.get("/audit/subjects", params={"entity": "ent_dana_old"})
    assert answer.status_code == 200, answer.text
    text = answer.text
    listed = TRACE_ROW.findall(text)
    assert {seeded["calls"]["dana"], seeded["calls"]["dana_old"]} <= set(listed) and seeded["calls"]["masked"] not in listed
    assert text.count('class="merged-entity"') == 2 and 'data-reached="used"' in text
    exported = gateway.client.get("/audit/subjects/ent_dana", params={"format": "csv"})
    assert exported.status_code == 200 and exported.headers["content-type"].startswith("text/csv")
    assert seeded["calls"]["dana"] in exported.text
    for body in (text, exported.text):
        for secret in (SECRET_TEXT, SECRET_QUERY, EMAIL):
            assert secret not in body
