"""GET /metrics: the gateway's OpenTelemetry metrics in the Prometheus text format (docs/operations.md).

The instruments are gateway/telemetry.py's: a Prometheus reader on the gateway's own registry
collects them at each scrape, so the same series go to OTLP and to /metrics. The state that is not
an event of a call (the admission queue, the audit checkpoints, the background backlog) is read by
observable gauges at collection time, from the context `observe` is given. Unauthenticated and not
audited, like /healthz: it holds counts and durations by endpoint, outcome and status, never a
query, an item, a key or (unless GATEWAY_METRICS_TENANT_LABEL) a tenant.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.service import Error
from core.errors import NotFound
from gateway.context import GatewayContext
from gateway.http.errors import error_answer
from gateway.http.operation import STRING, Operation, json_answer, ref

METRICS_OFF = "no metrics are served here: GATEWAY_METRICS is off"
Values = Iterable[tuple[float, Mapping[str, str]]]


def observe(context: GatewayContext) -> None:
    """Register the gauges that read `context` at each collection; once per telemetry (a telemetry
    handed to a second app reads the latest context)."""
    telemetry = context.telemetry
    first = telemetry.observed is None
    telemetry.observed = context
    if not first or not telemetry.recording:
        return

    def current() -> GatewayContext:
        observed = telemetry.observed
        assert isinstance(observed, GatewayContext)
        return observed

    def admission() -> dict[str, int]:
        state = current().admission.saturation()
        keys = ("queued", "waiting_calls", "in_flight", "capacity", "refused", "background_in_flight", "background_seats")
        return {key: int(state[key]) for key in keys}

    def gauge(key: str) -> Values:
        return [(admission()[key], {})]

    telemetry.observe("gauge", "gateway.admission.queued", "Units waiting in the fair queue", lambda: gauge("queued"))
    telemetry.observe("gauge", "gateway.admission.waiting", "Calls waiting in the fair queue", lambda: gauge("waiting_calls"))
    telemetry.observe("gauge", "gateway.admission.in_flight", "Seats in use by calls", lambda: gauge("in_flight"))
    telemetry.observe(
        "gauge",
        "gateway.admission.background_in_flight",
        "Seats in use by background work (embedding, personal-data analysis)",
        lambda: gauge("background_in_flight"),
    )
    telemetry.observe(
        "gauge",
        "gateway.admission.background_seats",
        "The most seats background work may hold (GATEWAY_ADMISSION_BACKGROUND_SHARE of the capacity)",
        lambda: gauge("background_seats"),
    )
    telemetry.observe(
        "gauge", "gateway.admission.capacity", "Seats in all (GATEWAY_ADMISSION_CAPACITY)", lambda: gauge("capacity")
    )
    telemetry.observe(
        "counter", "gateway.admission.refused", "Calls refused by the queue's bounds or a rate quota", lambda: gauge("refused")
    )

    def checkpoints_signed() -> Values:
        checkpointer = current().audit.checkpointer
        return [(checkpointer.signed_count, {})] if checkpointer is not None else []

    def rows_unsigned() -> Values:
        checkpointer = current().audit.checkpointer
        return [(checkpointer.unsigned, {})] if checkpointer is not None else []

    telemetry.observe("counter", "gateway.audit.checkpoints", "Audit chain checkpoints this process signed", checkpoints_signed)
    telemetry.observe("gauge", "gateway.audit.unsigned_rows", "Audit rows appended here since the last checkpoint", rows_unsigned)

    def backlog() -> Values:
        # As each worker last counted it (every few seconds while it works): no query at scrape time.
        context = current()
        workers = (context.connectors.semantic.worker, context.privacy.worker)
        return [(w.lag, {"work": w.name}) for w in workers if w is not None and w.lag is not None]

    telemetry.observe("gauge", "gateway.background.pending", "Items waiting for embedding or personal-data analysis", backlog)

    def in_flight() -> Values:
        # Items held by a live claim of any worker, any process's (the part of the backlog being done now).
        context = current()
        workers = (context.connectors.semantic.worker, context.privacy.worker)
        return [(w.in_flight, {"work": w.name}) for w in workers if w is not None and w.in_flight is not None]

    telemetry.observe(
        "gauge",
        "gateway.background.claimed",
        "Items of the backlog a worker (of any process) has claimed and is doing",
        in_flight,
    )


async def metrics_route(request: Request) -> Response:
    """GET /metrics: each scrape collects the instruments (and reads the gauges) into the text format."""
    body = request.app.state.context.telemetry.exposition()
    if body is None:
        return JSONResponse(error_answer(NotFound(METRICS_OFF), None)[1], 404)
    return Response(body, media_type=CONTENT_TYPE_PLAIN_0_0_4)


OPERATIONS = (
    Operation(
        "/metrics",
        "get",
        metrics_route,
        "The gateway's metrics, for Prometheus",
        "operations",
        {
            "200": {
                "description": "The Prometheus text format (0.0.4): calls by endpoint and outcome, their durations, "
                "layer times, the admission queue, audit checkpoints, the background backlog",
                "content": {CONTENT_TYPE_PLAIN_0_0_4: {"schema": STRING}},
            },
            "404": json_answer("`not_found`: `GATEWAY_METRICS` is off", ref(Error), traced=False),
        },
        auth=None,
        description="Unauthenticated and not audited, like /healthz; with `gateway serve --workers N`, each scrape "
        "reaches one worker process, and its series are that process's.",
    ),
)
