"""What the operator sees (issue 45): `gateway serve` on `gateway demo` data, as a subprocess, with
the default log settings. A quiet start (no Presidio or spaCy line, at most ten lines before the
first call), then one access line per call, for every outcome, naming the trace id the answer
carried, and never the query's text."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gateway.logs import FIELDS, SHOWN, JsonFormatter, TextFormatter
from tests.engines import free_ports

GATEWAY = Path(sys.executable).with_name("gateway")
SECRET = "quixoticzebra"  # a word of the query: it must not reach the log


def demo_token(data: Path) -> str:
    out = subprocess.run(
        [str(GATEWAY), "demo"], env={**os.environ, "GATEWAY_DATA_DIR": str(data)}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("alice@acme"))
    return lines[at + 1].split()[0]


def test_a_quiet_start_and_one_access_line_per_call(tmp_path: Path) -> None:
    token = demo_token(tmp_path)
    (port,) = free_ports(1)
    env = {**os.environ, "GATEWAY_DATA_DIR": str(tmp_path), "GATEWAY_PORT": str(port), "GATEWAY_ADMISSION_ACTOR_RATE": "6"}
    env.pop("GATEWAY_LOG_LEVEL", None)
    env.pop("GATEWAY_LOG_FORMAT", None)
    log = tmp_path / "serve.log"
    with open(log, "wb") as sink:
        server = subprocess.Popen([str(GATEWAY), "serve"], env=env, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, log.read_text()
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        time.sleep(1.5)  # the background workers' start lines
        started = log.read_text().splitlines()
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        calls = {
            "allow": {"task": {"type": "account_followup", "scope": "sales"}, "mode": "brief", "query": f"pricing {SECRET}"},
            "deny": {"task": {"type": "hr_review"}, "query": f"salary {SECRET}"},
        }
        traces: dict[str, tuple[int, str]] = {}
        with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
            for name, body in calls.items():
                time.sleep(1.1)  # within the actor's quota of six units a second
                answer = client.post("/v1/retrieve", json=body)
                traces[name] = (answer.status_code, answer.headers["x-trace-id"])
            time.sleep(1.1)
            answer = client.post("/v1/retrieve", content=b'{"query": "' + SECRET.encode() + b'", ')  # not JSON
            traces["bad"] = (answer.status_code, answer.headers["x-trace-id"])
            for _ in range(20):  # six units a second for this actor: a burst is refused
                answer = client.post("/v1/retrieve", json=calls["allow"])
                if answer.status_code == 429:
                    traces["refused"] = (429, answer.headers["x-trace-id"])
                    break
        time.sleep(0.5)
        scraped = httpx.get(url + "/metrics", timeout=10)
    finally:
        server.terminate()
        server.wait(60)
    text = log.read_text()
    # no line of a library's logger (Presidio's recognizer list, spaCy, onnxruntime, uvicorn's own)
    assert not re.search(r" (presidio[-\w]*|spacy|onnxruntime|uvicorn[.\w]*): ", text, re.IGNORECASE), text
    assert len(started) <= 10, "\n".join(started)
    assert any("listening on http://127.0.0.1" in line for line in started) and any("policy:" in line for line in started)
    assert traces["allow"][0] == 200 and traces["deny"][0] == 403 and traces["bad"][0] == 400, traces
    assert "refused" in traces, text
    access = [line for line in text.splitlines() if " gateway.access: " in line]
    for name, (status, trace_id) in traces.items():
        (line,) = [a for a in access if f"trace_id={trace_id}" in a]
        assert f"POST /v1/retrieve {status} " in line and "tenant=acme actor=user:alice" in line, (name, line)
    assert "outcome=allow" in next(a for a in access if traces["allow"][1] in a)
    assert "outcome=policy_denied" in next(a for a in access if traces["deny"][1] in a)
    assert SECRET not in text and token not in text
    # /metrics of the same run, read by Prometheus's own parser: the calls by status, with no query word
    assert scraped.status_code == 200 and SECRET not in scraped.text
    families = {f.name: f for f in text_string_to_metric_families(scraped.text)}
    statuses = {s.labels.get("http_response_status_code") for s in families["gateway_requests"].samples}
    assert {"200", "403", "400", "429"} <= statuses, statuses
    assert "gateway_request_duration_seconds" in families and "gateway_admission_queued" in families


def record(message: str, **fields: object) -> logging.LogRecord:
    entry = logging.LogRecord("gateway.access", logging.INFO, __file__, 1, message, (), None)
    setattr(entry, FIELDS, fields)
    setattr(entry, SHOWN, ("method",))
    return entry


def test_the_json_form_is_one_object_a_line_and_the_text_form_quotes_what_has_spaces() -> None:
    entry = record("POST", method="POST", route="/v1/retrieve", status=200, task="a task", tenant=None)
    body = json.loads(JsonFormatter().format(entry))
    assert body["route"] == "/v1/retrieve" and body["status"] == 200 and body["message"] == "POST" and body["level"] == "INFO"
    line = TextFormatter().format(entry)
    assert line.endswith('gateway.access: POST route=/v1/retrieve status=200 task="a task"') and "\n" not in line
    assert "method=" not in line and "tenant=" not in line  # said by the message; None is left out
