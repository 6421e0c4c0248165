"""The decision log in OPA's format: one line per policy evaluation, with OPA's field names, the
bundle revision, and nothing that could hold text or personal data; and the same entries uploaded
to an OPA decision-log service (a real collector on loopback) without ever holding up a request."""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from gateway.policy import decision_log
from gateway.policy.decision_log import HttpSink, erase
from tests.conftest import Gateway, free_port, open_gateway
from tests.gateway.fixtures import SALES_TASK, memory
from tests.loopback import QuietHandler

PLANTED = "jane.secret@northwind.com"
OPA_FIELDS = {"decision_id", "path", "input", "result", "bundles", "timestamp", "metrics"}


def plant_and_decide(gateway: Gateway) -> str:
    """Ingest planted values, retrieve with them (one allowed call, one denied); the policy revision."""
    gateway.ingest(
        "acme",
        [
            memory("mem_1", f"quokka note, write to {PLANTED}", slot=f"contact:{PLANTED}"),
            {"id": "ent_j", "kind": "entity", "entity_type": "contact", "email": PLANTED, "acl": ["*"]},
        ],
    )
    key = gateway.key("alice", groups=("sales",), clearance="confidential")
    ok = gateway.retrieve(key, {"task": SALES_TASK, "query": f"quokka {PLANTED}", "entities": [{"email": PLANTED}]})
    assert ok.status_code == 200 and ok.json()["items"]
    denied = gateway.retrieve(key, {"task": {"type": "no_such_task"}, "query": PLANTED})
    assert denied.status_code == 403
    revision: str = gateway.client.get("/v1/policy", headers=gateway.auth(key)).json()["revision"]
    return revision


def test_each_decision_is_a_line_in_opas_format_without_planted_values(sqlite_url: str, tmp_path: Path) -> None:
    log = tmp_path / "decisions" / "log.jsonl"
    with open_gateway(sqlite_url, tmp_path, decision_log=log) as gateway:
        revision = plant_and_decide(gateway)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    request_decisions = [e for e in lines if e["path"] == "gateway/request"]
    item_decisions = [e for e in lines if e["path"] == "gateway/items"]
    assert len(request_decisions) >= 2 and item_decisions
    for entry in lines:
        assert OPA_FIELDS <= set(entry)
        assert entry["bundles"] == {"gateway": {"revision": revision}}
        assert entry["metrics"]["timer_rego_query_eval_ns"] > 0
    assert any(e["result"]["allow"] is False for e in request_decisions)
    assert any(e["input"]["items"] for e in item_decisions)
    assert all("slot" not in item for e in item_decisions for item in e["input"]["items"])  # free text, like the text
    assert PLANTED not in log.read_text() and "quokka" not in log.read_text()


def test_erase_removes_text_bearing_keys_and_lists_their_paths() -> None:
    kept, erased = erase({"items": [{"id": "m1", "text": "secret"}], "request": {"query": "q", "kinds": ["memory"]}})
    assert kept == {"items": [{"id": "m1"}], "request": {"kinds": ["memory"]}}
    assert erased == ["input/items/*/text", "input/request/query"]


@dataclass(frozen=True)
class Upload:
    path: str
    headers: dict[str, str]
    status: int
    body: str  # gunzipped

    @property
    def events(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = json.loads(self.body)
        return events


class Collector:
    """An OPA decision-log service on loopback that records every upload and answers `status`;
    while `gate` is clear it holds each upload unanswered."""

    def __init__(self, port: int = 0) -> None:
        self.uploads: list[Upload] = []
        self.arrived = 0
        self.status = 200
        self.gate = threading.Event()
        self.gate.set()
        collector = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                status = collector.status
                collector.arrived += 1
                collector.gate.wait(10)
                headers = {name.lower(): value for name, value in self.headers.items()}
                collector.uploads.append(Upload(self.path, headers, status, gzip.decompress(raw).decode()))
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the sink gave up waiting

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/logs"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    @property
    def events(self) -> list[dict[str, Any]]:
        """The events of the uploads it accepted, in order."""
        return [event for upload in self.uploads if upload.status < 300 for event in upload.events]

    def __enter__(self) -> Collector:
        self.thread.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_decisions_are_uploaded_as_gzipped_json_arrays_in_opas_format(sqlite_url: str, tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    with Collector() as collector:
        with open_gateway(sqlite_url, tmp_path, decision_log=log, decision_log_url=collector.url) as gateway:
            revision = plant_and_decide(gateway)
            # uploaded while the gateway runs, not only at shutdown
            wait_for(lambda: {e["path"] for e in collector.events} == {"gateway/request", "gateway/items"})
    assert collector.uploads and all(upload.status == 200 for upload in collector.uploads)
    for upload in collector.uploads:
        assert upload.path == "/logs"
        assert upload.headers["content-type"] == "application/json"
        assert upload.headers["content-encoding"] == "gzip"
        assert isinstance(json.loads(upload.body), list)
        assert PLANTED not in upload.body and "quokka" not in upload.body
    for event in collector.events:
        assert OPA_FIELDS <= set(event)
        assert event["bundles"] == {"gateway": {"revision": revision}}
    assert any(e["result"]["allow"] is False for e in collector.events if e["path"] == "gateway/request")
    # both sinks configured: the file and the service received the same decisions, each once
    in_file = [json.loads(line)["decision_id"] for line in log.read_text().splitlines()]
    assert [e["decision_id"] for e in collector.events] == in_file


def test_a_collector_that_is_down_neither_fails_nor_slows_retrieval_and_gets_the_events_later(
    sqlite_url: str, tmp_path: Path
) -> None:
    with Collector() as collector:
        collector.status = 500
        collector.gate.clear()
        with open_gateway(sqlite_url, tmp_path, decision_log_url=collector.url) as gateway:
            gateway.ingest("acme", [memory("mem_1", "wombat pricing note")])
            key = gateway.key("alice", groups=("sales",), clearance="confidential")
            body = {"task": SALES_TASK, "query": "wombat pricing"}
            assert gateway.retrieve(key, body).status_code == 200
            wait_for(lambda: collector.arrived >= 1)  # an upload is now hanging at the collector
            started = time.monotonic()
            for _ in range(3):
                assert gateway.retrieve(key, body).status_code == 200
            assert time.monotonic() - started < 2.0  # well under the upload's 3 s timeout
            collector.gate.set()  # the hanging upload is answered 500
            sink = gateway.client.app.state.context.policy.sink  # type: ignore[attr-defined]
            wait_for(lambda: sink.failed_posts >= 1)
            assert sink.sent == 0 and sink.pending >= 4
            collector.status = 200  # back: the next retry, or the flush on close, delivers
    assert sink.stats() == {"sent": len(collector.events), "dropped": 0, "failed_posts": sink.failed_posts, "pending": 0}
    request_decisions = [e for e in collector.events if e["path"] == "gateway/request"]
    assert len(request_decisions) == 4
    assert len({e["decision_id"] for e in collector.events}) == len(collector.events)


def test_a_full_buffer_drops_the_oldest_entries_and_counts_them() -> None:
    with Collector() as collector:
        sink = HttpSink(collector.url, buffer=3, interval=60)
        for n in range(5):
            sink.write({"decision_id": str(n)})
        assert sink.stats() == {"sent": 0, "dropped": 2, "failed_posts": 0, "pending": 3}
        sink.close()
    assert [e["decision_id"] for e in collector.events] == ["2", "3", "4"]
    assert sink.stats() == {"sent": 3, "dropped": 2, "failed_posts": 0, "pending": 0}


def test_uploads_are_retried_until_a_refusing_collector_comes_back() -> None:
    port = free_port()
    sink = HttpSink(f"http://127.0.0.1:{port}/logs", interval=0.05, max_backoff=0.2)
    try:
        for n in range(3):
            sink.write({"decision_id": str(n)})
        wait_for(lambda: sink.failed_posts >= 2)  # connection refused, retried
        assert sink.sent == 0 and sink.pending == 3
        with Collector(port) as collector:
            wait_for(lambda: sink.sent == 3)
        assert [e["decision_id"] for e in collector.events] == ["0", "1", "2"]
    finally:
        sink.close()


def test_close_gives_up_on_a_collector_that_never_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decision_log, "CLOSE_DEADLINE_SECONDS", 0.3)
    with Collector() as collector:
        collector.gate.clear()
        sink = HttpSink(collector.url, interval=60)
        sink.write({"decision_id": "0"})
        started = time.monotonic()
        sink.close()
        assert time.monotonic() - started < 2.0
        assert sink.stats() == {"sent": 0, "dropped": 0, "failed_posts": 1, "pending": 1}
