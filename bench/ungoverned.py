"""Bench-only stand-ins for governance: a recorder of what the policy was asked, an allow-all
engine, and a pipeline that skips verify. They exist only here, to measure what governance costs;
the service has no setting or code path that turns its policy off.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from core.records import Record
from core.request import Task
from gateway.pipeline.pipeline import Pipeline
from gateway.pipeline.stages import StageTimer
from gateway.policy.base import PolicyEngine
from gateway.policy.decide import Constraints
from gateway.policy.verify import Verdict


class RecordingEngine:
    """The real engine, remembering the last input and answer of each entry point (for the floors,
    which evaluate the same input with regorus in-process). Costs two dict stores per evaluation."""

    def __init__(self, engine: PolicyEngine) -> None:
        self.engine = engine
        self.inputs: dict[str, dict[str, Any]] = {}
        self.results: dict[str, dict[str, Any]] = {}

    @property
    def name(self) -> str:
        return self.engine.name

    @property
    def revision(self) -> str:
        return self.engine.revision

    @property
    def loaded_at(self) -> datetime:
        return self.engine.loaded_at

    async def evaluate(self, entrypoint: str, policy_input: dict[str, Any]) -> dict[str, Any]:
        result = await self.engine.evaluate(entrypoint, policy_input)
        self.inputs[entrypoint], self.results[entrypoint] = policy_input, result
        return result

    async def ready(self) -> bool:
        return await self.engine.ready()

    async def aclose(self) -> None:
        """The real engine belongs to the context that built it."""


class AllowAllEngine:
    """Allows every request with the constraints the real policy gave this actor and task once
    (same shape, same filters, so the connectors do the same work), stamped with the call's `now`."""

    name = "bench-allow-all"
    revision = "bench-allow-all"

    def __init__(self, captured: dict[str, Any], loaded_at: datetime) -> None:
        if not captured.get("allow") or not isinstance(captured.get("constraints"), dict):
            raise SystemExit("the real policy did not allow the benchmark's request; nothing to stand in for")
        self.captured = captured
        self.loaded_at = loaded_at

    async def evaluate(self, entrypoint: str, policy_input: dict[str, Any]) -> dict[str, Any]:
        if entrypoint != "request":
            raise RuntimeError("the ungoverned pipeline never verifies")
        constraints = copy.copy(self.captured["constraints"])
        constraints["valid_at"] = policy_input["now"]
        return {"allow": True, "reasons": [], "constraints": constraints}

    async def ready(self) -> bool:
        return True

    async def aclose(self) -> None:
        pass


class UngovernedPipeline(Pipeline):
    """The service's pipeline with verify skipped: every candidate survives, nothing is read for it."""

    async def verify(
        self,
        actor: Any,
        task: Task,
        constraints: Constraints,
        records: list[Record],
        timer: StageTimer,
        earlier: Verdict | None = None,
    ) -> Verdict:
        timer.add("verify_ms", 0.0)
        return Verdict(frozenset(record.id for record in records), (), 0.0)
