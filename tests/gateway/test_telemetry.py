"""OpenTelemetry: one span per pipeline layer under the request span, GenAI retrieval attributes,
the trace id in the audit row and the response header, metrics, and a real OTLP export."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from starlette.testclient import TestClient

from gateway.http.app import create_app
from gateway.settings import load_settings
from tests.conftest import Gateway
from tests.gateway.fixtures import SALES_TASK, seed
from tests.gateway.observed import observed_gateway
from tests.gateway.pipeline.test_semantic import EmbeddingsDouble
from tests.loopback import Loopback, QuietHandler

INBOUND_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def test_a_retrieve_is_one_trace_with_a_span_per_layer_and_its_id_in_the_audit_row(sqlite_url: str, tmp_path: Path) -> None:
    decisions = tmp_path / "decisions.jsonl"
    with observed_gateway(sqlite_url, tmp_path, decision_log=decisions) as seen:
        key = seed(seen.gateway)
        seen.spans.clear()
        response = seen.gateway.retrieve(
            key,
            {
                "task": SALES_TASK,
                "mode": "brief",
                "query": "wombatacl wombatsens quokkaacl",
                "entities": [{"email": "jane@globex.example"}],
            },
        )
        assert response.status_code == 200
        spans = seen.finished()
        row = seen.gateway.trace(response.headers["x-trace-id"])

    (server,) = [s for s in spans if s.kind == SpanKind.SERVER]
    assert server.name == "POST /v1/retrieve" and server.parent is None
    assert server.attributes is not None and server.attributes["http.response.status_code"] == 200
    assert server.attributes["gateway.trace_id"] == response.headers["x-trace-id"]
    trace_hex = format(server.context.trace_id, "032x")
    assert {format(s.context.trace_id, "032x") for s in spans} == {trace_hex}
    assert row["lineage"]["otel"] == {"trace_id": trace_hex, "span_id": format(server.context.span_id, "016x")}
    assert response.headers["traceparent"].startswith(f"00-{trace_hex}-{format(server.context.span_id, '016x')}-")
    logged = [json.loads(line) for line in decisions.read_text().splitlines()]
    decide_span = format(next(s for s in spans if s.name == "policy.decide").context.span_id, "016x")
    assert {(e["path"], e["trace_id"]) for e in logged} == {("gateway/request", trace_hex), ("gateway/items", trace_hex)}
    assert any(e["path"] == "gateway/request" and e["span_id"] == decide_span for e in logged)

    assert sorted(s.name for s in _children(spans, server)) == ["audit.write", "retrieval"]
    (pipeline,) = [s for s in spans if s.name == "retrieval"]
    layers = [s.name for s in sorted(_children(spans, pipeline), key=lambda s: s.start_time or 0)]
    assert layers == ["policy.decide", "entities.resolve", "recall", "sections", "policy.verify", "fuse", "rank_and_pack"]
    (recall_span,) = [s for s in spans if s.name == "recall"]
    per_source = {s.attributes["gen_ai.data_source.id"]: s.attributes for s in _children(spans, recall_span) if s.attributes}
    assert set(per_source) == {"exact", "graph", "lexical"}
    assert all(a["gen_ai.operation.name"] == "retrieval" and a["gateway.source.status"] for a in per_source.values())

    assert pipeline.attributes is not None and pipeline.attributes["gen_ai.operation.name"] == "retrieval"
    documents = json.loads(str(pipeline.attributes["gen_ai.retrieval.documents"]))
    returned = [item["id"] for item in response.json()["items"]]
    assert [d["id"] for d in documents] == returned and all(isinstance(d["score"], float) for d in documents)
    assert "mem_acl" not in {d["id"] for d in documents}  # only what the policy allowed and the call returned


def test_a_caller_trace_is_continued(sqlite_url: str, tmp_path: Path) -> None:
    with observed_gateway(sqlite_url, tmp_path) as seen:
        key = seed(seen.gateway)
        seen.spans.clear()
        response = seen.gateway.client.post(
            "/v1/retrieve",
            json={"task": SALES_TASK, "query": "wombatacl"},
            headers={**seen.gateway.auth(key), "traceparent": f"00-{INBOUND_TRACE}-00f067aa0ba902b7-01"},
        )
        (server,) = [s for s in seen.finished() if s.kind == SpanKind.SERVER]
        row = seen.gateway.trace(response.headers["x-trace-id"])
    assert format(server.context.trace_id, "032x") == INBOUND_TRACE
    assert server.parent is not None and format(server.parent.span_id, "016x") == "00f067aa0ba902b7"
    assert row["lineage"]["otel"]["trace_id"] == INBOUND_TRACE
    assert response.headers["traceparent"].startswith(f"00-{INBOUND_TRACE}-")


def test_metrics_count_layers_denials_mismatches_and_degraded_sources(sqlite_url: str, tmp_path: Path, policy_copy: Path) -> None:
    rego = policy_copy / "gateway/items/items.rego"
    rego.write_text(
        rego.read_text()
        + '\nfailures contains [item.id, "embargo"] if {\n\tsome item in input.items\n\titem.id == "mem_acl_ok"\n}\n'
    )
    failing = EmbeddingsDouble(fail=True)  # the semantic source fails on every query
    settings = failing.settings(policies_dir=policy_copy)
    try:
        with observed_gateway(sqlite_url, tmp_path, **settings) as seen:
            key = seed(seen.gateway)
            allowed = seen.gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl wombatsens"}, semantic=True)
            assert allowed.status_code == 200 and allowed.json()["sources"]["semantic"]["status"] == "error"
            assert seen.gateway.retrieve(key, {"task": {"type": "no_such_task"}, "query": "wombatacl"}).status_code == 403
            points = seen.metric_points()
    finally:
        failing.close()

    layers = {p.attributes["layer"] for p in points["gateway.layer.duration"]}
    assert {"policy.decide", "recall", "policy.verify", "fuse", "rank_and_pack", "audit.write"} <= layers
    assert all(p.count >= 1 and p.sum >= 0 for p in points["gateway.layer.duration"])
    assert sum(p.value for p in points["gateway.policy.denials"]) == 1
    assert sum(p.value for p in points["gateway.policy.pushdown_mismatches"]) == 1
    degraded = {p.attributes["gen_ai.data_source.id"]: p.value for p in points["gateway.sources.degraded"]}
    assert degraded == {"semantic": 1}
    retrieval = {p.attributes["gen_ai.data_source.id"] for p in points["gen_ai.retrieval.duration"]}
    assert {"exact", "lexical", "semantic"} <= retrieval
    answered = {
        (p.attributes["endpoint"], p.attributes["http.response.status_code"]): p.value for p in points["gateway.requests"]
    }
    assert answered[("retrieve", 200)] == 1 and answered[("retrieve", 403)] == 1


class Collector(Loopback):
    """An OTLP/HTTP collector on loopback that keeps what it is sent, decoded."""

    def __init__(self) -> None:
        self.traces: list[ExportTraceServiceRequest] = []
        self.metrics: list[ExportMetricsServiceRequest] = []
        collector = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                if self.path == "/v1/traces":
                    collector.traces.append(ExportTraceServiceRequest.FromString(raw))
                elif self.path == "/v1/metrics":
                    collector.metrics.append(ExportMetricsServiceRequest.FromString(raw))
                self.send_response(200 if self.path in ("/v1/traces", "/v1/metrics") else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        super().__init__(Handler)


def test_the_otlp_exporter_sends_spans_and_metrics_to_the_configured_collector(sqlite_url: str, tmp_path: Path) -> None:
    collector = Collector()
    try:
        settings = load_settings(
            {
                "data_dir": tmp_path / "data",
                "database_url": sqlite_url,
                "otel_exporter": "otlp",
                "otel_endpoint": collector.url,
                "otel_service_name": "gateway-under-test",
            },
            environ={},
        )
        with TestClient(create_app(settings), raise_server_exceptions=False) as client:
            gateway = Gateway(client, settings)
            key = seed(gateway)
            trace_id = gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl"}).headers["x-trace-id"]
        # The lifespan's end shut the providers down, which flushes both exporters.
    finally:
        collector.close()
    spans = [span for request in collector.traces for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]
    services = {
        a.value.string_value
        for request in collector.traces
        for rs in request.resource_spans
        for a in rs.resource.attributes
        if a.key == "service.name"
    }
    assert services == {"gateway-under-test"}
    names = {span.name for span in spans}
    assert {"POST /v1/retrieve", "retrieval", "policy.decide", "recall", "retrieval lexical", "audit.write"} <= names
    (server,) = [
        s
        for s in spans
        if s.name == "POST /v1/retrieve"
        and any(a.key == "gateway.trace_id" and a.value.string_value == trace_id for a in s.attributes)
    ]
    assert server.kind == server.SPAN_KIND_SERVER
    metric_names = {
        m.name for request in collector.metrics for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    assert {"gateway.layer.duration", "gateway.requests", "gen_ai.retrieval.duration"} <= metric_names


def test_without_an_exporter_spans_are_not_recorded_but_carry_real_ids() -> None:
    """Nothing to export to: no attributes are recorded (the cost of every layer's span), yet the
    audit row and the traceparent header still get the trace and span ids, continuing the caller's."""
    from gateway.settings import load_settings
    from gateway.telemetry import build_telemetry, span_ids

    telemetry = build_telemetry(load_settings({}, environ={}))
    with telemetry.request("POST /v1/retrieve", {}, {"gateway.endpoint": "retrieve"}) as span:
        assert not span.is_recording()
        ids = span_ids(span)
        assert ids is not None and int(ids["trace_id"], 16) and int(ids["span_id"], 16)
    inbound = "4bf92f3577b34da6a3ce929d0e0e4736"
    with telemetry.request("POST /v1/retrieve", {"traceparent": f"00-{inbound}-00f067aa0ba902b7-01"}, {}) as span:
        assert span_ids(span)["trace_id"] == inbound  # type: ignore[index]
