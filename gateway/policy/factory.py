"""Builds the configured policy engine: embedded Rego or an OPA server, self-checked, logged, and
switchable to a new revision while it serves (gateway/policy/reload.py)."""

from __future__ import annotations

import anyio.to_thread

from gateway.policy.base import PolicyEngine, self_check
from gateway.policy.bundle import PolicyBundle
from gateway.policy.decision_log import DecisionSink, LoggedEngine, open_sink
from gateway.policy.embedded import EmbeddedEngine
from gateway.policy.opa import OpaServerEngine
from gateway.policy.reload import ReloadingEngine
from gateway.policy.signatures import VerificationKey
from gateway.policy.source import PolicySource
from gateway.policy.tested import refuse_diverging
from gateway.settings import PolicySettings


def policy_source(settings: PolicySettings) -> PolicySource:
    """GATEWAY_POLICY_BUNDLE (a bundle file or URL) when set, else the policies directory."""
    key = (
        VerificationKey.load(settings.policy_bundle_key, settings.policy_bundle_key_alg, settings.policy_bundle_scope or "")
        if settings.policy_bundle_key
        else None
    )
    return PolicySource(settings.policy_bundle or str(settings.policies_dir), key)


async def load_engine(settings: PolicySettings) -> ReloadingEngine:
    """The OPA engine when an OPA URL is set, else the embedded one; both checked before use."""
    source = policy_source(settings)
    bundle = await source.fetch()
    assert bundle is not None  # the first fetch has no ETag to match
    sink = open_sink(settings)

    async def build(candidate: PolicyBundle) -> PolicyEngine:
        return await build_engine(settings, candidate, sink)

    return ReloadingEngine(await build(bundle), bundle, build, source, sink)


async def build_engine(settings: PolicySettings, bundle: PolicyBundle, sink: DecisionSink | None) -> PolicyEngine:
    """One revision's engine, probed on both entry points (the probe is not logged as a decision);
    ConfigurationError when it fails to compile or to answer the probe. For an OPA server that gets the policies pushed, the
    candidate is first compiled and probed in a policy process of its own, so a broken one is
    refused before OPA sees it."""
    engine: PolicyEngine
    if settings.opa_url:
        if settings.opa_push_policies:
            from gateway.policy.candidate import open_candidate

            await (await open_candidate(bundle)).aclose()
        engine = await OpaServerEngine.connect(settings, bundle)
    else:
        if settings.policy_compiled:  # the policy runs where it was tested: its own tests, on the compiled path
            await anyio.to_thread.run_sync(refuse_diverging, bundle)
        engine = await anyio.to_thread.run_sync(lambda: EmbeddedEngine(bundle, compiled=settings.policy_compiled))
    try:
        await self_check(engine)
    except BaseException:
        await engine.aclose()
        raise
    return LoggedEngine(engine, sink, owns_sink=False) if sink is not None else engine
