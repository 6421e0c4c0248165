"""The embedded engine: Rego evaluated in-process by regorus, on one thread that owns the engine.

regorus engines are "unsendable": used or even dropped from a second thread they panic. So the
engine is built, used and dropped on a single dedicated thread, and requests await its answers.
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

import regorus

from core.errors import ConfigurationError, PolicyUnavailable
from gateway.policy.base import ENTRYPOINTS
from gateway.policy.bundle import PolicyBundle


def build_engine(bundle: PolicyBundle, *, with_tests: bool = False) -> regorus.Engine:
    """Compile the bundle; a syntax error raises ConfigurationError naming file:line.

    The error is raised after the half-built engine is dropped, so no traceback keeps it alive
    to be freed later on another thread.
    """
    engine = regorus.Engine()
    failure = None
    for path, source in bundle.modules + (bundle.tests if with_tests else ()):
        try:
            engine.add_policy(str(bundle.root / path), source)
        except Exception as exc:  # regorus raises plain exceptions carrying file:line
            failure = f"policy error: {exc}"
            break
    if failure is not None:
        del engine
        raise ConfigurationError(failure)
    engine.add_data_json(json.dumps(bundle.data))
    return engine


def first_value(raw: str) -> Any:
    """The value of a query's first expression, or raise when the document is undefined."""
    result = json.loads(raw).get("result") or []
    if not result or not result[0].get("expressions"):
        raise PolicyUnavailable("policy document is undefined")
    return result[0]["expressions"][0]["value"]


class _Owner:
    """Lives only on the engine thread."""

    engine: regorus.Engine | None = None


class EmbeddedEngine:
    name = "embedded"

    def __init__(self, bundle: PolicyBundle) -> None:
        self.revision = bundle.revision
        self.loaded_at = datetime.now(timezone.utc)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rego")
        self._owner = _Owner()
        try:
            self._thread.submit(self._load, bundle).result()
        except BaseException:
            self._thread.shutdown(wait=True)
            raise

    def _load(self, bundle: PolicyBundle) -> None:
        message = None
        try:
            self._owner.engine = build_engine(bundle)
        except ConfigurationError as exc:
            message = exc.message
        # Raised outside the handler so the half-built engine is dropped here, on its own thread.
        if message is not None:
            raise ConfigurationError(message)

    def _unload(self) -> None:
        self._owner.engine = None

    def evaluate_sync(self, entrypoint: str, policy_input: dict[str, Any]) -> dict[str, Any]:
        """Runs on the engine thread only."""
        query = "data." + ENTRYPOINTS[entrypoint].replace("/", ".")
        failure, raw = self._run(query, json.dumps(policy_input))
        if failure is not None:  # any engine failure is "no decision", never allow or deny
            raise PolicyUnavailable(f"embedded policy evaluation failed: {failure}")
        value = first_value(raw)
        if not isinstance(value, dict):
            raise PolicyUnavailable(f"{query} is not an object")
        return value

    def _run(self, query: str, policy_input: str) -> tuple[str | None, str]:
        # Returns instead of raising, so no traceback holds the engine past this frame.
        engine = self._owner.engine
        if engine is None:
            return "the engine is closed", ""
        try:
            engine.set_input_json(policy_input)
            return None, engine.eval_query_as_json(query)
        except Exception as exc:
            return type(exc).__name__, ""

    async def evaluate(self, entrypoint: str, policy_input: dict[str, Any]) -> dict[str, Any]:
        try:
            future = self._thread.submit(self.evaluate_sync, entrypoint, policy_input)
        except RuntimeError as exc:  # executor shut down
            raise PolicyUnavailable("the embedded policy engine is closed") from exc
        return await asyncio.wrap_future(future)

    async def ready(self) -> bool:
        try:
            await self.evaluate("items", {"actor": {}, "task": {}, "constraints": {}, "subjects": [], "items": []})
        except PolicyUnavailable:
            return False
        return True

    async def aclose(self) -> None:
        try:
            await asyncio.wrap_future(self._thread.submit(self._unload))
        finally:
            self._thread.shutdown(wait=True)
