"""The policy engine interface and the start-up self check shared by both engines."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from gateway.errors import ConfigurationError, PolicyUnavailable
from gateway.settings import Settings

ENTRYPOINTS = {"request": "gateway/request", "items": "gateway/items"}

PROBE_ACTOR = {"id": "startup-probe", "tenant": "startup-probe", "roles": [], "groups": [], "clearance": "public"}


class PolicyEngine(Protocol):
    name: str
    revision: str
    loaded_at: datetime

    async def evaluate(self, entrypoint: str, policy_input: dict[str, Any]) -> dict[str, Any]:
        """The document at data.gateway.<entrypoint>; raises PolicyUnavailable on any failure."""
        ...

    async def ready(self) -> bool:
        """True when the engine can answer now (for /readyz)."""
        ...

    async def aclose(self) -> None: ...


def check_request_result(result: Any) -> dict[str, Any]:
    if not isinstance(result, dict) or not isinstance(result.get("allow"), bool):
        raise PolicyUnavailable("data.gateway.request did not return a boolean allow")
    if result["allow"] and not isinstance(result.get("constraints"), dict):
        raise PolicyUnavailable("data.gateway.request allowed without constraints")
    return result


def check_items_result(result: Any) -> dict[str, Any]:
    if not isinstance(result, dict) or not isinstance(result.get("allowed"), list):
        raise PolicyUnavailable("data.gateway.items did not return an allowed list")
    return result


async def self_check(engine: PolicyEngine) -> None:
    """Evaluate both entry points once so a broken policy fails at start-up, not on a request."""
    probe = {"actor": PROBE_ACTOR, "task": {"type": "startup_probe"}, "request": {}, "now": "2026-01-01T00:00:00Z"}
    try:
        check_request_result(await engine.evaluate("request", probe))
        check_items_result(
            await engine.evaluate(
                "items",
                {"actor": PROBE_ACTOR, "task": probe["task"], "constraints": {}, "subjects": [], "items": []},
            )
        )
    except PolicyUnavailable as exc:
        raise ConfigurationError(f"policy self-check failed: {exc.message}") from exc


async def load_engine(settings: Settings) -> PolicyEngine:
    """The OPA engine when an OPA URL is set, else the embedded one; both checked before use."""
    from gateway.policy.bundle import read_bundle

    bundle = read_bundle(settings.policies_dir)
    engine: PolicyEngine
    if settings.opa_url:
        from gateway.policy.opa import OpaServerEngine

        engine = await OpaServerEngine.connect(settings, bundle)
    else:
        from gateway.policy.embedded import EmbeddedEngine

        engine = EmbeddedEngine(bundle)
    await self_check(engine)
    from gateway.policy.decision_log import LoggedEngine, open_sink

    sink = open_sink(settings)
    return LoggedEngine(engine, sink) if sink is not None else engine
