"""Audit page sessions end when they should: sessions live in the store, keyed by the HMAC of the
cookie's random token, so sign-out ends them for good (a replayed cookie opens nothing), no session
outlives GATEWAY_AUDIT_SESSION_MINUTES whatever its row says, nobody who reads the store can use a
row as a cookie, nobody who writes it can mint one without the session key (GATEWAY_AUDIT_SESSION_KEY
when set), and the forms are refused when the browser does not say they come from the page."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update

from core.instants import utc_now
from core.store import writer
from gateway.http.audit_pages import SESSION_COOKIE, session_id, session_key
from gateway.http.audit_pages import session as audit_sessions
from tests.conftest import Gateway, open_gateway
from tests.gateway.http.test_audit_page import SAME_ORIGIN, audit_rows, auditor_key, sign_in

table = audit_sessions.session_table
ENV_SESSION_KEY = "an operator's session key, 32 bytes or more, kept out of the database"


def rows(gateway: Gateway) -> list[dict[str, Any]]:
    with gateway.store.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(select(table))]


def count(gateway: Gateway) -> int:
    with gateway.store.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def with_cookie(gateway: Gateway, token: str, path: str = "/audit") -> Any:
    gateway.client.cookies.clear()
    return gateway.client.get(path, headers={"cookie": f"{SESSION_COOKIE}={token}"})


def signed_out(response: Any) -> bool:
    """The sign-in form, not the trail."""
    return bool(
        response.status_code == 401
        and 'id="sign-in-form"' in response.text
        and 'id="filters"' not in response.text
        and "trace-row" not in response.text
    )


def opens_the_trail(response: Any) -> bool:
    return bool(response.status_code == 200 and 'id="filters"' in response.text)


def new_session(gateway: Gateway, tenant: str = "acme") -> str:
    """Sign in through the form; the cookie's token."""
    gateway.client.cookies.clear()
    response = sign_in(gateway, auditor_key(gateway, tenant))
    assert response.status_code == 303, response.text
    token: str = gateway.client.cookies[SESSION_COOKIE]
    gateway.client.cookies.clear()
    return token


def context_key(gateway: Gateway) -> bytes:
    """The session key the running gateway uses."""
    context = gateway.client.app.state.context  # type: ignore[attr-defined]
    return session_key(context.audit.key, context.settings.audit_session_key)


def change_row(gateway: Gateway, token: str, **values: Any) -> None:
    with writer(gateway.store).begin() as conn:
        changed = conn.execute(update(table).where(table.c.id == session_id(context_key(gateway), token)).values(**values))
        assert changed.rowcount == 1


def test_sign_out_ends_the_session_so_a_replayed_cookie_opens_nothing(gateway: Gateway, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    gateway.ingest("acme", [{"id": "mem_a", "kind": "memory", "text": "zanzibar", "acl": ["*"], "scope": ["sales"]}])
    token = new_session(gateway)
    assert opens_the_trail(with_cookie(gateway, token))
    assert with_cookie(gateway, token, "/audit/verify").status_code == 200
    assert count(gateway) == 1

    out = gateway.client.post(
        "/audit/sign-out", headers={**SAME_ORIGIN, "cookie": f"{SESSION_COOKIE}={token}"}, follow_redirects=False
    )
    assert out.status_code == 303 and "max-age=0" in out.headers["set-cookie"].lower()
    assert count(gateway) == 0
    row = gateway.trace(out.headers["x-trace-id"])
    assert row["actor"] == "user:auditor-acme"
    assert row["lineage"]["audit_session"] == {"ended": "signed_out", "session": session_id(context_key(gateway), token)[:16]}

    for path in ("/audit", "/audit/verify", "/audit/traces/tr_000000000000000000000000"):
        replayed = with_cookie(gateway, token, path)
        assert signed_out(replayed), (path, replayed.status_code)
        assert gateway.trace(replayed.headers["x-trace-id"])["error_code"] == "unauthenticated"
    again = gateway.client.post(
        "/audit/sign-out", headers={**SAME_ORIGIN, "cookie": f"{SESSION_COOKIE}={token}"}, follow_redirects=False
    )
    assert again.status_code == 303
    assert gateway.trace(again.headers["x-trace-id"])["lineage"]["audit_session"] == {"ended": "already"}

    assert token not in audit_rows(gateway) and token not in caplog.text


def test_no_session_outlives_the_configured_minutes_whatever_its_row_says(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = new_session(gateway)
    far = utc_now() + timedelta(days=3650)
    change_row(gateway, token, expires_at=far)  # someone who can write the store pushes the expiry
    started = utc_now()

    monkeypatch.setattr(audit_sessions, "utc_now", lambda: started + timedelta(minutes=59))
    assert opens_the_trail(with_cookie(gateway, token))
    monkeypatch.setattr(audit_sessions, "utc_now", lambda: started + timedelta(minutes=61))
    late = with_cookie(gateway, token)
    assert signed_out(late) and "expired" in late.text

    # Making the row younger, or moving it to another auditor's key, breaks its MAC.
    monkeypatch.setattr(audit_sessions, "utc_now", lambda: started + timedelta(minutes=1))
    younger = new_session(gateway)
    change_row(gateway, younger, created_at=started + timedelta(minutes=30), expires_at=far)
    assert signed_out(with_cookie(gateway, younger))
    moved = new_session(gateway)
    globex = auditor_key(gateway, "globex").split("_", 2)[1]
    change_row(gateway, moved, key_id=globex)
    assert signed_out(with_cookie(gateway, moved))


def old_cookie(audit_key: bytes, key_id: str, expires: int) -> str:
    """The cookie the gateway used to issue: `key_id.expiry.hmac` under a key derived from the audit key."""
    key = hmac.new(audit_key, b"audit-page-session", hashlib.sha256).digest()
    return f"{key_id}.{expires}.{hmac.new(key, f'{key_id}.{expires}'.encode(), hashlib.sha256).hexdigest()}"


def test_cookies_in_the_old_format_are_refused(sqlite_gateway: Gateway) -> None:
    gateway = sqlite_gateway
    key_id = auditor_key(gateway).split("_", 2)[1]
    audit_key = gateway.client.app.state.context.audit.key  # type: ignore[attr-defined]
    for expires in (int(time.time()) + 3600, int(time.time()) + 10 * 365 * 86400):
        response = with_cookie(gateway, old_cookie(audit_key, key_id, expires))
        assert signed_out(response)
        assert gateway.trace(response.headers["x-trace-id"])["error_code"] == "unauthenticated"


def test_unknown_and_tampered_tokens_are_refused_and_the_store_never_holds_the_token(gateway: Gateway) -> None:
    token = new_session(gateway)
    [row] = rows(gateway)
    stored = json.dumps(row, default=str)
    assert token not in stored and token[:12] not in stored
    assert row["id"] == session_id(context_key(gateway), token) != hashlib.sha256(token.encode()).hexdigest()
    assert row["key_id"] == auditor_key(gateway).split("_", 2)[1]

    flipped = token[:-1] + ("A" if token[-1] != "A" else "B")
    for cookie in (audit_sessions.new_token(), flipped, token[:-1], token + "A", row["id"], row["mac"], "", "a.b.c"):
        assert signed_out(with_cookie(gateway, cookie)), cookie
    assert opens_the_trail(with_cookie(gateway, token))

    # A row written by someone without the session key (here: keyed by a plain hash) opens nothing.
    forged = audit_sessions.new_token()
    now = utc_now()
    with writer(gateway.store).begin() as conn:
        conn.execute(
            table.insert().values(
                id=hashlib.sha256(forged.encode()).hexdigest(),
                key_id=row["key_id"],
                created_at=now,
                expires_at=now + timedelta(hours=1),
                mac=row["mac"],
            )
        )
    assert signed_out(with_cookie(gateway, forged))


def test_forms_without_origin_are_refused_unless_the_browser_says_same_origin(gateway: Gateway) -> None:
    key = auditor_key(gateway)
    gateway.client.cookies.clear()
    bare = gateway.client.post("/audit/sign-in", data={"key": key}, follow_redirects=False)
    assert bare.status_code == 403 and "set-cookie" not in bare.headers
    assert "no Origin header" in bare.text and "audit page itself" in bare.text
    assert gateway.trace(bare.headers["x-trace-id"])["error_code"] == "forbidden"
    assert count(gateway) == 0
    for headers in (
        {"sec-fetch-site": "cross-site"},
        {"sec-fetch-site": "same-site"},
        {"sec-fetch-site": "none"},
        {"origin": "https://evil.example"},
        {"origin": "https://evil.example", "sec-fetch-site": "same-origin"},
        {"origin": "null"},
        {"origin": "http://testserver.evil.example"},
    ):
        refused = gateway.client.post("/audit/sign-in", data={"key": key}, headers=headers, follow_redirects=False)
        assert refused.status_code == 403 and "set-cookie" not in refused.headers, headers
    assert count(gateway) == 0

    fetched = gateway.client.post(
        "/audit/sign-in", data={"key": key}, headers={"sec-fetch-site": "same-origin"}, follow_redirects=False
    )
    assert fetched.status_code == 303 and count(gateway) == 1
    token = gateway.client.cookies[SESSION_COOKIE]
    assert sign_in(gateway, key).status_code == 303  # with the page's own Origin
    assert count(gateway) == 1  # signing in again ended the browser's previous session
    assert signed_out(with_cookie(gateway, token))
    token = new_session(gateway)

    # Sign-out too: another site cannot sign a reviewer out.
    for headers in ({}, {"origin": "https://evil.example"}):
        refused = gateway.client.post(
            "/audit/sign-out", headers={**headers, "cookie": f"{SESSION_COOKIE}={token}"}, follow_redirects=False
        )
        assert refused.status_code == 403 and "set-cookie" not in refused.headers
    assert opens_the_trail(with_cookie(gateway, token))
    out = gateway.client.post(
        "/audit/sign-out",
        headers={"sec-fetch-site": "same-origin", "cookie": f"{SESSION_COOKIE}={token}"},
        follow_redirects=False,
    )
    assert out.status_code == 303 and signed_out(with_cookie(gateway, token))


def test_sessions_are_keyed_by_the_session_key_from_the_environment(
    sqlite_gateway: Gateway, sqlite_url: str, tmp_path: Path
) -> None:
    # Without GATEWAY_AUDIT_SESSION_KEY the key is derived from the audit key, which the store holds:
    # whoever can read and write the store can open a session. That is why operators set it.
    derived = session_key(sqlite_gateway.client.app.state.context.audit.key)  # type: ignore[attr-defined]
    key_id = auditor_key(sqlite_gateway).split("_", 2)[1]
    minted, _ = audit_sessions.open_session(sqlite_gateway.store, derived, key_id, 60)
    assert opens_the_trail(with_cookie(sqlite_gateway, minted))

    with open_gateway(
        sqlite_url.replace("gateway.db", "keyed.db"), tmp_path / "keyed", audit_session_key=ENV_SESSION_KEY
    ) as gateway:
        audit_key = gateway.client.app.state.context.audit.key  # type: ignore[attr-defined]
        assert context_key(gateway) == session_key(audit_key, ENV_SESSION_KEY) != session_key(audit_key)
        token = new_session(gateway)
        [row] = rows(gateway)
        assert (
            row["id"] == session_id(session_key(audit_key, ENV_SESSION_KEY), token) != session_id(session_key(audit_key), token)
        )
        assert opens_the_trail(with_cookie(gateway, token))

        key_id = auditor_key(gateway).split("_", 2)[1]
        minted, _ = audit_sessions.open_session(gateway.store, session_key(audit_key), key_id, 60)  # a writer of the store
        assert count(gateway) == 2
        assert signed_out(with_cookie(gateway, minted))


def test_sign_in_deletes_dead_sessions_a_bounded_number_at_a_time(
    sqlite_gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = sqlite_gateway
    key, key_id = context_key(gateway), auditor_key(gateway).split("_", 2)[1]
    live, _ = audit_sessions.open_session(gateway.store, key, key_id, 60)
    for _ in range(5):  # opened two hours ago: none deletes the others
        audit_sessions.open_session(gateway.store, key, key_id, 60, now=utc_now() - timedelta(hours=2))
    assert count(gateway) == 6
    monkeypatch.setattr(audit_sessions, "PURGE_LIMIT", 3)
    new_session(gateway)
    assert count(gateway) == 2 + 2  # two dead left, the live one, the new one
    new_session(gateway)
    assert count(gateway) == 3
    assert opens_the_trail(with_cookie(gateway, live))
