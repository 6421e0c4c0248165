"""The audit page for reviewers, through the HTTP stack: an auditor key opens a server-side session
whose cookie never holds the key, lists and filters its own tenant's traces only, shows one call's lineage stage
by stage with every item a link, escapes everything it echoes, and every view is an audit row."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session

from audit.record import lineage_stages
from core.instants import utc_now
from core.store import writer
from core.tables import ApiKey
from gateway.http.audit_pages import SESSION_COOKIE, session_id, session_key
from gateway.http.audit_pages import session as audit_sessions
from gateway.http.audit_pages import views as audit_views
from tests.conftest import Gateway, open_gateway
from tests.gateway.fixtures import SALES_TASK, memory
from tests.llm_double import LlmDouble, echo_placeholders

TRACE_ROW = re.compile(r'data-trace-id="(tr_[0-9a-f]+)"')
STAGES = re.compile(r'<li class="stage" id="stage-([a-z]+)">')


def seed(gateway: Gateway) -> dict[str, list[str]]:
    """Calls in two tenants; returns the trace ids by who made them."""
    gateway.ingest("acme", [memory("mem_a", "zanzibar pricing note"), memory("mem_b", "zanzibar renewal note")])
    gateway.ingest("globex", [memory("mem_g", "zanzibar globex note")])
    alice = gateway.key("alice", groups=("sales",), clearance="confidential")
    bob = gateway.key("bob", groups=("sales",), clearance="confidential")
    mallory = gateway.key("mallory", tenant="globex", groups=("sales",), clearance="confidential")

    def call(key: str, task: dict[str, Any] = SALES_TASK) -> str:
        trace_id: str = gateway.retrieve(key, {"task": task, "query": "zanzibar pricing"}).headers["x-trace-id"]
        return trace_id

    return {
        "alice": [call(alice), call(alice)],
        "alice_denied": [call(alice, {"type": "no_such_task"})],
        "bob": [call(bob)],
        "mallory": [call(mallory)],
    }


def auditor_key(gateway: Gateway, tenant: str = "acme") -> str:
    return gateway.key(f"auditor-{tenant}", tenant=tenant, roles=("auditor",))


SAME_ORIGIN = {"origin": "http://testserver"}  # what a browser sends with the page's own forms


def sign_in(gateway: Gateway, key: str, **headers: str) -> Any:
    return gateway.client.post("/audit/sign-in", data={"key": key}, headers={**SAME_ORIGIN, **headers}, follow_redirects=False)


def session_rows(gateway: Gateway) -> list[dict[str, Any]]:
    from sqlalchemy import select

    table = audit_sessions.session_table
    with gateway.store.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(select(table))]


def gateway_session_key(gateway: Gateway) -> bytes:
    context = gateway.client.app.state.context  # type: ignore[attr-defined]
    return session_key(context.audit.key, context.settings.audit_session_key)


def signed_in(gateway: Gateway, tenant: str = "acme") -> Gateway:
    gateway.client.cookies.clear()
    assert sign_in(gateway, auditor_key(gateway, tenant)).status_code == 303
    return gateway


def listed(gateway: Gateway, **params: str) -> list[str]:
    response = gateway.client.get("/audit", params=params)
    assert response.status_code == 200, response.text
    return TRACE_ROW.findall(response.text)


def audit_rows(gateway: Gateway) -> str:
    """Every audit row in the store, as one text to search."""
    from sqlalchemy import select

    from audit.chain import audit_trace

    with gateway.store.connect() as conn:
        return json.dumps([dict(r._mapping) for r in conn.execute(select(audit_trace))], default=str)


def revoke(gateway: Gateway, key: str) -> None:
    with Session(writer(gateway.store)) as session:  # read then write: take the write lock up front
        row = session.get(ApiKey, key.split("_", 2)[1])
        assert row is not None
        row.revoked_at = utc_now()
        session.add(row)
        session.commit()


def test_sign_in_sets_an_http_only_cookie_that_holds_a_random_token_only(sqlite_gateway: Gateway) -> None:
    gateway = sqlite_gateway
    form = gateway.client.get("/audit")
    assert form.status_code == 200 and 'type="password"' in form.text and 'name="key"' in form.text
    assert "trace-row" not in form.text and form.headers["cache-control"] == "no-store"
    assert (
        "script-src" not in form.headers["content-security-policy"]
        and "default-src 'none'" in form.headers["content-security-policy"]
    )

    key = auditor_key(gateway)
    _, key_id, secret = key.split("_", 2)
    response = sign_in(gateway, key)
    assert response.status_code == 303 and response.headers["location"] == "/audit"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=")
    assert {"httponly", "samesite=strict", "path=/audit", "max-age=3600"} <= {p.strip().lower() for p in cookie.split(";")}
    value = cookie.split(";")[0].split("=", 1)[1]
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", value) and key_id not in value
    assert key not in cookie and secret not in cookie
    [row] = session_rows(gateway)
    assert row["id"] == session_id(gateway_session_key(gateway), value) and row["key_id"] == key_id
    assert value not in json.dumps(row, default=str)
    assert row["expires_at"] - row["created_at"] == timedelta(minutes=60)
    assert abs((row["created_at"] - utc_now()).total_seconds()) < 60

    page = gateway.client.get("/audit")
    assert page.status_code == 200 and "user:auditor-acme" in page.text and 'id="filters"' in page.text
    sign_in_row = gateway.trace(response.headers["x-trace-id"])
    assert sign_in_row["endpoint"] == "audit_sign_in" and sign_in_row["actor"] == "user:auditor-acme"
    assert sign_in_row["lineage"]["audit_session"]["key_id"] == key_id
    assert sign_in_row["lineage"]["audit_session"]["session"] == row["id"][:16]
    assert secret not in audit_rows(gateway) and value not in audit_rows(gateway)


def test_the_session_lasts_the_configured_minutes(sqlite_url: str, tmp_path: Path) -> None:
    with open_gateway(sqlite_url, tmp_path, audit_session_minutes=5) as gateway:
        cookie = sign_in(gateway, auditor_key(gateway)).headers["set-cookie"]
        assert "max-age=300" in cookie.lower()
        [row] = session_rows(gateway)
        assert row["expires_at"] - row["created_at"] == timedelta(minutes=5)


def test_other_roles_garbage_and_cross_site_posts_are_refused_without_recording_the_key(
    sqlite_gateway: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = sqlite_gateway
    agent = gateway.key("alice", groups=("sales",))
    real = auditor_key(gateway)
    wrong_secret = real[:-4] + ("AAAA" if not real.endswith("AAAA") else "BBBB")
    caplog.set_level("DEBUG")
    refused = sign_in(gateway, agent)
    assert refused.status_code == 403 and "does not have the auditor role" in refused.text
    assert "set-cookie" not in refused.headers
    assert gateway.trace(refused.headers["x-trace-id"])["error_code"] == "forbidden"
    for garbage in (wrong_secret, "not-a-key", "a.b.c", "", "gw_0123456789abcdef_" + "x" * 30, f" {wrong_secret}\n"):
        response = sign_in(gateway, garbage)
        assert response.status_code == 401 and "That key was not accepted." in response.text, garbage
        assert "set-cookie" not in response.headers
        row = gateway.trace(response.headers["x-trace-id"])
        assert row["endpoint"] == "audit_sign_in" and row["error_code"] == "unauthenticated" and row["actor"] is None
    cross_site = sign_in(gateway, real, origin="https://evil.example")
    assert cross_site.status_code == 403 and "set-cookie" not in cross_site.headers
    assert sign_in(gateway, real, origin="http://testserver").status_code == 303  # the page's own origin
    not_a_form = gateway.client.post("/audit/sign-in", json={"key": real}, headers=SAME_ORIGIN)
    assert not_a_form.status_code == 400 and not_a_form.headers["content-type"].startswith("text/html")
    stored = audit_rows(gateway)
    for key in (agent, wrong_secret, real):
        secret = key.split("_", 2)[2]
        assert secret not in stored and secret not in caplog.text
        assert secret not in refused.text


def test_list_filters_and_pages_within_the_own_tenant(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = seed(gateway)
    signed_in(gateway)
    everything = listed(gateway)
    assert set(calls["alice"] + calls["alice_denied"] + calls["bob"]) <= set(everything)
    assert calls["mallory"][0] not in everything
    page = gateway.client.get("/audit").text
    assert "user:mallory" not in page and "globex" not in page

    alice_all = calls["alice"] + calls["alice_denied"]
    assert listed(gateway, actor="user:alice") == alice_all[::-1]  # newest first
    assert listed(gateway, actor="user:alice", decision="allow") == calls["alice"][::-1]
    assert listed(gateway, decision="deny") == calls["alice_denied"]
    assert (
        listed(
            gateway,
            actor="user:alice",
            task="account_followup",
            since="2000-01-01T00:00:00Z",
            until="2199-01-01T00:00:00Z",
            decision="",
            item="",
        )
        == calls["alice"][::-1]
    )
    by_item = gateway.client.get("/audit", params={"item": "mem_a"})
    assert TRACE_ROW.findall(by_item.text) == (calls["alice"] + calls["bob"])[::-1]
    assert "Calls that returned <code>mem_a</code>" in by_item.text
    empty = gateway.client.get("/audit", params={"item": "mem_g"})  # globex's item: globex's calls only
    assert TRACE_ROW.findall(empty.text) == [] and 'id="no-traces"' in empty.text

    monkeypatch.setattr(audit_views, "PAGE_SIZE", 2)
    seen, url = [], "/audit?actor=user%3Aalice"
    while url:
        response = gateway.client.get(url)
        seen.append(TRACE_ROW.findall(response.text))
        older = re.search(r'<a href="([^"]+)" id="older">Older</a>', response.text)
        url = older.group(1).replace("&amp;", "&") if older else ""
    assert seen == [alice_all[::-1][:2], alice_all[::-1][2:]]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"since": "yesterday"}, "since: expected an instant"),
        ({"until": "2026-11-30T00:00:00"}, "until: expected an instant"),
        ({"cursor": "c_x"}, "cursor: not a cursor this page issued"),
        ({"bogus": "1"}, "bogus: not a filter of this page"),
    ],
)
def test_bad_filters_are_a_readable_message_not_a_500(sqlite_gateway: Gateway, params: dict[str, str], message: str) -> None:
    signed_in(sqlite_gateway)
    response = sqlite_gateway.client.get("/audit", params=params)
    assert response.status_code == 400 and message in response.text and 'id="filters"' in response.text
    assert sqlite_gateway.trace(response.headers["x-trace-id"])["error_code"] == "bad_request"


def test_filter_values_are_rendered_inert(sqlite_gateway: Gateway) -> None:
    signed_in(sqlite_gateway)
    hostile = '"><script>alert(1)</script>'
    response = sqlite_gateway.client.get("/audit", params={"actor": hostile, "item": hostile})
    assert response.status_code == 200
    assert "<script" not in response.text
    assert "&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in response.text
    error = sqlite_gateway.client.get("/audit", params={"<script>": "x"})
    assert error.status_code == 400 and "<script" not in error.text and "&lt;script&gt;" in error.text


def test_the_folded_filters_are_rendered_inert_and_open(sqlite_gateway: Gateway) -> None:
    """The overview's filters (revision, reason, entity, ...) echo into the folded form section too."""
    signed_in(sqlite_gateway)
    hostile = '"><script>alert(1)</script>'
    names = ("revision", "reason", "returned", "masked", "revealed", "entity")
    response = sqlite_gateway.client.get("/audit", params=dict.fromkeys(names, hostile))
    assert response.status_code == 200 and "<script" not in response.text
    assert response.text.count("&#34;&gt;&lt;script&gt;alert(1)&lt;/script&gt;") == len(names)
    assert 'id="more-filters" open' in response.text
    assert 'id="more-filters" open' not in sqlite_gateway.client.get("/audit").text


@pytest.fixture
def llm() -> Iterator[LlmDouble]:
    with LlmDouble(echo_placeholders(cite=["M1"])) as double:
        yield double


def test_trace_page_shows_the_lineage_in_stages_with_item_links(llm: LlmDouble, sqlite_url: str, tmp_path: Path) -> None:
    with open_gateway(sqlite_url, tmp_path, llm_url=llm.url, llm_timeout_ms=5000) as gateway:
        gateway.ingest("acme", [memory("mem_a", "zanzibar pricing note " * 3), memory("mem_b", "zanzibar renewal note " * 30)])
        alice = gateway.key("alice", groups=("sales",), clearance="confidential")
        answered = gateway.retrieve(
            alice, {"task": SALES_TASK, "query": "zanzibar pricing", "synthesize": True, "budget": {"bytes": 400}}
        )
        trace_id = answered.json()["trace_id"]
        gateway.client.post(f"/v1/traces/{trace_id}/usage", json={"used": ["mem_a"]}, headers=gateway.auth(alice))
        gateway.client.post(
            f"/v1/traces/{trace_id}/feedback", json={"rating": 4, "comment": "helpful"}, headers=gateway.auth(alice)
        )
        lineage = gateway.trace(trace_id)["lineage"]
        assert lineage["dropped_for_budget"] == ["mem_b"] and lineage["synthesis"]["cited"] == ["mem_a"]

        signed_in(gateway)
        page = gateway.client.get(f"/audit/traces/{trace_id}")
        assert page.status_code == 200
        assert STAGES.findall(page.text) == ["retrieved", "dropped", "packed", "sent", "cited", "used"]
        stage = {
            name: body
            for name, body in re.findall(r'id="stage-([a-z]+)">(.*?)</li>\s*(?=<li class="stage"|</ol>)', page.text, re.S)
        }
        links = {name: re.findall(r'class="item-link mono" href="/audit\?item=([^"]+)"', body) for name, body in stage.items()}
        assert links == {
            "retrieved": ["mem_a", "mem_b"],
            "dropped": ["mem_b"],
            "packed": ["mem_a"],
            "sent": ["mem_a"],
            "cited": ["mem_a"],
            "used": ["mem_a"],
        }
        assert "lexical" in stage["retrieved"] and "for budget" in stage["dropped"]
        for field in ("user:alice", "retrieve", "allow", "embedded", gateway.trace(trace_id)["row_hash"]):
            assert field in page.text
        assert 'id="feedback"' in page.text and "helpful" not in page.text

        followed = gateway.client.get("/audit?item=mem_a")
        assert TRACE_ROW.findall(followed.text) == [trace_id]
        views = json.loads(
            gateway.client.get(
                "/v1/audit/traces", params={"actor": "user:auditor-acme"}, headers=gateway.auth(auditor_key(gateway))
            ).text
        )["traces"]
        assert [v["endpoint"] for v in views][:3] == ["audit_page", "audit_page_trace", "audit_sign_in"]
        opened = gateway.trace(views[1]["trace_id"])
        assert opened["lineage"]["audit_read"] == {"trace": trace_id} and opened["decision"] == "read"


def test_lineage_stages_name_each_drop_reason() -> None:
    stages = lineage_stages(
        {
            "lineage": {
                "retrieved": {"semantic": ["mem_x"], "lexical": ["mem_a", "mem_x"]},
                "dropped_by_policy": [{"id": "mem_x", "reason": "acl"}],
                "dropped_as_historical": ["mem_old"],
                "dropped_for_budget": [],
                "packed": ["mem_a"],
            },
            "used": [],
        }
    )
    by_key = {s.key: s for s in stages}
    assert [g.label for g in by_key["retrieved"].groups] == ["lexical", "semantic"]
    assert [(g.label, [(e.item, e.note) for e in g.entries]) for g in by_key["dropped"].groups] == [
        ("by policy", [("mem_x", "acl")]),
        ("as historical", [("mem_old", None)]),
    ]
    assert (
        by_key["sent"].absent == "no synthesis on this call" and by_key["packed"].groups[0].entries[0].href == "/audit?item=mem_a"
    )
    assert lineage_stages({"lineage": {"decision": {"allow": False}}, "used": []}) == ()


def test_another_tenants_trace_is_the_same_404_as_an_unknown_one(sqlite_gateway: Gateway) -> None:
    calls = seed(sqlite_gateway)
    signed_in(sqlite_gateway)
    own = sqlite_gateway.client.get(f"/audit/traces/{calls['alice_denied'][0]}")
    assert own.status_code == 200 and 'id="no-lineage"' in own.text and "deny" in own.text
    other = sqlite_gateway.client.get(f"/audit/traces/{calls['mallory'][0]}")
    unknown = sqlite_gateway.client.get("/audit/traces/tr_000000000000000000000000")
    assert other.status_code == unknown.status_code == 404
    assert other.text == unknown.text and "user:mallory" not in other.text
    sqlite_gateway.client.cookies.clear()
    assert sqlite_gateway.client.get(f"/audit/traces/{calls['alice'][0]}").status_code == 401


def test_revoking_the_key_signs_its_session_out_at_once(sqlite_gateway: Gateway) -> None:
    signed_in(sqlite_gateway)
    assert 'id="filters"' in sqlite_gateway.client.get("/audit").text
    revoke(sqlite_gateway, auditor_key(sqlite_gateway))
    response = sqlite_gateway.client.get("/audit")
    assert response.status_code == 401 and "no longer valid" in response.text and 'id="filters"' not in response.text
    assert "max-age=0" in response.headers["set-cookie"].lower()  # the browser drops it
    assert sqlite_gateway.client.get("/audit").status_code == 200  # no cookie: just the form


def test_tampered_forged_expired_and_non_auditor_cookies_are_refused(sqlite_gateway: Gateway) -> None:
    gateway = sqlite_gateway
    signed_in(gateway)
    value = gateway.client.cookies[SESSION_COOKIE]
    key_id = gateway.keys["auditor-acme"].split("_", 2)[1]
    other_id = gateway.key("alice", groups=("sales",)).split("_", 2)[1]
    key = gateway_session_key(gateway)
    agents, _ = audit_sessions.open_session(gateway.store, key, other_id, 60)  # genuine, but an agent's key
    expired, _ = audit_sessions.open_session(
        gateway.store, key, key_id, 60, now=utc_now() - timedelta(hours=2)
    )  # opening a session now would delete it
    flipped = value[:-1] + ("A" if value[-1] != "A" else "B")
    tampered = [
        flipped,
        value[:-1],
        value + "A",
        audit_sessions.new_token(),  # well-formed, but no session has it
        expired,
        agents,
        "garbage",
    ]
    gateway.client.cookies.clear()
    for cookie in tampered:
        response = gateway.client.get("/audit", headers={"cookie": f"{SESSION_COOKIE}={cookie}"})
        assert response.status_code == 401 and 'id="sign-in-form"' in response.text and 'id="filters"' not in response.text, (
            cookie
        )
        assert gateway.trace(response.headers["x-trace-id"])["error_code"] == "unauthenticated"
        assert cookie not in response.text
    assert "expired" in gateway.client.get("/audit", headers={"cookie": f"{SESSION_COOKIE}={expired}"}).text
    assert "auditor role" in gateway.client.get("/audit", headers={"cookie": f"{SESSION_COOKIE}={agents}"}).text
    genuine = gateway.client.get("/audit", headers={"cookie": f"{SESSION_COOKIE}={value}"})
    assert genuine.status_code == 200 and 'id="filters"' in genuine.text


def test_sign_out_clears_the_cookie(sqlite_gateway: Gateway) -> None:
    signed_in(sqlite_gateway)
    response = sqlite_gateway.client.post("/audit/sign-out", headers=SAME_ORIGIN, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/audit"
    assert "max-age=0" in response.headers["set-cookie"].lower()
    assert sqlite_gateway.trace(response.headers["x-trace-id"])["actor"] == "user:auditor-acme"
    page = sqlite_gateway.client.get("/audit")
    assert page.status_code == 200 and 'id="sign-in-form"' in page.text


def test_the_chain_check_page_says_intact_then_names_the_edited_row(sqlite_gateway: Gateway) -> None:
    from sqlalchemy import select, update

    from audit.chain import audit_trace

    gateway = sqlite_gateway
    seed(gateway)
    signed_in(gateway)
    intact = gateway.client.get("/audit/verify")
    assert intact.status_code == 200 and 'data-ok="true"' in intact.text and "tenant <strong>acme</strong>" in intact.text
    with writer(gateway.store).begin() as conn:
        target = conn.execute(
            select(audit_trace).where(audit_trace.c.chain == "acme").order_by(audit_trace.c.seq).limit(1).offset(2)
        ).first()
        assert target is not None
        conn.execute(
            update(audit_trace)
            .where(audit_trace.c.pk == target.pk)
            .values(decision="allow" if target.decision != "allow" else "deny")
        )
    broken = gateway.client.get("/audit/verify")
    assert broken.status_code == 200 and 'data-ok="false"' in broken.text
    assert f'<strong id="broken-seq">{target.seq}</strong>' in broken.text and target.trace_id in broken.text
    assert "content does not match its hash" in broken.text
    gateway.client.cookies.clear()
    assert gateway.client.get("/audit/verify").status_code == 401  # signed out: the sign-in form
