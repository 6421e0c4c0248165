"""Builds the configured policy engine: embedded Rego or an OPA server, self-checked, logged."""

from __future__ import annotations

from gateway.policy.base import PolicyEngine, self_check
from gateway.policy.bundle import read_bundle
from gateway.policy.decision_log import LoggedEngine, open_sink
from gateway.policy.embedded import EmbeddedEngine
from gateway.policy.opa import OpaServerEngine
from gateway.settings import Settings


async def load_engine(settings: Settings) -> PolicyEngine:
    """The OPA engine when an OPA URL is set, else the embedded one; both checked before use."""
    bundle = read_bundle(settings.policies_dir)
    engine: PolicyEngine
    if settings.opa_url:
        engine = await OpaServerEngine.connect(settings, bundle)
    else:
        engine = EmbeddedEngine(bundle)
    await self_check(engine)
    sink = open_sink(settings)
    return LoggedEngine(engine, sink) if sink is not None else engine
