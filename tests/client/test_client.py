"""The typed client against a live gateway (a real socket), and its retry rule against a scripted
loopback server that records every attempt: what is retried, how long it waits, when it gives up."""

from __future__ import annotations

import email.utils
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from io import StringIO
from pathlib import Path

import anyio
import httpx
import pytest

from gateway.client import (
    AsyncGatewayClient,
    BadRequest,
    Forbidden,
    GatewayClient,
    GatewayUnreachable,
    IngestReport,
    Item,
    NotFound,
    RateLimited,
    RetrieveResult,
    ServerError,
    Unauthenticated,
    Unavailable,
    UnexpectedAnswer,
)
from gateway.client.calls import retry_after
from tests.conftest import LiveGateway, free_port, serve_gateway
from tests.gateway.fixtures import FORBIDDEN, SALES_TASK, VISIBLE, memory, seed
from tests.loopback import Loopback, QuietHandler

AGENTS = (Path(__file__).resolve().parents[2] / "docs" / "agents.md").read_text()  # the manual's page
PAGES = [f"mem_page_{i:02d}" for i in range(12)]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveGateway]:
    """One live gateway for the module: the planted set, twelve pages' worth of walrus notes."""
    directory = tmp_path_factory.mktemp("client")
    with serve_gateway(f"sqlite:///{directory / 'gateway.db'}", directory) as served:
        seed(served.gateway)
        served.gateway.ingest("acme", [memory(item_id, f"walrus pricing note {item_id} " + "w" * 150) for item_id in PAGES])
        yield served


def alice(live: LiveGateway) -> GatewayClient:
    return GatewayClient(live.url, live.gateway.key("alice", groups=("sales",), clearance="confidential"))


NO_VECTORS = {"semantic": False}  # lexical and exact only: answers that do not wait on the embedding worker


# ---------------------------------------------------------------- reads


def test_retrieve_returns_typed_items_and_never_a_forbidden_one(live: LiveGateway) -> None:
    with alice(live) as client:
        found = client.retrieve(SALES_TASK, "wombatacl", sources=NO_VECTORS)
        assert isinstance(found, RetrieveResult) and found.trace_id.startswith("tr_") and found.decision.allow
        assert [item.id for item in found.items] == ["mem_acl_ok"]
        item = found.items[0]
        assert isinstance(item, Item) and item.citation == "M1" and item.kind == "memory" and item.status == "current"
        assert found.sources["lexical"].status == "ok" and found.budget is not None and found.budget.used_bytes > 0
        assert live.gateway.trace(found.trace_id)["status_code"] == 200  # the trace id names the call's audit row

        named = [i["id"] for i in FORBIDDEN.values()] + [i["id"] for n, i in VISIBLE.items() if n != "attachment"]
        fetched = client.fetch(SALES_TASK, named)
        assert fetched.mode == "fetch"
        assert {item.id for item in fetched.items} == {i["id"] for n, i in VISIBLE.items() if n != "attachment"}
        for word in ("quokkaacl", "quokkasens", "quokkaexpired", "quokkascope", "quokkastatus"):
            miss = client.retrieve(SALES_TASK, word, sources=NO_VECTORS)
            assert miss.items == [] and miss.empty_reason == "no_relevant_permitted_items"


def test_a_denial_raises_forbidden_with_its_code_reasons_and_trace(live: LiveGateway) -> None:
    with alice(live) as client:
        with pytest.raises(Forbidden) as denied:
            client.retrieve({"type": "payroll_review"}, "salary")
    error = denied.value
    assert (error.status, error.code) == (403, "policy_denied") and error.reasons
    assert error.trace_id and error.trace_id in str(error)
    assert live.gateway.trace(error.trace_id)["status_code"] == 403


def test_bad_input_is_a_bad_request_naming_the_field(live: LiveGateway) -> None:
    with alice(live) as client:
        with pytest.raises(BadRequest) as refused:
            client.retrieve(SALES_TASK, "walrus", budget_bytes=0)
        assert refused.value.status == 422 and "budget" in refused.value.message and refused.value.trace_id
        with pytest.raises(NotFound):
            client.expand(SALES_TASK, "cur_not_a_cursor")
    with pytest.raises(ValueError, match="token"):
        GatewayClient(live.url, "gw_has a space")
    with pytest.raises(ValueError, match="base_url"):
        GatewayClient("ftp://example", "gw_x")


def test_a_bad_key_is_unauthenticated_and_the_token_is_never_repeated(live: LiveGateway) -> None:
    secret = "gw_0123456789abcdef_notarealsecretatall"
    with GatewayClient(live.url, secret) as client:
        assert secret not in repr(client)
        with pytest.raises(Unauthenticated) as refused:
            client.retrieve(SALES_TASK, "walrus")
    assert refused.value.status == 401 and secret not in str(refused.value) and secret not in repr(refused.value)


def test_pages_follow_the_cursor_and_return_every_item_once(live: LiveGateway) -> None:
    with alice(live) as client:
        pages = list(client.pages(SALES_TASK, "walrus pricing", budget_bytes=700, sources=NO_VECTORS))
    assert len(pages) > 2 and pages[0].mode != "expand" and {p.mode for p in pages[1:]} == {"expand"}
    assert pages[-1].cursor is None and all(p.cursor for p in pages[:-1])
    seen = [item.id for page in pages for item in page.items]
    assert sorted(seen) == PAGES and len(seen) == len(set(seen))


def test_the_async_client_retrieves_and_pages_the_same(live: LiveGateway) -> None:
    key = live.gateway.key("alice", groups=("sales",), clearance="confidential")

    async def run() -> tuple[RetrieveResult, list[str]]:
        async with AsyncGatewayClient(live.url, key) as client:
            found = await client.retrieve(SALES_TASK, "wombatacl", sources=NO_VECTORS)
            seen = [
                item.id
                async for page in client.pages(SALES_TASK, "walrus pricing", budget_bytes=700, sources=NO_VECTORS)
                for item in page.items
            ]
            with pytest.raises(Forbidden) as denied:
                await client.retrieve({"type": "payroll_review"}, "salary")
            assert denied.value.code == "policy_denied" and denied.value.trace_id
            return found, seen

    found, seen = anyio.run(run)
    assert [item.id for item in found.items] == ["mem_acl_ok"]
    assert sorted(seen) == PAGES and len(seen) == len(set(seen))


# ---------------------------------------------------------------- writes


def test_writes_items_documents_entities_and_edges(live: LiveGateway) -> None:
    gateway = live.gateway
    writer = GatewayClient(live.url, gateway.key("writer-umbrella", tenant="umbrella", roles=("ingest",)))
    reader = GatewayClient(live.url, gateway.key("uma", tenant="umbrella", groups=("sales",), clearance="confidential"))
    with writer, reader:
        items = [
            {
                "id": "ent_ada",
                "kind": "entity",
                "entity_type": "contact",
                "name": "Ada",
                "email": "ada@umbrella.example",
                "acl": ["*"],
            },
            memory("mem_ada", "capybara renewal call", entity="ent_ada", attached_to="ent_ada"),
        ]
        first = writer.ingest(items)
        assert isinstance(first, IngestReport) and (first.created, first.rejected) == (2, [])
        assert writer.ingest(items).unchanged == 2  # idempotent by id, which is why the client may resend it
        rejected = writer.ingest([{"id": "mem_bad", "kind": "memory", "text": "no acl"}])
        assert rejected.created == 0 and rejected.rejected[0].index == 0 and any("acl" in e for e in rejected.rejected[0].errors)

        document = (
            "---\nacl: ['*']\nscope: [sales]\nauthority: approved\n---\n# Capybara terms\nCapybara discounts need approval.\n"
        )
        report = writer.put_document("capy_terms", document)
        assert (report.document, report.changed, report.pieces) == ("capy_terms", True, 1)
        assert writer.put_document("capy_terms", document).changed is False

        assert writer.put_entity("ent_old_ada", {"entity_type": "contact", "name": "Ada", "acl": ["*"]}).created == 1
        assert writer.put_edges([{"from": "ent_ada", "relation": "works_at", "to": "ent_old_ada", "acl": ["*"]}]).created == 1
        merged = writer.merge_entity("ent_old_ada", "ent_ada")
        assert (merged.survivor, merged.changed) == ("ent_ada", True)
        with pytest.raises(BadRequest, match="into"):
            writer.merge_entity("ent_ada", "ent_ada")

        about_ada = reader.retrieve(SALES_TASK, "capybara", entities=[{"id": "ent_ada"}], sources=NO_VECTORS)
        assert {"mem_ada", "capy_terms:0000"} <= {item.id for item in about_ada.items}
        deleted = writer.delete_entity("ent_ada")
        assert (deleted.status, deleted.changed) == ("pending_deletion", True) and deleted.hidden_items >= 1
        after = reader.retrieve(SALES_TASK, "capybara", entities=[{"id": "ent_ada"}], sources=NO_VECTORS)
        assert "mem_ada" not in {item.id for item in after.items}
        assert [(e.id, e.status) for e in after.entities] == [("ent_ada", "pending_deletion")]
        with pytest.raises(Forbidden) as no_role:
            reader.ingest(items)
        assert no_role.value.code == "forbidden"


# ---------------------------------------------------------------- usage, feedback, audit review


def test_usage_feedback_and_the_audit_review(live: LiveGateway) -> None:
    gateway = live.gateway
    with alice(live) as client:
        call = client.retrieve(SALES_TASK, "wombatacl", sources=NO_VECTORS)
        usage = client.report_usage(call.trace_id, ["mem_acl_ok", "mem_never_returned"])
        assert (usage.recorded, usage.ignored) == (["mem_acl_ok"], 1)
        assert client.feedback(call.trace_id, 4, "useful").rating == 4
        with pytest.raises(BadRequest, match="rating"):
            client.feedback(call.trace_id, 9)
        with pytest.raises(Forbidden):
            client.verify()  # the auditor role only

    with GatewayClient(live.url, gateway.key("audrey", roles=("auditor",))) as auditor:
        whole = auditor.trace(call.trace_id)
        assert whole.trace_id == call.trace_id and whole.endpoint == "retrieve" and whole.used == ["mem_acl_ok"]
        assert [getattr(f, "rating") for f in whole.feedback] == [4]  # an extra field of the answer
        one_page = auditor.traces(actor="user:alice", limit=200)
        assert one_page.cursor is None and call.trace_id in [t.trace_id for t in one_page.traces]
        paged = list(auditor.iter_traces(actor="user:alice", limit=2))
        assert [t.trace_id for t in paged] == [t.trace_id for t in one_page.traces] and len(paged) > 2
        assert auditor.verify().ok
        rows = auditor.export_rows(actor="user:alice")
        assert call.trace_id in {row["trace_id"] for row in rows}
        assert auditor.export("csv", actor="user:alice").splitlines()[0].startswith("trace_id")
        with pytest.raises(BadRequest, match="since"):
            auditor.traces(since="yesterday")

    with GatewayClient(live.url, gateway.key("gus", tenant="globex", roles=("auditor",))) as other_tenant:
        with pytest.raises(NotFound):
            other_tenant.trace(call.trace_id)


# ---------------------------------------------------------------- the manual's example (docs/agents.md)


def test_the_manuals_example_runs_against_a_live_gateway(live: LiveGateway, monkeypatch: pytest.MonkeyPatch) -> None:
    section = AGENTS.split("\n## Python client\n", 1)[1].split("\n## ", 1)[0]
    example = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert example, "the Python client section of docs/agents.md has no example"
    code = example.group(1)
    assert "http://127.0.0.1:8080" in code
    monkeypatch.setenv("GATEWAY_KEY", live.gateway.key("alice", groups=("sales",), clearance="confidential"))
    printed = StringIO()
    with redirect_stdout(printed):
        exec(compile(code.replace("http://127.0.0.1:8080", live.url), "docs/agents.md", "exec"), {})
    assert re.search(r"^[MDPE]\d+ ", printed.getvalue(), re.MULTILINE), printed.getvalue()


# ---------------------------------------------------------------- retries, on a live gateway's admission


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveGateway]:
    """A live gateway that starts one unit per second per actor: a second call at once is a 429."""
    directory = tmp_path_factory.mktemp("limited")
    with serve_gateway(f"sqlite:///{directory / 'gateway.db'}", directory, admission_actor_rate=1) as served:
        seed(served.gateway)
        yield served


def recording(statuses: list[int]) -> httpx.Client:
    return httpx.Client(timeout=30, event_hooks={"response": [lambda response: statuses.append(response.status_code)]})


def test_a_429_is_waited_out_and_sent_again(limited: LiveGateway) -> None:
    statuses: list[int] = []
    key = limited.gateway.key("retrier", groups=("sales",), clearance="confidential")
    with recording(statuses) as http:
        client = GatewayClient(limited.url, key, http=http)
        client.retrieve(SALES_TASK, "wombatacl", sources=NO_VECTORS)
        started = time.monotonic()
        again = client.retrieve(SALES_TASK, "wombatacl", sources=NO_VECTORS)
    assert [item.id for item in again.items] == ["mem_acl_ok"]
    assert statuses == [200, 429, 200]
    assert time.monotonic() - started >= 1.0  # Retry-After: 1, waited whole


def test_after_max_attempts_the_429_is_raised_with_its_trace(limited: LiveGateway) -> None:
    statuses: list[int] = []
    key = limited.gateway.key("impatient", groups=("sales",), clearance="confidential")
    with recording(statuses) as http:
        client = GatewayClient(limited.url, key, http=http, max_attempts=1)
        client.retrieve(SALES_TASK, "wombatacl", sources=NO_VECTORS)
        with pytest.raises(RateLimited) as refused:
            client.retrieve(SALES_TASK, "wombatacl", sources=NO_VECTORS)
    assert statuses == [200, 429]
    error = refused.value
    assert error.code == "rate_limited" and error.retry_after is not None and error.retry_after >= 1
    assert limited.gateway.trace(error.trace_id or "")["error_code"] == "rate_limited"


def test_the_async_client_waits_out_a_429_too(limited: LiveGateway) -> None:
    statuses: list[int] = []
    key = limited.gateway.key("async-retrier", groups=("sales",), clearance="confidential")

    async def run() -> RetrieveResult:
        hooks = {"response": [record]}
        async with httpx.AsyncClient(timeout=30, event_hooks=hooks) as http:
            client = AsyncGatewayClient(limited.url, key, http=http)
            await client.retrieve(SALES_TASK, "wombatacl", sources=NO_VECTORS)
            return await client.retrieve(SALES_TASK, "wombatacl", sources=NO_VECTORS)

    async def record(response: httpx.Response) -> None:
        statuses.append(response.status_code)

    assert [item.id for item in anyio.run(run).items] == ["mem_acl_ok"]
    assert statuses == [200, 429, 200]


# ---------------------------------------------------------------- retries, on a scripted server


@dataclass
class Scripted:
    """A loopback HTTP server that answers from a script (status, headers, body) and records each
    attempt: when it came, its method, path and Authorization header."""

    url: str
    script: list[tuple[int, dict[str, str], bytes]]
    attempts: list[tuple[float, str, str, str]] = field(default_factory=list)


EMPTY_ANSWER = json.dumps(
    {
        "trace_id": "tr_scripted",
        "mode": "scout",
        "decision": {"allow": True},
        "items": [],
        "unknown_new_field": {"the": "contract grows"},
    }
).encode()


def error_body(status: int, code: str) -> bytes:
    return json.dumps({"error": {"code": code, "message": f"scripted {status}", "trace_id": f"tr_{status}"}}).encode()


@contextmanager
def scripted(*script: tuple[int, dict[str, str], bytes]) -> Iterator[Scripted]:
    server_state = Scripted("", list(script))

    class Handler(QuietHandler):
        def answer(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            server_state.attempts.append((time.monotonic(), self.command, self.path, self.headers.get("authorization", "")))
            status, headers, body = server_state.script.pop(0) if len(server_state.script) > 1 else server_state.script[0]
            self.send_response(status)
            for name, value in {"content-type": "application/json", "content-length": str(len(body)), **headers}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = answer

    with Loopback(Handler) as server:
        server_state.url = server.url
        yield server_state


def test_retry_after_is_honoured_then_the_answer_read(monkeypatch: pytest.MonkeyPatch) -> None:
    with scripted((429, {"retry-after": "1"}, error_body(429, "rate_limited")), (200, {}, EMPTY_ANSWER)) as server:
        found = GatewayClient(server.url, "gw_key").retrieve(SALES_TASK, "walrus")
    assert found.trace_id == "tr_scripted" and found.model_extra == {"unknown_new_field": {"the": "contract grows"}}
    (first, *_), (second, method, path, authorization) = server.attempts
    assert second - first >= 1.0 and (method, path, authorization) == ("POST", "/v1/retrieve", "Bearer gw_key")


def test_gives_up_after_max_attempts_with_the_last_error() -> None:
    with scripted((503, {}, error_body(503, "policy_unavailable"))) as server:
        with pytest.raises(Unavailable) as failed:
            GatewayClient(server.url, "gw_key", max_attempts=3, max_wait=0.05).retrieve(SALES_TASK, "walrus")
    assert len(server.attempts) == 3
    assert (failed.value.code, failed.value.trace_id, failed.value.retry_after) == ("policy_unavailable", "tr_503", None)


def test_a_wait_is_capped_by_max_wait() -> None:
    with scripted((429, {"retry-after": "120"}, error_body(429, "rate_limited")), (200, {}, EMPTY_ANSWER)) as server:
        started = time.monotonic()
        GatewayClient(server.url, "gw_key", max_wait=0.2).retrieve(SALES_TASK, "walrus")
    assert len(server.attempts) == 2 and 0.2 <= time.monotonic() - started < 5


def test_only_safe_calls_resend_a_503_and_other_errors_are_never_resent() -> None:
    with scripted((503, {}, error_body(503, "audit_unavailable"))) as server:
        client = GatewayClient(server.url, "gw_key", max_wait=0)
        with pytest.raises(Unavailable):
            client.expand(SALES_TASK, "cur_x")  # the gateway may have advanced the cursor: not resent
        assert len(server.attempts) == 1
        with pytest.raises(Unavailable):
            client.report_usage("tr_x", ["m"])  # each report is an audit row: not resent
        assert len(server.attempts) == 2
        with pytest.raises(Unavailable):
            client.ingest([{"id": "m", "kind": "memory", "text": "t", "acl": ["*"]}])  # idempotent by id: resent
        assert len(server.attempts) == 5 and [a[2] for a in server.attempts[2:]] == ["/v1/items"] * 3
    with scripted((500, {"x-trace-id": "tr_500"}, b"<html>oops</html>")) as server:
        with pytest.raises(ServerError) as failed:
            GatewayClient(server.url, "gw_key").retrieve(SALES_TASK, "walrus")
    assert len(server.attempts) == 1 and (failed.value.code, failed.value.trace_id) == ("http_500", "tr_500")


def test_async_gives_up_after_max_attempts() -> None:
    with scripted((429, {"retry-after": "0"}, error_body(429, "rate_limited"))) as server:

        async def run() -> None:
            async with AsyncGatewayClient(server.url, "gw_key", max_attempts=2) as client:
                await client.retrieve(SALES_TASK, "walrus")

        with pytest.raises(RateLimited) as failed:
            anyio.run(run)
    assert len(server.attempts) == 2 and failed.value.retry_after == 0


def test_no_answer_is_gateway_unreachable() -> None:
    with pytest.raises(GatewayUnreachable):
        GatewayClient(f"http://127.0.0.1:{free_port()}", "gw_key", timeout=2).retrieve(SALES_TASK, "walrus")


def test_an_answer_outside_the_contract_is_unexpected_and_names_the_field() -> None:
    with scripted(
        (200, {"x-trace-id": "tr_odd"}, b'{"trace_id": "tr_odd", "mode": "scout", "decision": {"allow": "maybe"}}')
    ) as server:
        with pytest.raises(UnexpectedAnswer, match=r"RetrieveResult\.decision\.allow") as odd:
            GatewayClient(server.url, "gw_key").retrieve(SALES_TASK, "walrus")
    assert odd.value.trace_id == "tr_odd"


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after("3") == 3.0 and retry_after(None) is None and retry_after("soon") is None
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date past is no wait
    later = retry_after(email.utils.format_datetime(datetime.now(timezone.utc) + timedelta(seconds=30), usegmt=True))
    assert later is not None and 25 <= later <= 31
