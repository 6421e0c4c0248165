"""Health, readiness and the loaded policy."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse

from api.policy import PolicyInfo, PolicyRejected, PolicyReload, ReloadResult
from api.service import ErrorDetail, Health, Readiness
from core.errors import Forbidden
from core.store import store_reachable
from gateway.http.operation import POLICY, Operation, json_answer, ref
from gateway.http.traced import Call, requires, serving
from gateway.policy.reload import reload_and_announce


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse(Health(status="ok").wire())


async def readyz(request: Request) -> JSONResponse:
    context = request.app.state.context
    load = context.admission.saturation()
    checks = {
        "policy": "ok" if await context.policy.ready() else f"{context.policy.name} engine not answering",
        "store": "ok" if await anyio.to_thread.run_sync(store_reachable, context.store) else "unreachable",
        # Honest under a flood: with a full queue's worth of calls waiting, the process asks the
        # balancer for no more; every seat busy with a short queue is normal work, not a reason.
        "admission": "ok" if not load["saturated"] else f"saturated: {load['queued']} units waiting for {load['capacity']} seats",
    }
    checkpointer = context.audit.checkpointer
    if checkpointer is not None:  # a signer that started without its checkpoints vouches for nothing it found
        checks["audit_checkpoints"] = checkpointer.readiness()
    ready = all(v == "ok" for v in checks.values())
    # The backlog as each worker last counted it (every few seconds while it works): no query here.
    workers = (context.connectors.semantic.worker, context.privacy.worker)
    backlog = {w.name: w.lag for w in workers if w is not None}
    embedder = context.connectors.semantic.embedder  # the one model of the index (vectors of another are never read)
    semantic = (
        {"model": embedder.model_id, "dims": embedder.dims, **engine_readiness(context.connectors.semantic.connector)}
        if embedder is not None
        else {"unavailable": context.connectors.semantic.unavailable}
    )
    return JSONResponse(
        Readiness(
            status="ready" if ready else "not ready",
            checks=checks,
            admission=load,
            background=backlog,
            semantic=semantic,
            lexical=engine_readiness(context.connectors.lexical),
        ).wire(),
        status_code=200 if ready else 503,
    )


def engine_readiness(connector: object) -> dict[str, Any]:
    """A search engine's state (its indexes built and building), when the connector reports one."""
    readiness = getattr(connector, "readiness", None)
    return dict(readiness()) if callable(readiness) else {}


@requires()
async def _policy(call: Call) -> tuple[int, PolicyInfo]:
    policy = call.context.policy
    last = policy.last.as_json() if policy.last is not None else None
    body = {
        "engine": policy.name,
        "revision": policy.revision,
        "label": policy.bundle.label,
        "loaded_at": policy.loaded_at.isoformat(),
        "last_reload": last,
    }
    # Where the policies are read from (a server path, a bundle server) is the platform's business:
    # any other caller, a tenant's own policy_admin included, learns only which revision decides its calls.
    if _platform_admin(call):
        body["source"] = policy.source.location if not policy.source.remote else "bundle server"
    return 200, PolicyInfo.model_validate(body)


def _platform_admin(call: Call) -> bool:
    return "policy_admin" in call.actor.roles and call.actor.tenant == call.context.settings.platform_tenant


@requires("policy_admin")
async def _reload(call: Call) -> tuple[int, PolicyReload | PolicyRejected]:
    """Read the policy source again and switch to its revision when it compiles and passes the
    probe; a broken one is refused with its errors (422) while the old revision serves on. The policy
    decides every tenant's calls, so only a policy_admin of the platform tenant may reload it."""
    if not _platform_admin(call):
        raise Forbidden("reloading the policy needs a policy_admin key of the platform tenant (GATEWAY_PLATFORM_TENANT)")
    # A switch reaches the other workers, and the other replicas on PostgreSQL; this call's trace records it.
    result = await reload_and_announce(call.context, "http", own_row=False)
    call.trace.record(result)
    if result.status == "rejected":
        call.trace.error_code = "policy_rejected"
        message = f"the new policy revision was refused; {result.revision} keeps serving"
        detail = ErrorDetail(code="policy_rejected", message=message, trace_id=call.trace.trace_id)
        return 422, PolicyRejected(error=detail, reload=ReloadResult.model_validate(result.as_json()))
    return 200, PolicyReload(reload=ReloadResult.model_validate(result.as_json()))


# The operations this module serves (gateway/http/operation.py).
OPERATIONS = (
    Operation(
        "/healthz",
        "get",
        healthz,
        "The process is up",
        "operations",
        {"200": json_answer("Up", ref(Health), traced=False)},
        auth=None,
    ),
    Operation(
        "/readyz",
        "get",
        readyz,
        "Policy loaded and store reachable",
        "operations",
        {
            "200": json_answer("Ready", ref(Readiness), traced=False),
            "503": json_answer("Not ready: `checks` names the failing part", ref(Readiness), traced=False),
        },
        auth=None,
    ),
    POLICY.operation(
        "GET /v1/policy: The loaded policy revision",
        serving("policy", _policy),
        json_answer("The engine and revision", ref(PolicyInfo)),
    ),
    POLICY.operation(
        "POST /v1/policy/reload: Switch to the policy source's revision now",
        serving("policy_reload", _reload),
        json_answer("Switched, or unchanged", ref(PolicyReload)),
        errors={
            403: "the key is not a `policy_admin` of the platform tenant (`GATEWAY_PLATFORM_TENANT`)",
            422: "the new revision was refused (`policy_rejected`; `reload.errors` says why); the old one serves on",
        },
        description="Reads the policy directory or bundle again; a revision that compiles and passes the probe replaces "
        "the one in force atomically, on every worker; calls in flight finish on the revision they started with.",
    ),
)
