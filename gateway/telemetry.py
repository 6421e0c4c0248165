"""OpenTelemetry: a span per pipeline layer and the gateway's metrics.

See docs/telemetry.md.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import CollectorRegistry, generate_latest

from gateway.settings import TelemetrySettings

Attributes = Mapping[str, str | int | float | bool | Sequence[str]]
PROPAGATOR = TraceContextTextMapPropagator()
DOCUMENTS_ON_SPAN = 50  # gen_ai.retrieval.documents keeps the first 50 returned ids
EXPORT_TIMEOUT_SECONDS = 3
# Call and queue-wait durations, in seconds: from a cached answer to a long synthesis.
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
Reading = Callable[[], Iterable[tuple[float, Mapping[str, str]]]]


def outcome(status: int, decision: str) -> str:
    """A call's outcome, for the metrics: allow, deny (the policy said no), refused (any other 4xx:
    malformed, unauthenticated, over a quota) or error (5xx, or no decision)."""
    if decision == "deny":
        return "deny"
    if status >= 500 or decision == "error":
        return "error"
    return "refused" if status >= 400 else "allow"


class Telemetry:
    """One gateway's tracer and instruments. Owns its providers, so each gateway (and each test) has
    its own; `shutdown` flushes them."""

    def __init__(
        self,
        tracer_provider: TracerProvider | None,
        meter_provider: MeterProvider | None,
        registry: CollectorRegistry | None = None,
        tenant_label: bool = False,
    ) -> None:
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        # The Prometheus registry GET /metrics renders: this gateway's own, never the process's default.
        self.registry = registry
        self.tenant_label = tenant_label
        self.observed: object = None  # what the observable gauges read (gateway/http/metrics.py)
        self.tracer = (tracer_provider or trace.NoOpTracerProvider()).get_tracer("gateway")
        meter = meter_provider.get_meter("gateway") if meter_provider else None
        self._meter = meter
        if meter is None:
            return
        self.layer_ms = meter.create_histogram(
            "gateway.layer.duration", unit="ms", description="Time spent in one pipeline layer of one call"
        )
        self.retrieval_s = meter.create_histogram(
            "gen_ai.retrieval.duration",
            unit="s",
            description="Time one retrieval source took",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,  # the SDK's default buckets are for milliseconds
        )
        self.requests = meter.create_counter("gateway.requests", description="Calls answered, by endpoint and status")
        self.duration_s = meter.create_histogram(
            "gateway.request.duration",
            unit="s",
            description="Time from a call's start to its audit row written, by endpoint and outcome",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.queue_wait_s = meter.create_histogram(
            "gateway.admission.wait",
            unit="s",
            description="Time an admitted call waited in the fair queue for its seats",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
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

    def answered(
        self,
        endpoint: str,
        status: int,
        decision: str,
        seconds: float | None = None,
        tenant: str | None = None,
        queued_ms: float | None = None,
    ) -> None:
        """One call answered: its count by endpoint, status, decision, outcome and status class, its
        duration by endpoint, outcome and status class, and its wait in the admission queue (when it
        was admitted). The tenant is a label only with GATEWAY_METRICS_TENANT_LABEL; nothing of the
        call's content ever is (the endpoint is the operation's name, never the path it was called on)."""
        if self._meter is None:
            return
        labels: dict[str, str] = {
            "endpoint": endpoint,
            "outcome": outcome(status, decision),
            "status_class": f"{status // 100}xx",
        }
        if self.tenant_label and tenant:
            labels["tenant"] = tenant
        self.requests.add(1, {**labels, "http.response.status_code": status, "decision": decision})
        if seconds is not None:
            self.duration_s.record(seconds, labels)
        if queued_ms is not None:
            self.queue_wait_s.record(queued_ms / 1000, {"tenant": tenant} if self.tenant_label and tenant else {})

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

    def observe(self, kind: str, name: str, description: str, reading: Reading, unit: str = "") -> None:
        """An observable `gauge` or `counter` (running totals, never decreasing): `reading` is called at
        each collection (a scrape of /metrics, an OTLP export) and gives the values with their
        labels; it must be cheap and must not block."""
        if self._meter is None:
            return

        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(value, dict(labels)) for value, labels in reading()]

        create = self._meter.create_observable_counter if kind == "counter" else self._meter.create_observable_gauge
        create(name, callbacks=[observe], unit=unit, description=description)

    def exposition(self) -> bytes | None:
        """The metrics in the Prometheus text format (0.0.4); None without a registry (GATEWAY_METRICS off)."""
        return generate_latest(self.registry) if self.registry is not None else None

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
    registry = None
    if settings.metrics:
        # Pulled by GET /metrics: each scrape collects the instruments into this gateway's own registry.
        registry = CollectorRegistry(auto_describe=True)
        readers.append(PrometheusMetricReader(scope_info_enabled=False, registry=registry))
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
    return Telemetry(tracer_provider, meter_provider, registry, settings.metrics_tenant_label)
