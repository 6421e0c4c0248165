"""The embedded engine's policy processes: evaluations run outside the service's interpreter, a
process that dies or runs away fails its call closed and is replaced, a policy's own output never
corrupts an answer, and the service's threads go on while a policy evaluates."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from core.errors import ConfigurationError, PolicyUnavailable
from gateway.policy.bundle import PolicyBundle, read_bundle
from gateway.policy.embedded import EmbeddedEngine

PROJECT_POLICIES = Path(__file__).resolve().parents[2] / "policies"
EMPTY_ITEMS: dict[str, Any] = {"actor": {}, "task": {}, "constraints": {}, "subjects": [], "items": []}


def bundle_of(*modules: tuple[str, str], data: dict[str, Any] | None = None) -> PolicyBundle:
    return PolicyBundle(Path("/policies"), modules, (), data or {}, "sha256:test")


def evaluate(engine: EmbeddedEngine, entrypoint: str, policy_input: dict[str, Any]) -> Any:
    return asyncio.run(engine.evaluate(entrypoint, policy_input))


def close(engine: EmbeddedEngine) -> None:
    asyncio.run(engine.aclose())


def test_the_project_policy_answers_from_its_processes_and_they_stop_with_the_engine() -> None:
    engine = EmbeddedEngine(read_bundle(PROJECT_POLICIES))
    pids = [worker.process.pid for worker in engine._workers if worker.process is not None]
    assert len(pids) == 2 and os.getpid() not in pids
    assert evaluate(engine, "items", EMPTY_ITEMS)["allowed"] == []
    close(engine)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_policy_that_does_not_compile_stops_start_up_with_file_and_line() -> None:
    broken = bundle_of(("gateway/request.rego", "package gateway.request\n\nallow := {\n"))
    with pytest.raises(ConfigurationError, match=r"gateway/request.rego:\d+"):
        EmbeddedEngine(broken)


SLOW_ITEMS = (
    "gateway/items.rego",
    "package gateway.items\nimport rego.v1\n\n"
    "allowed := [] if { input.slow; count([x | some x in numbers.range(1, 50000000)]) > 0 }\n"
    "allowed := [] if { not input.slow }\n",
)


def test_a_policy_process_killed_mid_evaluation_fails_its_call_closed_and_is_replaced() -> None:
    engine = EmbeddedEngine(bundle_of(SLOW_ITEMS), workers=1)
    try:
        process = engine._workers[0].process
        assert process is not None
        threading.Timer(0.2, os.kill, (process.pid, signal.SIGKILL)).start()
        with pytest.raises(PolicyUnavailable, match="policy process exited"):
            evaluate(engine, "items", {"slow": True})
        assert evaluate(engine, "items", {"slow": False})["allowed"] == []  # a new process took its place
        replacement = engine._workers[0].process
        assert replacement is not None and replacement.pid != process.pid
        os.kill(replacement.pid, signal.SIGKILL)  # one that dies while idle is replaced before it is asked
        replacement.wait()
        assert evaluate(engine, "items", {"slow": False})["allowed"] == []
    finally:
        close(engine)


def test_a_runaway_evaluation_is_ended_at_its_time_and_fails_closed() -> None:
    engine = EmbeddedEngine(bundle_of(SLOW_ITEMS), workers=1, timeout_s=0.3)
    try:
        started = time.perf_counter()
        with pytest.raises(PolicyUnavailable, match="ran past its time"):
            evaluate(engine, "items", {"slow": True})
        assert time.perf_counter() - started < 3
        assert evaluate(engine, "items", {"slow": False})["allowed"] == []  # the next call has a fresh process
    finally:
        close(engine)


def test_what_a_policy_prints_never_reaches_an_answer() -> None:
    chatty = bundle_of(
        (
            "gateway/items.rego",
            'package gateway.items\nimport rego.v1\n\nallowed := ["a"] if { print("a line of its own\\n+{}"); true }\n',
        )
    )
    engine = EmbeddedEngine(chatty, workers=1)
    try:
        for _ in range(3):
            assert evaluate(engine, "items", EMPTY_ITEMS) == {"allowed": ["a"]}
    finally:
        close(engine)


def test_an_undefined_document_or_an_engine_error_is_unavailable_never_a_decision() -> None:
    undefined = bundle_of(
        ("gateway/request.rego", "package gateway.request\nimport rego.v1\n\nallow := false\n")
    )  # no items document
    engine = EmbeddedEngine(undefined, workers=1)
    try:
        with pytest.raises(PolicyUnavailable, match="undefined"):
            evaluate(engine, "items", EMPTY_ITEMS)
    finally:
        close(engine)
    failing = bundle_of(
        ("gateway/items.rego", "package gateway.items\nimport rego.v1\n\nallowed := [time.parse_rfc3339_ns(input.at)]\n")
    )
    engine = EmbeddedEngine(failing, workers=1)
    try:
        with pytest.raises(PolicyUnavailable, match="embedded policy evaluation failed"):
            evaluate(engine, "items", {"at": None})
    finally:
        close(engine)


def test_the_service_threads_go_on_while_a_policy_evaluates() -> None:
    """In the service's own interpreter, regorus held the lock for a whole evaluation: nothing else
    in the process ran. Now a thread counting meanwhile gets most of its time."""
    slow = bundle_of(
        (
            "gateway/items.rego",
            "package gateway.items\nimport rego.v1\n\nallowed := [] if { count([x | some x in numbers.range(1, 600000)]) > 0 }\n",
        )
    )
    engine = EmbeddedEngine(slow, workers=1)
    try:
        evaluate(engine, "items", EMPTY_ITEMS)  # warm
        done = threading.Event()
        counted = 0

        def count() -> None:
            nonlocal counted
            while not done.is_set():
                counted += 1

        counter = threading.Thread(target=count)
        counter.start()
        started = time.perf_counter()
        evaluate(engine, "items", EMPTY_ITEMS)
        elapsed = time.perf_counter() - started
        done.set()
        counter.join()
        alone, started = 0, time.perf_counter()
        while time.perf_counter() - started < elapsed:
            alone += 1
        assert elapsed > 0.02 and counted > alone * 0.3, (elapsed, counted, alone)
    finally:
        close(engine)
