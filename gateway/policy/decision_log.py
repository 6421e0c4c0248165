"""Every policy decision as an event in OPA's decision-log format, to a file and/or a log service.

See docs/decision-log.md.
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import anyio.to_thread
import httpx
from opentelemetry.trace import get_current_span

from core.errors import PolicyUnavailable
from gateway.policy.base import ENTRYPOINTS, PolicyEngine
from gateway.settings import PolicySettings

log = logging.getLogger("gateway.decision_log")

# `slot` is an envelope field the policy may read, but free text that responses mask (it can hold
# a name or an address): like the text, it never reaches the log.
ERASED_KEYS = frozenset({"text", "value", "query", "name", "email", "phone", "website", "comment", "body", "slot"})


def erase(value: Any, path: str = "input") -> tuple[Any, list[str]]:
    """A copy of `value` without the keys that may hold text or personal data, and their paths."""
    erased: list[str] = []
    if isinstance(value, dict):
        kept: dict[str, Any] = {}
        for key, inner in value.items():
            if key in ERASED_KEYS:
                erased.append(f"{path}/{key}")
                continue
            kept[key], below = erase(inner, f"{path}/{key}")
            erased += below
        return kept, erased
    if isinstance(value, list):
        items = []
        for inner in value:
            copy, below = erase(inner, f"{path}/*")
            items.append(copy)
            erased += below
        return items, sorted(set(erased))
    return value, erased


class DecisionSink(Protocol):
    def write(self, entry: dict[str, Any]) -> None:
        """Take one erased entry; called on the request path, so it must not wait on I/O it does not own."""
        ...

    def close(self) -> None: ...


class FileSink:
    """Appends one JSON line per decision; thread-safe."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()

    def write(self, entry: dict[str, Any]) -> None:
        line = json.dumps(entry, sort_keys=True, separators=(",", ":"), default=str)
        with self._lock:
            self._file.write(line + "\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()


UPLOAD_BATCH = 500
UPLOAD_TIMEOUT_SECONDS = 3.0
CLOSE_DEADLINE_SECONDS = 5.0


class HttpSink:
    """Uploads decisions to an OPA decision-log service, the URL used as is, from a daemon thread.

    `write` only appends to a bounded buffer; when it is full the oldest entry is dropped and
    counted, as OPA does. Every `interval` seconds, or as soon as UPLOAD_BATCH entries wait, the
    thread POSTs them as gzipped JSON arrays of at most UPLOAD_BATCH events. A failed upload
    (network error or non-2xx) keeps its events and is retried after a backoff that doubles up to
    `max_backoff`. Delivery is at least once: a batch whose answer was lost is sent again.
    """

    def __init__(
        self,
        url: str,
        buffer: int = 10_000,
        *,
        interval: float = 1.0,
        max_backoff: float = 30.0,
        timeout: float = UPLOAD_TIMEOUT_SECONDS,
    ) -> None:
        self.url = url
        self.interval = interval
        self.max_backoff = max_backoff
        self.timeout = timeout
        self.sent = 0
        self.dropped = 0
        self.failed_posts = 0
        self._capacity = buffer
        self._buffer: deque[dict[str, Any]] = deque()
        self._in_flight = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._close_by = 0.0
        self._client = httpx.Client(headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
        self._thread = threading.Thread(target=self._run, name="decision-log-upload", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._buffer) + self._in_flight

    def stats(self) -> dict[str, int]:
        """The counters, read together."""
        with self._lock:
            pending = len(self._buffer) + self._in_flight
            return {"sent": self.sent, "dropped": self.dropped, "failed_posts": self.failed_posts, "pending": pending}

    def write(self, entry: dict[str, Any]) -> None:
        with self._lock:
            if len(self._buffer) >= self._capacity:
                self._buffer.popleft()
                self.dropped += 1
            self._buffer.append(entry)
            waiting = len(self._buffer)
        if waiting >= UPLOAD_BATCH:
            self._wake.set()

    def close(self) -> None:
        """Upload what is left for at most CLOSE_DEADLINE_SECONDS, then stop the thread."""
        self._close_by = time.monotonic() + CLOSE_DEADLINE_SECONDS
        self._stop.set()
        self._wake.set()
        self._thread.join(CLOSE_DEADLINE_SECONDS + 1)
        left = self.pending
        if left:
            log.warning("decision log: %d events not uploaded at shutdown (%d dropped before)", left, self.dropped)

    def _run(self) -> None:
        backoff = 0.0
        try:
            while not self._stop.is_set():
                if backoff:
                    self._stop.wait(backoff)  # a full buffer does not cut a backoff short; closing does
                else:
                    self._wake.wait(self.interval)
                    self._wake.clear()
                if self._stop.is_set():
                    break
                backoff = 0.0 if self._upload_all() else min(max(2 * backoff, self.interval), self.max_backoff)
            self._upload_all()
        finally:
            self._client.close()

    def _upload_all(self) -> bool:
        """POST batches until the buffer is empty; False, the batch kept, on the first failure."""
        while True:
            timeout = self.timeout
            if self._stop.is_set():
                timeout = min(timeout, self._close_by - time.monotonic())
                if timeout <= 0:
                    return False
            with self._lock:
                batch = [self._buffer.popleft() for _ in range(min(UPLOAD_BATCH, len(self._buffer)))]
                self._in_flight = len(batch)
            if not batch:
                return True
            if not self._post(batch, timeout):
                self._keep(batch)
                return False
            with self._lock:
                self.sent += len(batch)
                self._in_flight = 0

    def _post(self, batch: list[dict[str, Any]], timeout: float) -> bool:
        try:
            body = gzip.compress(json.dumps(batch, separators=(",", ":"), default=str).encode())
            response = self._client.post(self.url, content=body, timeout=timeout)
        except Exception as exc:  # nothing may stop the thread or reach the request path; the batch stays
            failure = type(exc).__name__
        else:
            if response.is_success:
                return True
            failure = f"HTTP {response.status_code}"
        with self._lock:
            self.failed_posts += 1
            waiting = len(self._buffer) + self._in_flight
        log.warning("decision log upload of %d events failed (%s); %d waiting", len(batch), failure, waiting)
        return False

    def _keep(self, batch: list[dict[str, Any]]) -> None:
        """Put a failed batch back in front; if writes filled the buffer meanwhile, the oldest go."""
        with self._lock:
            room = max(0, self._capacity - len(self._buffer))
            kept = batch[len(batch) - room :] if room < len(batch) else batch
            self.dropped += len(batch) - len(kept)
            self._buffer.extendleft(reversed(kept))
            self._in_flight = 0


class FanOutSink:
    """Writes each entry to every sink (a file and a service, when both are configured)."""

    def __init__(self, sinks: Sequence[DecisionSink]) -> None:
        self.sinks = tuple(sinks)

    def write(self, entry: dict[str, Any]) -> None:
        for sink in self.sinks:
            sink.write(entry)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def open_sink(settings: PolicySettings) -> DecisionSink | None:
    """The file sink, the HTTP sink, or both, as the settings ask; None when neither is set."""
    sinks: list[DecisionSink] = []
    if settings.decision_log:
        sinks.append(FileSink(settings.decision_log))
    if settings.decision_log_url:
        sinks.append(HttpSink(settings.decision_log_url, settings.decision_log_buffer))
    if len(sinks) < 2:
        return sinks[0] if sinks else None
    return FanOutSink(sinks)


class LoggedEngine:
    """A policy engine whose every evaluation is also written to the decision log."""

    def __init__(self, inner: PolicyEngine, sink: DecisionSink, *, owns_sink: bool = True) -> None:
        self.inner = inner
        self.sink = sink
        self.owns_sink = owns_sink  # False when the sink outlives this revision (gateway/policy/reload.py closes it)
        self.name = inner.name
        self.revision = inner.revision  # fixed once loaded, as the trace stamps it
        self.loaded_at: datetime = inner.loaded_at

    async def evaluate(self, entrypoint: str, policy_input: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter_ns()
        try:
            result = await self.inner.evaluate(entrypoint, policy_input)
        except PolicyUnavailable as exc:
            self._log(entrypoint, policy_input, None, started, exc.message)
            raise
        self._log(entrypoint, policy_input, result, started, None)
        return result

    async def evaluate_path(self, path: str, policy_input: dict[str, Any]) -> Any:
        """Another document (explain), not an entry point: not logged; None when the engine reads entry points only."""
        reader = getattr(self.inner, "evaluate_path", None)
        return None if reader is None else await reader(path, policy_input)

    def _log(self, entrypoint: str, policy_input: dict[str, Any], result: Any, started: int, error: str | None) -> None:
        erased_input, erased = erase(policy_input)
        entry: dict[str, Any] = {
            "decision_id": str(uuid.uuid4()),
            "path": ENTRYPOINTS.get(entrypoint, entrypoint),
            "input": erased_input,
            "result": erase(result, "result")[0] if result is not None else None,
            "bundles": {"gateway": {"revision": self.inner.revision}},
            "timestamp": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
            "metrics": {"timer_rego_query_eval_ns": time.perf_counter_ns() - started},
            "labels": {"engine": self.inner.name},
        }
        span = get_current_span().get_span_context()
        if span.is_valid:  # as OPA does with distributed tracing on: the call's OpenTelemetry ids
            entry["trace_id"], entry["span_id"] = format(span.trace_id, "032x"), format(span.span_id, "016x")
        if erased:
            entry["erased"] = sorted(set(erased))
        if error is not None:
            entry["error"] = {"message": error}
        self.sink.write(entry)

    async def ready(self) -> bool:
        return await self.inner.ready()

    async def aclose(self) -> None:
        await self.inner.aclose()
        if self.owns_sink:
            await anyio.to_thread.run_sync(self.sink.close)  # the HTTP sink may spend seconds uploading
