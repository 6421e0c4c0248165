"""The policy engine interface and the start-up self check shared by both engines."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from core.errors import ConfigurationError, PolicyUnavailable

ENTRYPOINTS = {"request": "gateway/request", "items": "gateway/items"}

PROBE_ACTOR = {"id": "startup-probe", "tenant": "startup-probe", "roles": [], "groups": [], "clearance": "public"}


class PolicyEngine(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def revision(self) -> str: ...

    @property
    def loaded_at(self) -> datetime: ...

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
