"""Policy reloads outside a request: on SIGHUP and by polling the source, each one audited.

With several worker processes (`gateway serve --workers N`), the supervisor passes SIGHUP on to
every worker, and a `POST /v1/policy/reload` answered by one worker sends SIGHUP to the supervisor,
so every worker switches (gateway/cli.py `serve`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import anyio

from audit.trace import TraceBuilder, new_trace_id
from core.errors import AuditWriteError
from core.instants import utc_now
from gateway.context import GatewayContext
from gateway.policy.reload import ReloadResult

log = logging.getLogger("gateway.policy")

SUPERVISOR = "GATEWAY_SUPERVISOR_PID"  # set by `gateway serve --workers N` for its workers
STATUS = {"switched": 200, "unchanged": 200, "rejected": 422}


async def reload_and_audit(context: GatewayContext, trigger: str) -> ReloadResult:
    """Reload; a switch or a rejection leaves an audit row of its own (endpoint `policy_reload`)."""
    result = await context.policy.reload(trigger)
    if result.status != "unchanged":
        trace = TraceBuilder(new_trace_id(), "policy_reload", utc_now(), key=context.audit.key)
        trace.policy_engine, trace.policy_revision = context.policy.name, result.revision
        trace.decision = "none"
        trace.error_code = "policy_rejected" if result.status == "rejected" else None
        trace.lineage.policy_reload = result.as_json()
        try:
            await context.audit.write(trace.freeze(STATUS[result.status]))
        except AuditWriteError:
            log.error("audit write failed for the policy reload %s", trace.trace_id)
    return result


def tell_siblings() -> None:
    """Under `gateway serve --workers N`: ask the supervisor to pass SIGHUP to every worker."""
    supervisor = os.environ.get(SUPERVISOR)
    if supervisor and supervisor.isdigit() and int(supervisor) != os.getpid():
        try:
            os.kill(int(supervisor), signal.SIGHUP)
        except OSError as exc:
            log.warning("could not ask the other workers to reload: %s", type(exc).__name__)


async def watch(context: GatewayContext) -> None:
    """Reload on SIGHUP, and every GATEWAY_POLICY_POLL_SECONDS when polling; runs until cancelled."""
    interval = context.settings.policy_poll_interval
    hangup = anyio.Event()
    loop = asyncio.get_running_loop()

    def on_hangup() -> None:
        nonlocal hangup
        hangup.set()

    try:
        loop.add_signal_handler(signal.SIGHUP, on_hangup)
        handling = True
    except (RuntimeError, ValueError, NotImplementedError):  # not the main thread (tests), or no signals here
        handling = False
    try:
        while True:
            trigger = "poll"
            with anyio.move_on_after(interval if interval is not None else float("inf")):
                await hangup.wait()
                trigger = "sighup"
            hangup = anyio.Event()
            try:
                await reload_and_audit(context, trigger)
            except Exception as exc:  # a reload never stops the watcher
                log.error("policy reload (%s) failed: %s", trigger, type(exc).__name__)
    finally:
        if handling:
            loop.remove_signal_handler(signal.SIGHUP)
