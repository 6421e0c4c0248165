"""The pipeline's one stage timer: each stage is a span and adds its time to one typed field."""

from __future__ import annotations

import time

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.pipeline.stages import StageTimer
from gateway.settings import load_settings
from gateway.telemetry import active, build_telemetry


def test_stages_add_to_their_field_and_open_a_span_each() -> None:
    exporter = InMemorySpanExporter()
    telemetry = build_telemetry(load_settings({}), span_processors=[SimpleSpanProcessor(exporter)])
    timer = StageTimer()
    with active(telemetry):
        with timer.stage("fuse", "fuse_ms", {"gateway.test": 1}):
            time.sleep(0.01)
        with timer.stage("rank_and_pack", "fuse_ms"):
            time.sleep(0.01)
        with pytest.raises(ValueError), timer.stage("pii.mask", "mask_ms"):
            time.sleep(0.005)
            raise ValueError("a stage that fails still counts its time")
        with timer.stage("cursor.issue"):  # a span with no timing field
            pass
    timings = timer.finish()
    assert timings["fuse_ms"] >= 20 and timings["mask_ms"] >= 5
    assert timings["total_ms"] >= timings["fuse_ms"] + timings["mask_ms"]
    assert "decide_ms" not in timings and "synthesis_ms" not in timings  # stages that did not run are absent
    names = [span.name for span in exporter.get_finished_spans()]
    assert names == ["fuse", "rank_and_pack", "pii.mask", "cursor.issue"]
    telemetry.shutdown()


def test_set_replaces_and_add_accumulates() -> None:
    timer = StageTimer()
    timer.add("verify_ms", 1.25)
    timer.add("verify_ms", 2.0)
    timer.set("decide_ms", 0.5)
    timer.set("decide_ms", 0.75)
    timings = timer.finish()
    assert (timings["verify_ms"], timings["decide_ms"]) == (3.25, 0.75)
