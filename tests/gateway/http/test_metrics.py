"""GET /metrics (gateway/http/metrics.py): the gateway's OpenTelemetry instruments in the Prometheus
text format, on the main port, unauthenticated and not audited; no query, item or (unless asked)
tenant in any series."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from audit.chain import audit_trace
from audit.integrity import generate
from gateway.admission import Admission, Prices, Quotas
from tests.conftest import Gateway, open_gateway
from tests.gateway.fixtures import SALES_TASK, memory, seed

SECRET = "zanzibarsecretword"  # planted in a query and in an item: never in a series


def scrape(gateway: Gateway) -> dict[str, list[Any]]:
    """The samples of /metrics by sample name, parsed as Prometheus parses them."""
    response = gateway.client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def value(samples: dict[str, list[Any]], name: str, **labels: str) -> float:
    return sum(s.value for s in samples.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items()))


def full_buckets(gateway: Gateway) -> None:
    """Forget the rate quotas' buckets and learned prices, so the next call meets a full bucket: on a
    loaded machine a call measures more units than its price and the one after it was refused (a
    429 where the test asks for a 403)."""
    admission: Admission = gateway.client.app.state.context.admission  # type: ignore[attr-defined]
    admission.quotas, admission.prices = Quotas(), Prices()


def calls(gateway: Gateway) -> tuple[str, int]:
    """A 400, a 422, an allow, a deny, and allows until alice's rate quota (`admission_actor_rate`)
    answers a 429; the planted word in an item and in every query. Returns the /metrics text and the
    number of allows."""
    key = seed(gateway)
    gateway.ingest("acme", [memory("mem_secret_word", f"wombatacl {SECRET} note")])
    malformed = gateway.client.post("/v1/retrieve", content=b"{not json", headers=gateway.auth(key))
    assert malformed.status_code == 400
    full_buckets(gateway)
    assert gateway.retrieve(key, {"task": SALES_TASK, "query": SECRET, "nope": 1}).status_code == 422
    full_buckets(gateway)
    assert gateway.retrieve(key, {"task": SALES_TASK, "query": f"wombatacl {SECRET}"}).status_code == 200
    full_buckets(gateway)
    assert gateway.retrieve(key, {"task": {"type": "no_such_task"}, "query": SECRET}).status_code == 403
    full_buckets(gateway)
    allowed = 1
    for _ in range(20):  # the quota refills with time: on a slow machine a few more calls pass first
        status = gateway.retrieve(key, {"task": SALES_TASK, "query": SECRET}).status_code
        if status == 429:
            break
        assert status == 200
        allowed += 1
    else:
        raise AssertionError("no 429")
    return str(gateway.client.get("/metrics").text), allowed


def test_metrics_count_calls_by_endpoint_and_outcome_and_never_name_a_query_an_item_or_a_tenant(
    sqlite_url: str, tmp_path: Path
) -> None:
    overrides = {
        "admission_actor_rate": 3,
        "audit_signing_key": generate(tmp_path / "keys")["private"],
        "audit_checkpoints": tmp_path / "audit.checkpoints",
    }
    with open_gateway(sqlite_url, tmp_path, **overrides) as gateway:
        text, allowed = calls(gateway)
        rows = gateway.store.connect().execute(select(func.count()).select_from(audit_trace)).scalar_one()
        samples = scrape(gateway)
        # A scrape is not a call: no audit row, no count of its own.
        assert gateway.store.connect().execute(select(func.count()).select_from(audit_trace)).scalar_one() == rows
        gateway.client.app.state.context.audit.checkpointer.checkpoint()  # type: ignore[attr-defined]
        signed = scrape(gateway)

    assert SECRET not in text and "acme" not in text and "globex" not in text and "alice" not in text
    requests = "gateway_requests_total"
    assert value(samples, requests, endpoint="retrieve", outcome="allow", status_class="2xx") == allowed
    assert value(samples, requests, endpoint="retrieve", outcome="deny", http_response_status_code="403") == 1
    assert value(samples, requests, endpoint="retrieve", outcome="refused", http_response_status_code="400") == 1
    assert value(samples, requests, endpoint="retrieve", outcome="refused", http_response_status_code="422") == 1
    assert value(samples, requests, endpoint="retrieve", outcome="refused", http_response_status_code="429") == 1
    assert value(samples, requests, endpoint="ingest", outcome="allow") == 3
    assert value(samples, requests) == 7 + allowed  # the calls above, and neither scrape
    duration = "gateway_request_duration_seconds"
    assert value(samples, f"{duration}_count", endpoint="retrieve", outcome="deny", status_class="4xx") == 1
    assert value(samples, f"{duration}_count", endpoint="retrieve", outcome="refused") == 3
    assert value(samples, f"{duration}_bucket", endpoint="retrieve", outcome="allow", le="+Inf") == allowed
    assert value(samples, f"{duration}_sum", endpoint="retrieve") > 0
    assert value(samples, "gateway_admission_wait_seconds_count") >= 4 + allowed  # every admitted call
    assert value(samples, "gateway_admission_refused_total") >= 1  # the 429 (and any background batch over the quota)
    assert value(samples, "gateway_admission_capacity") == gateway.settings.admission_capacity
    assert value(samples, "gateway_admission_queued") == 0 and value(samples, "gateway_admission_in_flight") == 0
    layers = {s.labels["layer"] for s in samples["gateway_layer_duration_milliseconds_count"]}
    assert {"policy.decide", "policy.verify", "audit.write", "recall"} <= layers
    assert value(samples, "gateway_policy_denials_total", endpoint="retrieve") == 1
    assert {s.labels["work"] for s in samples["gateway_background_pending"]} <= {"embedding", "pii analysis"}
    assert value(samples, "gateway_audit_unsigned_rows") >= 7 + allowed
    assert value(signed, "gateway_audit_checkpoints_total") > value(samples, "gateway_audit_checkpoints_total")
    assert value(signed, "gateway_audit_unsigned_rows") == 0
    assert all("tenant" not in s.labels for found in samples.values() for s in found)


def test_the_tenant_is_a_label_only_when_asked_for(sqlite_url: str, tmp_path: Path) -> None:
    with open_gateway(sqlite_url, tmp_path, admission_actor_rate=3, metrics_tenant_label=True) as gateway:
        text, allowed = calls(gateway)
        samples = scrape(gateway)
    assert SECRET not in text and "alice" not in text
    assert value(samples, "gateway_requests_total", tenant="acme", outcome="deny") == 1
    assert value(samples, "gateway_requests_total", tenant="globex", endpoint="ingest") == 1
    assert value(samples, "gateway_request_duration_seconds_count", tenant="acme", endpoint="retrieve") == 4 + allowed


def test_metrics_off_is_a_404(sqlite_url: str, tmp_path: Path) -> None:
    with open_gateway(sqlite_url, tmp_path, metrics=False) as gateway:
        answer = gateway.client.get("/metrics")
        assert answer.status_code == 404 and "GATEWAY_METRICS" in answer.json()["error"]["message"]
        assert gateway.client.app.state.context.telemetry.registry is None  # type: ignore[attr-defined]
