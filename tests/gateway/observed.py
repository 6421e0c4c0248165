"""A gateway whose OpenTelemetry spans and metrics land in memory (the SDK's in-memory exporter and
reader), for tests that look at what the gateway emits."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

from gateway.http.app import create_app
from gateway.settings import load_settings
from gateway.telemetry import build_telemetry
from tests.conftest import Gateway


class Observed:
    """A gateway whose spans and metrics land in memory."""

    def __init__(self, gateway: Gateway, spans: InMemorySpanExporter, metrics: InMemoryMetricReader) -> None:
        self.gateway = gateway
        self.spans = spans
        self.metrics = metrics

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def metric_points(self) -> dict[str, list[Any]]:
        points: dict[str, list[Any]] = {}
        data = self.metrics.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    points.setdefault(metric.name, []).extend(metric.data.data_points)
        return points

    def metrics_json(self) -> str:
        data = self.metrics.get_metrics_data()
        return data.to_json() if data else ""


@contextlib.contextmanager
def observed_gateway(database_url: str, tmp_path: Path, **overrides: Any) -> Iterator[Observed]:
    spans, metrics = InMemorySpanExporter(), InMemoryMetricReader()
    defaults = {"data_dir": tmp_path / "data", "database_url": database_url, "connector_deadline_ms": 10_000}
    settings = load_settings({**defaults, **overrides}, environ={})
    telemetry = build_telemetry(settings, span_processors=[SimpleSpanProcessor(spans)], metric_readers=[metrics])
    with TestClient(create_app(settings, telemetry=telemetry), raise_server_exceptions=False) as client:
        yield Observed(Gateway(client, settings), spans, metrics)
