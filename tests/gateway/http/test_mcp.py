"""The MCP server at /mcp, driven by the SDK's own client over real HTTP: the same credential,
policy, admission and audit as the HTTP API."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult

from core.errors import ConfigurationError
from gateway.admission import Admission
from gateway.http.mcp import origin_allowed
from gateway.http.mcp_tools import TOOLS
from gateway.settings import load_settings
from tests.conftest import LiveGateway, open_gateway, serve_gateway
from tests.gateway.fixtures import FORBIDDEN, OTHER_TENANT, SALES_TASK, memory, seed

ALLOWED_ORIGIN = "http://agents.example"
KIWI = [memory(f"mem_kiwi_{n}", f"kiwifruit shipment note number {n} " + "padding " * 20) for n in range(6)]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveGateway]:
    """One served gateway for the tests that only read (and add rows of their own calls)."""
    directory = tmp_path_factory.mktemp("mcp")
    with serve_gateway(f"sqlite:///{directory / 'gateway.db'}", directory, mcp_allowed_origins=f"{ALLOWED_ORIGIN}:*") as served:
        seed(served.gateway)
        served.gateway.ingest("acme", KIWI)
        served.gateway.key("bob", groups=("sales",), clearance="internal")
        yield served


def key(live: LiveGateway, name: str) -> str:
    return live.gateway.keys[name]


async def _calls(
    url: str, token: str | None, calls: list[tuple[str, dict[str, Any]]], *, origin: str | None = None, mode: str = "auto"
) -> tuple[list[str], list[CallToolResult]]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if origin:
        headers["Origin"] = origin
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode) as client:
            names = [tool.name for tool in (await client.list_tools()).tools]
            return names, [await client.call_tool(name, arguments) for name, arguments in calls]


def call(live: LiveGateway, who: str, name: str, arguments: dict[str, Any], **options: Any) -> CallToolResult:
    return anyio.run(lambda: _calls(live.url, key(live, who), [(name, arguments)], **options))[1][0]


def body(result: CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def ids(result: CallToolResult) -> list[str]:
    assert not result.is_error, result.content
    return sorted(item["id"] for item in body(result)["items"])


def text(result: CallToolResult) -> str:
    return "\n".join(getattr(part, "text", "") for part in result.content)


def row(live: LiveGateway, result: CallToolResult) -> dict[str, Any]:
    assert result.meta is not None
    return live.gateway.trace(result.meta["gateway/trace_id"])


# ---------------------------------------------------------------- the tools


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # the 2026 per-request wire, and the initialize handshake
def test_the_tools_are_listed_with_the_http_models_schemas(live: LiveGateway, mode: str) -> None:
    names, _ = anyio.run(lambda: _calls(live.url, key(live, "alice"), [], mode=mode))
    assert names == ["retrieve", "fetch", "expand", "report_usage", "feedback"]
    schema = TOOLS["retrieve"].listing().input_schema
    assert schema["required"] == ["task"] and schema["additionalProperties"] is False
    assert set(schema["properties"]) == {
        "mode",
        "task",
        "query",
        "entities",
        "depth",
        "budget",
        "kinds",
        "as_of",
        "include_historical",
    }
    assert schema["properties"]["mode"]["enum"] == ["brief", "scout"]
    assert schema["$defs"]["Budget"]["properties"]["bytes"]["maximum"] == 200_000  # RetrieveRequest's own bound
    assert not any({"tenant", "actor"} & set(tool.listing().input_schema["properties"]) for tool in TOOLS.values())


def test_two_actors_get_what_the_policy_gives_each(live: LiveGateway) -> None:
    question = {"task": SALES_TASK, "query": "wombatsens confidential note", "mode": "brief"}
    alice, bob = call(live, "alice", "retrieve", question), call(live, "bob", "retrieve", question)
    assert "mem_confidential_ok" in ids(alice)  # alice's clearance is confidential
    assert "mem_confidential_ok" not in ids(bob) and "wombatsens" not in text(bob)  # bob's is internal
    for result in (alice, bob):
        answer = body(result)
        assert {"trace_id", "partial", "empty_reason", "items"} <= set(answer)
        assert f"trace_id: {answer['trace_id']}" in text(result)
    assert "[M1] mem_confidential_ok" in text(alice)
    assert all(item["citation"] for item in body(alice)["items"])
    if not body(bob)["items"]:
        assert body(bob)["empty_reason"] == "no_relevant_permitted_items"


def test_a_forbidden_planted_item_never_appears_in_a_tool_result(live: LiveGateway) -> None:
    planted = [*FORBIDDEN.values(), OTHER_TENANT[0]]
    calls = [("retrieve", {"task": SALES_TASK, "query": item["text"]}) for item in planted]
    calls.append(("fetch", {"task": SALES_TASK, "ids": [item["id"] for item in planted]}))
    calls.append(("retrieve", {"task": SALES_TASK, "query": "quokka note", "mode": "brief", "entities": [{"id": "ent_jane"}]}))
    _, results = anyio.run(lambda: _calls(live.url, key(live, "alice"), calls))
    for result in results:
        shown = json.dumps(result.model_dump(mode="json", by_alias=True))
        for item in planted:
            assert item["id"] not in ids(result) and item["text"] not in shown
    assert body(results[len(planted)])["items"] == []  # a fetch of forbidden ids reads as an empty answer
    assert body(results[len(planted)])["empty_reason"] == "no_relevant_permitted_items"


def test_fetch_expand_usage_and_feedback_each_leave_an_audit_row(live: LiveGateway) -> None:
    first = call(live, "alice", "retrieve", {"task": SALES_TASK, "query": "kiwifruit shipment", "budget": {"bytes": 400}})
    answer = body(first)
    assert answer["cursor"] and answer["items"] and "call expand" in text(first)
    returned = ids(first)
    fetched = call(live, "alice", "fetch", {"task": SALES_TASK, "ids": ["mem_kiwi_0", "mem_acl_ok"]})
    assert ids(fetched) == ["mem_acl_ok", "mem_kiwi_0"]
    more = call(live, "alice", "expand", {"task": SALES_TASK, "cursor": answer["cursor"]})
    assert ids(more) and not set(ids(more)) & set(returned)
    used = call(live, "alice", "report_usage", {"trace_id": answer["trace_id"], "used": [returned[0], "mem_acl"]})
    assert body(used) == {"trace_id": answer["trace_id"], "recorded": [returned[0]], "ignored": 1}
    rated = call(live, "alice", "feedback", {"trace_id": answer["trace_id"], "rating": 4, "comment": "useful"})
    assert body(rated) == {"trace_id": answer["trace_id"], "rating": 4}

    rows = [row(live, result) for result in (first, fetched, more, used, rated)]
    assert [r["endpoint"] for r in rows] == ["retrieve", "retrieve", "retrieve", "usage", "feedback"]
    assert [r["lineage"]["request"]["mode"] for r in rows[:3]] == ["scout", "fetch", "expand"]
    assert all(
        (r["actor"], r["tenant"], r["status_code"], r["lineage"]["channel"]) == ("user:alice", "acme", 200, "mcp") for r in rows
    )
    assert rows[0]["trace_id"] == answer["trace_id"] and sorted(rows[0]["lineage"]["packed"]) == returned
    assert rows[3]["lineage"]["used"] == [returned[0]] and rows[3]["lineage"]["about"] == answer["trace_id"]
    assert "useful" not in json.dumps(rows[4])  # the comment is kept as a keyed hash
    # and the HTTP API's own rows carry no mark
    plain = live.gateway.retrieve(key(live, "alice"), {"task": SALES_TASK, "query": "kiwifruit"})
    assert "channel" not in live.gateway.trace(plain.headers["x-trace-id"])["lineage"]
    # a reviewer reading the audit page sees which way each call came
    auditor = live.gateway.key("mcp-auditor", roles=("auditor",))
    client = live.gateway.client
    client.cookies.clear()
    signed = client.post("/audit/sign-in", data={"key": auditor}, headers={"Origin": "http://testserver"}, follow_redirects=False)
    assert signed.status_code == 303, signed.text
    for trace_id, shown in ((answer["trace_id"], "MCP tool call"), (plain.headers["x-trace-id"], "HTTP API")):
        page = client.get(f"/audit/traces/{trace_id}")
        assert page.status_code == 200 and f'<dd id="trace-channel">{shown}</dd>' in page.text
    client.cookies.clear()


def test_only_the_actor_of_a_trace_reports_on_it(live: LiveGateway) -> None:
    first = call(live, "alice", "retrieve", {"task": SALES_TASK, "query": "kiwifruit"})
    theirs = call(live, "bob", "report_usage", {"trace_id": body(first)["trace_id"], "used": ["mem_kiwi_1"]})
    assert theirs.is_error and body(theirs)["error"]["code"] == "not_found"
    assert row(live, theirs)["actor"] == "user:bob" and row(live, theirs)["status_code"] == 404


# ---------------------------------------------------------------- refusals


def test_a_task_the_actor_was_not_granted_is_a_tool_error(live: LiveGateway) -> None:
    result = call(live, "alice", "retrieve", {"task": {"type": "compliance_review"}, "query": "card on file"})
    assert result.is_error
    error = body(result)["error"]
    assert (error["code"], error["reasons"]) == ("policy_denied", ["task_not_granted"])
    assert result.meta is not None and error["trace_id"] == result.meta["gateway/trace_id"]
    assert "policy_denied" in text(result) and "task_not_granted" in text(result)
    audited = row(live, result)
    assert (audited["decision"], audited["status_code"], audited["actor"], audited["lineage"]["channel"]) == (
        "deny",
        403,
        "user:alice",
        "mcp",
    )


def test_retrieve_narrows_by_kind_and_asks_for_a_future_instant_only_when_granted(live: LiveGateway) -> None:
    """The HTTP body's narrowing fields pass through unchanged, and so do the policy's limits on them."""
    kiwi = call(live, "alice", "retrieve", {"task": SALES_TASK, "query": "kiwifruit shipment"})
    assert ids(kiwi) and all(i.startswith("mem_kiwi_") for i in ids(kiwi))
    narrowed = call(live, "alice", "retrieve", {"task": SALES_TASK, "query": "kiwifruit shipment", "kinds": ["document"]})
    assert not narrowed.is_error and ids(narrowed) == []  # the kiwi notes are memories
    assert row(live, narrowed)["lineage"]["request"]["kinds"] == ["document"]
    future = call(live, "alice", "retrieve", {"task": SALES_TASK, "query": "kiwifruit", "as_of": "2099-01-01T00:00:00Z"})
    assert future.is_error and body(future)["error"]["code"] == "policy_denied"
    assert "as_of_in_future" in body(future)["error"]["reasons"]
    malformed = call(live, "alice", "retrieve", {"task": SALES_TASK, "query": "kiwifruit", "as_of": "yesterday"})
    assert malformed.is_error and body(malformed)["error"]["message"].startswith("as_of")


@pytest.mark.parametrize(
    ("arguments", "code", "field"),
    [
        ({"task": SALES_TASK, "tenant": "globex"}, "bad_request", "tenant"),
        ({"task": SALES_TASK, "actor": "user:root"}, "bad_request", "actor"),
        ({"task": SALES_TASK, "fetch": ["mem_acl"]}, "invalid_request", "fetch"),
        ({"task": SALES_TASK, "mode": "filter"}, "invalid_request", "mode"),
        ({"task": SALES_TASK, "budget": {"bytes": 0}}, "invalid_request", "budget.bytes"),
        ({"query": "no task"}, "invalid_request", "task"),
    ],
)
def test_an_argument_outside_the_tool_is_refused_naming_it(
    live: LiveGateway, arguments: dict[str, Any], code: str, field: str
) -> None:
    result = call(live, "alice", "retrieve", arguments)
    assert result.is_error
    error = body(result)["error"]
    assert error["code"] == code and error["message"].startswith(f"{field}:")
    assert row(live, result)["lineage"]["channel"] == "mcp"


def test_an_unknown_tool_is_a_tool_error(live: LiveGateway) -> None:
    result = call(live, "alice", "delete_everything", {})
    assert result.is_error and body(result)["error"]["code"] == "not_found"
    assert row(live, result)["endpoint"] == "mcp"


def test_a_call_without_a_credential_fails(live: LiveGateway) -> None:
    with pytest.raises(ExceptionGroup) as refused:  # the SDK's client cannot even list the tools
        anyio.run(lambda: _calls(live.url, None, [("retrieve", {"task": SALES_TASK, "query": "kiwifruit"})]))
    assert refused.group_contains(MCPError, depth=None)
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    missing = httpx.post(f"{live.url}/mcp", json=initialize, headers=accept)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == 'Bearer realm="governed-gateway"'
    assert missing.json()["error"]["code"] == "unauthenticated"
    wrong = httpx.post(
        f"{live.url}/mcp", json=initialize, headers={**accept, "Authorization": "Bearer gw_0123456789abcdef_" + "x" * 40}
    )
    assert wrong.status_code == 401 and 'error="invalid_token"' in wrong.headers["www-authenticate"]
    audited = live.gateway.trace(missing.headers["x-trace-id"])
    assert (audited["endpoint"], audited["status_code"], audited["lineage"]["channel"]) == ("mcp", 401, "mcp")


def test_a_browser_origin_must_be_allowed(live: LiveGateway) -> None:
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Authorization": f"Bearer {key(live, 'alice')}",
    }
    for origin in ("http://evil.example", "null", f"{ALLOWED_ORIGIN}.evil.example:80", "https://agents.example:8080"):
        refused = httpx.post(f"{live.url}/mcp", json=listing, headers={**headers, "Origin": origin})
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden", origin
    result = call(live, "alice", "fetch", {"task": SALES_TASK, "ids": ["mem_acl_ok"]}, origin=f"{ALLOWED_ORIGIN}:3000")
    assert ids(result) == ["mem_acl_ok"]


def stop_the_refill(served: LiveGateway) -> None:
    """Hold the rate quotas' clock still, so a slow machine cannot refill the bucket between the
    calls these tests count (a CI run once took past a third of a second for four requests)."""
    admission: Admission = served.gateway.client.app.state.context.admission  # type: ignore[attr-defined]
    now = time.monotonic()
    admission.clock = lambda: now


def test_past_the_admission_limit_a_call_is_a_rate_limited_tool_error(tmp_path: Path) -> None:
    # 3 units a second: the session's `initialize` and `notifications/initialized` take two at the
    # door (every /mcp request is admitted), the first fetch the third.
    with serve_gateway(f"sqlite:///{tmp_path / 'gateway.db'}", tmp_path, admission_actor_rate=3) as served:
        stop_the_refill(served)
        served.gateway.key("alice", groups=("sales",))
        fetch = ("fetch", {"task": SALES_TASK, "ids": ["mem_none"]})
        _, (first, second) = anyio.run(lambda: _calls(served.url, key(served, "alice"), [fetch, fetch]))
        assert not first.is_error
        assert second.is_error and body(second)["error"]["code"] == "rate_limited"
        assert re.search(r"retry after \d+ s", text(second))  # 1 s, or more when a call measured past its price
        audited = row(served, second)
        assert (audited["status_code"], audited["error_code"], audited["lineage"]["channel"]) == (429, "rate_limited", "mcp")


def test_every_mcp_request_is_admitted_so_a_tools_list_flood_is_refused_and_audited(tmp_path: Path) -> None:
    with serve_gateway(f"sqlite:///{tmp_path / 'gateway.db'}", tmp_path, admission_actor_rate=5) as served:
        stop_the_refill(served)
        served.gateway.key("alice", groups=("sales",))
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "Authorization": f"Bearer {key(served, 'alice')}",
        }
        listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        with httpx.Client(base_url=served.url, headers=headers, timeout=30) as client:
            answers = [client.post("/mcp", json=listing) for _ in range(12)]
            malformed = client.post("/mcp", content=b"{not json")
        statuses = [answer.status_code for answer in answers]
        assert statuses[0] == 200 and 429 in statuses, statuses
        refused = next(answer for answer in answers if answer.status_code == 429)
        assert refused.json()["error"]["code"] == "rate_limited" and int(refused.headers["retry-after"]) >= 1
        audited = served.gateway.trace(refused.headers["x-trace-id"])
        assert (audited["endpoint"], audited["status_code"], audited["lineage"]["channel"]) == ("mcp", 429, "mcp")
        assert malformed.status_code in (400, 429)  # a malformed frame is admitted too: never a free request
        for answer in (answers[0], malformed):  # every message is a row, answered or refused
            audited = served.gateway.trace(answer.headers["x-trace-id"])
            assert (audited["endpoint"], audited["status_code"], audited["lineage"]["channel"]) == (
                "mcp",
                answer.status_code,
                "mcp",
            )
        assert served.gateway.trace(answers[0].headers["x-trace-id"])["lineage"]["admission"]["cost"] == 1
        served.gateway.key("gina", tenant="globex", groups=("sales",))
        other = httpx.post(
            f"{served.url}/mcp", json=listing, headers={**headers, "Authorization": f"Bearer {key(served, 'gina')}"}
        )
        assert other.status_code == 200  # another tenant's actor is not held back


def test_a_get_or_delete_opens_no_stream_and_is_an_audited_405(live: LiveGateway) -> None:
    """Stateless: the server has nothing to send on a stream of its own, so none is ever held open."""
    headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {key(live, 'alice')}"}
    for method in ("GET", "DELETE"):
        answer = httpx.request(method, f"{live.url}/mcp", headers=headers, timeout=10)
        assert answer.status_code == 405 and answer.headers["allow"] == "POST", method
        assert answer.json()["error"]["code"] == "method_not_allowed"
        audited = live.gateway.trace(answer.headers["x-trace-id"])
        assert (audited["endpoint"], audited["status_code"], audited["lineage"]["channel"]) == ("mcp", 405, "mcp")
    assert (
        httpx.get(f"{live.url}/mcp", headers={"Accept": "text/event-stream"}, timeout=10).status_code == 401
    )  # credential first


def test_a_body_past_the_limit_is_refused_before_the_transport_reads_it(live: LiveGateway) -> None:
    """/mcp reads a message itself to see its method: at most GATEWAY_MAX_BODY_BYTES, as the HTTP API."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Authorization": f"Bearer {key(live, 'alice')}",
    }
    limit = live.gateway.settings.max_body_bytes
    padding = "x" * (limit + 1)
    answer = httpx.post(
        f"{live.url}/mcp",
        headers=headers,
        timeout=30,
        content=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"pad": padding}}),
    )
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "payload_too_large"
    audited = live.gateway.trace(answer.headers["x-trace-id"])
    assert (audited["endpoint"], audited["status_code"]) == ("mcp", 413)


def test_json_nested_too_deeply_is_an_audited_400_not_a_500(live: LiveGateway) -> None:
    """A message of 100,000 nested arrays overflows the parser's recursion: a malformed request (400,
    naming the body), with its trace id and audit row, never a bare 500 (issue 55)."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Authorization": f"Bearer {key(live, 'alice')}",
    }
    for body in ("[" * 100_000 + "]" * 100_000, '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ' + "[" * 100_000):
        answer = httpx.post(f"{live.url}/mcp", headers=headers, timeout=30, content=body)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == "bad_request" and "body" in answer.json()["error"]["message"]
        audited = live.gateway.trace(answer.headers["x-trace-id"])
        assert (audited["endpoint"], audited["status_code"], audited["error_code"]) == ("mcp", 400, "bad_request")


def test_a_failing_policy_engine_is_a_policy_unavailable_tool_error(tmp_path: Path, policy_copy: Path) -> None:
    """Fail closed over MCP as over HTTP: the 503's code and message, audited, and nothing retrieved."""
    rego = policy_copy / "gateway/request/request.rego"
    # regorus fails the whole evaluation when a built-in gets a bad argument: here, any task with a scope.
    rego.write_text(rego.read_text() + '\nrefusals contains "never" if time.parse_rfc3339_ns(input.task.scope) < 0\n')
    with serve_gateway(f"sqlite:///{tmp_path / 'gateway.db'}", tmp_path, policies_dir=policy_copy) as served:
        seed(served.gateway)
        result = anyio.run(
            lambda: _calls(served.url, key(served, "alice"), [("retrieve", {"task": SALES_TASK, "query": "wombatacl"})])
        )[1][0]
        assert result.is_error and body(result)["error"]["code"] == "policy_unavailable", text(result)
        assert "wombat" not in text(result) and "items" not in body(result)
        audited = row(served, result)
        assert (audited["status_code"], audited["error_code"], audited["lineage"]["channel"]) == (
            503,
            "policy_unavailable",
            "mcp",
        )
        assert "packed" not in audited["lineage"]


def test_with_mcp_off_there_is_no_mcp_route(sqlite_url: str, tmp_path: Path) -> None:
    with open_gateway(sqlite_url, tmp_path, mcp=False) as gateway:
        response = gateway.client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


def test_the_settings_turn_mcp_off_and_name_the_origins() -> None:
    assert load_settings(environ={}).mcp is True and load_settings(environ={}).mcp_origins == frozenset()
    settings = load_settings(environ={"GATEWAY_MCP": "false", "GATEWAY_MCP_ALLOWED_ORIGINS": "https://a.example, http://[::1]:*"})
    assert settings.mcp is False and settings.mcp_origins == {"https://a.example", "http://[::1]:*"}
    for bad in ("*", "a.example", "https://a.example/path", "javascript:alert(1)"):
        with pytest.raises(ConfigurationError, match="GATEWAY_MCP_ALLOWED_ORIGINS"):
            load_settings(environ={"GATEWAY_MCP_ALLOWED_ORIGINS": bad})
    allowed = settings.mcp_origins
    assert origin_allowed(None, allowed) and origin_allowed("https://a.example", allowed)
    assert origin_allowed("http://[::1]:3000", allowed) and not origin_allowed("http://[::1]", allowed)
    assert not any(
        origin_allowed(o, allowed) for o in ("null", "https://a.example:443", "http://a.example", "https://a.example.evil")
    )
