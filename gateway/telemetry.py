"""OpenTelemetry: a span per pipeline layer and the gateway's metrics.

See docs/telemetry.md.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.settings import TelemetrySettings

Attributes = Mapping[str, str | int | float | bool | Sequence[str]]
PROPAGATOR = TraceContextTextMapPropagator()
DOCUMENTS_ON_SPAN = 50  # gen_ai.retrieval.documents keeps the first 50 returned ids
EXPORT_TIMEOUT_SECONDS = 3


class Telemetry:
    """One gateway's tracer and instruments. Owns its providers, so each gateway (and each test) has
    its own; `shutdown` flushes them."""

    def __init__(self, tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None) -> None:
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self.tracer = (tracer_provider or trace.NoOpTracerProvider()).get_tracer("gateway")
        meter = meter_provider.get_meter("gateway") if meter_provider else None
        self._meter = meter
        if meter is None:
            return
        self.layer_ms = meter.create_histogram(
            "gateway.layer.duration", unit="ms", description="Time spent in one pipeline layer of one call"
        )
        self.retrieval_s = meter.create_histogram(
            "gen_ai.retrieval.duration", unit="s", description="Time one retrieval source took"
        )
        self.requests = meter.create_counter("gateway.requests", description="Calls answered, by endpoint and status")
        self.denials = meter.create_counter("gateway.policy.denials", description="Calls the request policy denied")
        self.mismatches = meter.create_counter(
            "gateway.policy.pushdown_mismatches", description="Candidates a source returned that the item policy then refused"
        )
        self.degraded = meter.create_counter(
            "gateway.sources.degraded", description="Sources that failed or ran out of time in a call"
        )

    @property
    def recording(self) -> bool:
        return self._meter is not None

    # --- spans -----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def request(self, name: str, headers: Mapping[str, str], attributes: Attributes) -> Iterator[Span]:
        """The server span of one HTTP call, continuing the caller's W3C trace when it sent one."""
        parent: Context = PROPAGATOR.extract(dict(headers))
        with self.tracer.start_as_current_span(
            name,
            context=parent,
            kind=SpanKind.SERVER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            yield span

    @contextlib.contextmanager
    def layer(self, name: str, attributes: Attributes | None = None) -> Iterator[Span]:
        """A span for one pipeline layer, and its duration in `gateway.layer.duration`."""
        started = time.perf_counter()
        with self.tracer.start_as_current_span(
            name,
            attributes=attributes or {},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except BaseException as exc:
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                raise
            finally:
                if self._meter is not None:
                    self.layer_ms.record((time.perf_counter() - started) * 1000, {"layer": name})

    # --- metrics ---------------------------------------------------------------------------------

    def answered(self, endpoint: str, status: int, decision: str) -> None:
        if self._meter is not None:
            self.requests.add(1, {"endpoint": endpoint, "http.response.status_code": status, "decision": decision})

    def denied(self, endpoint: str) -> None:
        if self._meter is not None:
            self.denials.add(1, {"endpoint": endpoint})

    def mismatched(self, count: int) -> None:
        if self._meter is not None and count:
            self.mismatches.add(count)

    def source_done(self, source: str, status: str, seconds: float) -> None:
        if self._meter is None:
            return
        attributes: dict[str, str] = {"gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": source}
        if status in ("error", "timeout"):
            attributes["error.type"] = status
            self.degraded.add(1, {"gen_ai.data_source.id": source, "status": status})
        self.retrieval_s.record(seconds, attributes)

    def shutdown(self) -> None:
        if self._tracer_provider is not None:
            self._tracer_provider.shutdown()
        if self._meter_provider is not None:
            self._meter_provider.shutdown()


NOOP = Telemetry(None, None)
_current: ContextVar[Telemetry] = ContextVar("gateway_telemetry", default=NOOP)


def current() -> Telemetry:
    return _current.get()


@contextlib.contextmanager
def active(telemetry: Telemetry) -> Iterator[None]:
    """Make `telemetry` current for the layers of one request."""
    token = _current.set(telemetry)
    try:
        yield
    finally:
        _current.reset(token)


def layer(name: str, attributes: Attributes | None = None) -> contextlib.AbstractContextManager[Span]:
    return current().layer(name, attributes)


def traceparent(span: Span) -> str | None:
    """The W3C traceparent of `span`, for the response header; None when there is no valid trace."""
    carrier: dict[str, str] = {}
    PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


def span_ids(span: Span) -> dict[str, str] | None:
    context = span.get_span_context()
    if not context.is_valid:
        return None
    return {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}


def documents(entries: Sequence[tuple[str, float]]) -> str:
    """`gen_ai.retrieval.documents`: ids and scores, as the JSON string the conventions allow."""
    return json.dumps([{"id": item_id, "score": round(score, 6)} for item_id, score in entries[:DOCUMENTS_ON_SPAN]])


def build_telemetry(
    settings: TelemetrySettings, span_processors: Sequence[SpanProcessor] = (), metric_readers: Sequence[MetricReader] = ()
) -> Telemetry:
    """Spans always get real trace ids (the audit row and the response header carry them); they are
    recorded and exported only with GATEWAY_OTEL_EXPORTER=otlp, or to the processors and readers
    given (tests)."""
    resource = Resource.create({"service.name": settings.otel_service_name})
    processors = list(span_processors)
    readers = list(metric_readers)
    if settings.otel_exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        base = settings.otel_endpoint.rstrip("/") if settings.otel_endpoint else None
        # Short export deadlines: a collector that is down must not hold up shutdown for long (the
        # exporters retry within their deadline; what is left is dropped and logged by the SDK).
        span_exporter: SpanExporter = OTLPSpanExporter(
            endpoint=f"{base}/v1/traces" if base else None, timeout=EXPORT_TIMEOUT_SECONDS
        )
        processors.append(BatchSpanProcessor(span_exporter, export_timeout_millis=EXPORT_TIMEOUT_SECONDS * 1000))
        metric_exporter = OTLPMetricExporter(endpoint=f"{base}/v1/metrics" if base else None, timeout=EXPORT_TIMEOUT_SECONDS)
        readers.append(PeriodicExportingMetricReader(metric_exporter, export_timeout_millis=EXPORT_TIMEOUT_SECONDS * 1000))
    # With nowhere to send spans, they are not recorded at all (ALWAYS_OFF): a non-recording span
    # still carries a real trace and span id, for the audit row and the traceparent header, but
    # setting its attributes and ending it costs nothing.
    tracer_provider = TracerProvider(resource=resource, sampler=ALWAYS_ON if processors else ALWAYS_OFF)
    for processor in processors:
        tracer_provider.add_span_processor(processor)
    meter_provider = MeterProvider(resource=resource, metric_readers=readers) if readers else None
    return Telemetry(tracer_provider, meter_provider)
