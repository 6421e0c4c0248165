"""The compliance overview and subject report in a real browser (headless Chromium, as the audit
page's test): the overview renders with data, its charts carry the right numbers (read back from
the SVG's labels), a chart's bar lands on the filtered traces, the subject page lists the calls.
With GATEWAY_TEST_SCREENSHOTS=DIR it saves screenshots of the pages there."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.browser.test_audit_browser import LiveGateway, browser, live_gateway, rows, wait_for
from tests.gateway.fixtures import SALES_TASK, memory

__all__ = ["browser", "live_gateway"]  # the fixtures, shared with the audit page's test


def seed(gateway: LiveGateway) -> tuple[str, dict[str, list[str]]]:
    writer = gateway.key("writer", roles=("ingest",))
    alice, bob = gateway.key("alice", groups=("sales",)), gateway.key("bob", groups=("sales",))
    auditor = gateway.key("auditor", roles=("auditor",))
    calls: dict[str, list[str]] = {"allow": [], "deny": []}
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        items = [
            {"id": "ent_jane", "kind": "entity", "entity_type": "contact", "name": "Jane", "acl": ["*"]},
            memory("mem_jane", "zanzibar renewal note", entity="ent_jane", attached_to="ent_jane"),
            memory("mem_a", "zanzibar pricing note"),
        ]
        assert client.put("/v1/items", json=items, headers={"Authorization": f"Bearer {writer}"}).status_code == 200
        for key, body, outcome in (
            (alice, {"task": SALES_TASK, "query": "zanzibar pricing", "entities": [{"id": "ent_jane"}]}, "allow"),
            (alice, {"task": SALES_TASK, "query": "zanzibar pricing"}, "allow"),
            (bob, {"task": SALES_TASK, "query": "zanzibar renewal", "entities": [{"id": "ent_jane"}]}, "allow"),
            (bob, {"task": {"type": "no_such_task"}, "query": "zanzibar"}, "deny"),
            (auditor, {"task": SALES_TASK, "query": "zanzibar"}, "deny"),
        ):
            answer = client.post(
                "/v1/retrieve", json={**body, "sources": {"semantic": False}}, headers={"Authorization": f"Bearer {key}"}
            )
            assert answer.status_code == (200 if outcome == "allow" else 403), answer.text
            calls[outcome].append(answer.headers["x-trace-id"])
    return auditor, calls


def screenshot(driver: WebDriver, name: str) -> None:
    folder = os.environ.get("GATEWAY_TEST_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        driver.set_window_size(1280, 2000)
        assert driver.save_screenshot(str(Path(folder) / name))


def test_a_reviewer_reads_the_overview_follows_a_bar_and_opens_a_subject(browser: WebDriver, live_gateway: LiveGateway) -> None:
    auditor, calls = seed(live_gateway)
    browser.get(f"{live_gateway.url}/audit")
    browser.find_element(By.ID, "key").send_keys(auditor)
    browser.find_element(By.ID, "sign-in").click()
    wait_for(browser, "filters")
    browser.find_element(By.ID, "overview-link").click()
    wait_for(browser, "calls-chart")
    assert browser.find_element(By.ID, "calls-total").text == "5"
    legend = {
        e.get_attribute("data-outcome"): e.find_element(By.CSS_SELECTOR, "strong.total").text
        for e in browser.find_elements(By.CSS_SELECTOR, "a.legend")
    }
    assert legend["allow"] == "3" and legend["deny"] == "2" and legend["error"] == "0"
    # The numbers on the time chart itself: its segments' labels and each bar's total.
    segments = browser.find_elements(By.CSS_SELECTOR, "#calls-chart rect.segment")
    assert sum(int(s.get_attribute("data-value") or 0) for s in segments if s.get_attribute("data-outcome") == "deny") == 2
    totals = [int(t.text) for t in browser.find_elements(By.CSS_SELECTOR, "#calls-chart g.period text.value")]
    assert sum(totals) == 5
    reasons = browser.find_elements(By.CSS_SELECTOR, "#denials-by-task g.bar")
    labels = {
        r.find_element(By.CSS_SELECTOR, "text.label").text: r.find_element(By.CSS_SELECTOR, "text.value").text for r in reasons
    }
    assert labels["no_such_task"] == "1" and labels["account_followup"] == "1"
    screenshot(browser, "overview.png")
    # A bar of the chart lands on exactly the calls behind it.
    browser.find_element(By.CSS_SELECTOR, "#denials-by-task a.bar-link").click()
    wait_for(browser, "filters")
    assert browser.find_element(By.ID, "filter-task").get_attribute("value") in ("no_such_task", "account_followup")
    assert len(rows(browser)) == 1 and rows(browser)[0] in calls["deny"]
    browser.find_element(By.ID, "overview-link").click()
    wait_for(browser, "calls-chart")
    deny_segment = browser.find_element(By.CSS_SELECTOR, '#calls-chart rect.segment[data-outcome="deny"]')
    browser.get(live_gateway.url + (deny_segment.find_element(By.XPATH, "..").get_dom_attribute("href") or ""))
    wait_for(browser, "filters")
    assert sorted(rows(browser)) == sorted(calls["deny"])
    # The bar's filter shows in the form, unfolded, and pressing Filter keeps it.
    assert browser.find_element(By.ID, "more-filters").get_attribute("open") is not None
    assert browser.find_element(By.ID, "filter-outcome").get_attribute("value") == "deny"
    screenshot(browser, "filtered.png")
    browser.find_element(By.ID, "apply-filters").click()
    wait_for(browser, "filters")
    assert "outcome=deny" in browser.current_url and sorted(rows(browser)) == sorted(calls["deny"])
    # The subject report, from the header's link.
    browser.find_element(By.ID, "subjects-link").click()
    wait_for(browser, "subject-form")
    browser.find_element(By.ID, "subject-entity").send_keys("ent_jane")
    browser.find_element(By.ID, "find-subject").click()
    wait_for(browser, "subject-calls")
    listed = [r.get_attribute("data-trace-id") for r in browser.find_elements(By.CSS_SELECTOR, "tr.subject-call")]
    assert listed == [calls["allow"][2], calls["allow"][0]]
    assert {r.get_attribute("data-reached") for r in browser.find_elements(By.CSS_SELECTOR, "tr.subject-call")} == {"returned"}
    screenshot(browser, "subject.png")
    assert "zanzibar" not in browser.page_source
