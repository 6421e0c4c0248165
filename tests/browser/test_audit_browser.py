"""The audit page in a real browser: the system's headless Chromium, driven by Selenium through the
system's chromedriver, against a real uvicorn server on loopback. A reviewer signs in, filters,
opens a trace and follows an item to every call that returned it.

Selenium Manager is never used (explicit driver and browser paths, SE_OFFLINE): nothing is fetched.
Without Chromium the test is skipped, unless GATEWAY_TEST_REQUIRE_BROWSER=1 (CI), where it fails.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.ui import WebDriverWait

from gateway.auth import create_api_key
from gateway.http.app import create_app
from gateway.settings import load_settings
from tests.browser.chromium import not_installed, start_chromium
from tests.gateway.fixtures import SALES_TASK, memory

CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
START_TIMEOUT_S = 60
WAIT_S = 20


def require_browser() -> None:
    missing = not_installed()
    if missing:
        reason = (
            f"{' and '.join(missing)} not installed: install the Debian packages chromium and chromium-driver "
            "(./scripts/test does so when run as root)"
        )
        if os.environ.get("GATEWAY_TEST_REQUIRE_BROWSER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WebDriver]:
    require_browser()
    monkeypatch.setenv("SE_OFFLINE", "true")
    driver = start_chromium(tmp_path / "chromium-profile", CHROMIUM_FLAGS, WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


@dataclass(frozen=True, slots=True)
class LiveGateway:
    url: str
    app: Any

    def key(self, name: str, tenant: str = "acme", roles: tuple[str, ...] = ("agent",), groups: tuple[str, ...] = ()) -> str:
        return create_api_key(
            self.app.state.context.store,
            tenant=tenant,
            principal=f"user:{name}",
            roles=list(roles),
            groups=list(groups),
            clearance="confidential",
        )


@pytest.fixture
def live_gateway(tmp_path: Path) -> Iterator[LiveGateway]:
    """`create_app` served by uvicorn on a free loopback port, in a thread of this process."""
    settings = load_settings(
        {
            "data_dir": tmp_path / "data",
            "database_url": f"sqlite:///{tmp_path / 'gateway.db'}",
            "connector_deadline_ms": 10_000,
            "embeddings": "none",
            "pii": "none",
        },
        environ={},
    )
    app = create_app(settings)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, lifespan="on", ws="none", http="h11"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, name="audit-page-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("the gateway server did not start")
        time.sleep(0.05)
    try:
        yield LiveGateway(f"http://127.0.0.1:{listener.getsockname()[1]}", app)
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT_S)
        listener.close()


def seed(gateway: LiveGateway) -> tuple[str, dict[str, list[str]]]:
    """Items and calls over real HTTP; returns the auditor's key and the trace ids by caller."""
    writer, alice, bob = (
        gateway.key("writer", roles=("ingest",)),
        gateway.key("alice", groups=("sales",)),
        gateway.key("bob", groups=("sales",)),
    )
    auditor = gateway.key("auditor", roles=("auditor",))
    mallory = gateway.key("mallory", tenant="globex", groups=("sales",))
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        for tenant, items in (
            ("acme", [memory("mem_a", "zanzibar pricing note"), memory("mem_b", "zanzibar renewal note")]),
            ("globex", [memory("mem_a", "zanzibar globex note")]),
        ):
            key = writer if tenant == "acme" else gateway.key("writer-globex", tenant="globex", roles=("ingest",))
            assert client.put("/v1/items", json=items, headers={"Authorization": f"Bearer {key}"}).status_code == 200

        def retrieve(key: str, expected: int) -> str:
            body = {"task": SALES_TASK, "query": "zanzibar pricing", "sources": {"semantic": False}}
            response = client.post("/v1/retrieve", json=body, headers={"Authorization": f"Bearer {key}"})
            assert response.status_code == expected, response.text
            return response.headers["x-trace-id"]

        calls = {
            "alice": [retrieve(alice, 200), retrieve(alice, 200)],
            "bob": [retrieve(bob, 200)],
            "auditor": [retrieve(auditor, 403)],
            "mallory": [retrieve(mallory, 200)],
        }
    return auditor, calls


def rows(driver: WebDriver) -> list[str]:
    return [row.get_attribute("data-trace-id") or "" for row in driver.find_elements(By.CSS_SELECTOR, "tr.trace-row")]


def wait_for(driver: WebDriver, element_id: str) -> None:
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_elements(By.ID, element_id))


def filter_by(driver: WebDriver, **values: str) -> None:
    for name in ("actor", "task", "decision", "since", "until", "item"):
        field = driver.find_element(By.ID, f"filter-{name}")
        field.clear()
        field.send_keys(values.get(name, ""))
    old = driver.find_element(By.ID, "filters")
    driver.find_element(By.ID, "apply-filters").click()
    # The next page has replaced this one. While it does, Chromium may answer a look at the old form
    # with "node does not belong to the document" instead of a stale reference: ask again.
    WebDriverWait(driver, WAIT_S, ignored_exceptions=(WebDriverException,)).until(staleness_of(old))
    wait_for(driver, "filters")


def test_a_reviewer_signs_in_filters_opens_a_trace_and_follows_an_item(browser: WebDriver, live_gateway: LiveGateway) -> None:
    auditor, calls = seed(live_gateway)
    browser.get(f"{live_gateway.url}/audit")
    assert browser.find_element(By.ID, "key").get_attribute("type") == "password"
    # The inline style block is allowed by its hash in the Content-Security-Policy, so it applies.
    assert browser.find_element(By.TAG_NAME, "header").value_of_css_property("background-color") == "rgba(35, 48, 61, 1)"

    browser.find_element(By.ID, "key").send_keys("gw_0123456789abcdef_" + "x" * 30)
    browser.find_element(By.ID, "sign-in").click()
    wait_for(browser, "message")
    assert "That key was not accepted." in browser.find_element(By.ID, "message").text
    assert browser.find_element(By.ID, "key").get_attribute("value") == ""  # the page never echoes a key

    browser.find_element(By.ID, "key").send_keys(auditor)
    browser.find_element(By.ID, "sign-in").click()
    wait_for(browser, "filters")
    assert browser.find_element(By.ID, "signed-in-actor").text == "user:auditor"
    session = browser.get_cookie("gw_audit_session")
    assert session is not None and session["httpOnly"] and session["sameSite"] == "Strict" and session["path"] == "/audit"
    assert auditor.split("_", 2)[2] not in session["value"]
    assert browser.execute_script("return document.cookie") == ""  # out of reach of any script
    everything = rows(browser)
    assert set(calls["alice"] + calls["bob"] + calls["auditor"]) <= set(everything)
    assert calls["mallory"][0] not in everything

    filter_by(browser, decision="deny")
    assert rows(browser) == calls["auditor"]
    filter_by(browser, actor="user:alice", decision="allow")
    assert rows(browser) == calls["alice"][::-1]
    filter_by(browser, since="yesterday")
    assert "since: expected an instant" in browser.find_element(By.ID, "message").text and rows(browser) == []
    filter_by(browser, actor="user:alice", decision="allow")

    browser.find_element(By.CSS_SELECTOR, "tr.trace-row a.trace-link").click()
    wait_for(browser, "lineage")
    assert browser.find_element(By.ID, "trace-id").text == calls["alice"][-1]
    assert browser.find_element(By.ID, "trace-actor").text == "user:alice"
    stages = [s.get_attribute("id") for s in browser.find_elements(By.CSS_SELECTOR, "li.stage")]
    assert stages == ["stage-retrieved", "stage-dropped", "stage-packed", "stage-sent", "stage-cited", "stage-used"]
    packed = {a.text: a for a in browser.find_elements(By.CSS_SELECTOR, "#stage-packed a.item-link")}
    assert set(packed) == {"mem_a", "mem_b"}

    packed["mem_a"].click()
    WebDriverWait(browser, WAIT_S).until(lambda d: "item=mem_a" in d.current_url and d.find_elements(By.ID, "filters"))
    assert "Calls that returned mem_a" in browser.find_element(By.TAG_NAME, "h1").text
    assert rows(browser) == (calls["alice"] + calls["bob"])[::-1]  # acme's calls only, though globex has a mem_a too

    browser.find_element(By.ID, "verify-link").click()
    wait_for(browser, "verify-result")
    assert browser.find_element(By.ID, "verify-result").get_attribute("data-ok") == "true"

    browser.find_element(By.ID, "sign-out").click()
    wait_for(browser, "sign-in-form")
    assert browser.get_cookie("gw_audit_session") is None
