"""Every policy decision, also in OPA's decision-log format, so teams with OPA tooling can read it.

Each evaluation (allowed, denied or failed) becomes one JSON line with OPA's field names:
`decision_id`, `path`, `input`, `result`, `bundles` (`{"gateway": {"revision"}}`), `timestamp`,
`metrics` (`timer_rego_query_eval_ns`), plus `labels` and, on failure, `error`. The input is copied
with anything that could hold text or personal data erased (item bodies, values, query text, names,
identifiers, comments), and the erased paths are listed in `erased` as OPA does. The gateway's
inputs carry envelopes, never bodies; the erasure is a second line of defence.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gateway.errors import PolicyUnavailable
from gateway.policy.base import ENTRYPOINTS, PolicyEngine

ERASED_KEYS = frozenset({"text", "value", "query", "name", "email", "phone", "website", "comment", "body"})


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


class LoggedEngine:
    """A policy engine whose every evaluation is also written to the decision log."""

    def __init__(self, inner: PolicyEngine, sink: FileSink) -> None:
        self.inner = inner
        self.sink = sink
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
        if erased:
            entry["erased"] = sorted(set(erased))
        if error is not None:
            entry["error"] = {"message": error}
        self.sink.write(entry)

    async def ready(self) -> bool:
        return await self.inner.ready()

    async def aclose(self) -> None:
        await self.inner.aclose()
        self.sink.close()
