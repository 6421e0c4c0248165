"""The embedded engine: Rego evaluated in-process by regorus, one engine clone per thread."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone
from typing import Any

import regorus

from gateway.errors import ConfigurationError, PolicyUnavailable
from gateway.policy.base import ENTRYPOINTS
from gateway.policy.bundle import PolicyBundle


def build_engine(bundle: PolicyBundle, *, with_tests: bool = False) -> regorus.Engine:
    """Compile the bundle; a syntax error raises ConfigurationError naming file:line."""
    engine = regorus.Engine()
    for path, source in bundle.modules + (bundle.tests if with_tests else ()):
        try:
            engine.add_policy(str(bundle.root / path), source)
        except Exception as exc:  # regorus raises plain exceptions carrying file:line
            raise ConfigurationError(f"policy error: {exc}") from exc
    engine.add_data_json(json.dumps(bundle.data))
    return engine


def first_value(raw: str) -> Any:
    """The value of a query's first expression, or raise when the document is undefined."""
    result = json.loads(raw).get("result") or []
    if not result or not result[0].get("expressions"):
        raise PolicyUnavailable("policy document is undefined")
    return result[0]["expressions"][0]["value"]


class EmbeddedEngine:
    name = "embedded"

    def __init__(self, bundle: PolicyBundle) -> None:
        self.revision = bundle.revision
        self.loaded_at = datetime.now(timezone.utc)
        self._prototype = build_engine(bundle)
        self._local = threading.local()
        self._clone_lock = threading.Lock()

    def _engine(self) -> regorus.Engine:
        # regorus panics when one engine object is used from two threads: each thread gets its own.
        engine = getattr(self._local, "engine", None)
        if engine is None:
            with self._clone_lock:
                engine = self._prototype.clone()
            self._local.engine = engine
        return engine

    def evaluate_sync(self, entrypoint: str, policy_input: dict[str, Any]) -> dict[str, Any]:
        engine = self._engine()
        query = "data." + ENTRYPOINTS[entrypoint].replace("/", ".")
        try:
            engine.set_input_json(json.dumps(policy_input))
            value = first_value(engine.eval_query_as_json(query))
        except PolicyUnavailable:
            raise
        except Exception as exc:  # any engine failure is "no decision", never allow or deny
            raise PolicyUnavailable(f"embedded policy evaluation failed: {type(exc).__name__}") from exc
        if not isinstance(value, dict):
            raise PolicyUnavailable(f"{query} is not an object")
        return value

    async def evaluate(self, entrypoint: str, policy_input: dict[str, Any]) -> dict[str, Any]:
        # A small rule evaluates in tens of microseconds, so it runs on the calling (event loop) thread.
        return self.evaluate_sync(entrypoint, policy_input)

    async def aclose(self) -> None:
        return None
