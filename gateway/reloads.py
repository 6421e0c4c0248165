"""Policy reloads outside a request: on SIGHUP and by polling the source, each one audited.

With several worker processes (`gateway serve --workers N`), the supervisor passes SIGHUP on to
every worker, and a `POST /v1/policy/reload` answered by one worker sends SIGHUP to the supervisor,
so every worker switches (gateway/cli.py `serve`). Replicas on one PostgreSQL (separate processes,
separate hosts) hear of a switch through LISTEN/NOTIFY (gateway/policy/broadcast.py): the replica
that switched announces the revision, and each of the others reloads from its own source.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import anyio
import anyio.to_thread

from audit.trace import TraceBuilder, new_trace_id
from core.errors import AuditWriteError
from core.instants import utc_now
from gateway.context import GatewayContext
from gateway.policy import broadcast
from gateway.policy.reload import ReloadResult

log = logging.getLogger("gateway.policy")

SUPERVISOR = "GATEWAY_SUPERVISOR_PID"  # set by `gateway serve --workers N` for its workers
STATUS = {"switched": 200, "unchanged": 200, "rejected": 422}
FOLLOWING = ("notify", "reconnect")  # triggers that follow another replica's switch: not announced again
# When this replica's source does not have the announced revision yet (a ConfigMap reaches each pod
# in its own time), look again after these pauses, then give up until the next trigger.
CHASE_S = (1, 2, 4, 8, 15, 30, 60)


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
    if result.status == "switched" and trigger not in FOLLOWING:
        await announce(context, result.revision, siblings=trigger != "sighup")  # a SIGHUP reached every worker already
    return result


async def announce(context: GatewayContext, revision: str, siblings: bool = True) -> None:
    """After a switch to `revision`: the sibling workers of this process, and every replica on the
    database. (The revision is passed in: inside a call, `context.policy` is pinned to the old one.)"""
    if siblings:
        tell_siblings()
    if broadcast.available(context.store):
        try:
            await anyio.to_thread.run_sync(broadcast.announce, context.store, revision)
        except Exception as exc:  # the switch stands; the others catch up on their next reload
            log.warning("could not tell the other replicas of the new policy revision: %s", type(exc).__name__)


async def follow(context: GatewayContext) -> None:
    """On PostgreSQL: reload when another replica announces a revision this one does not serve,
    and once after every reconnect; runs until cancelled. Each switch is audited here."""
    if not broadcast.available(context.store):
        return

    async def caught_up() -> None:
        await _reload_quietly(context, "reconnect")

    chase = _Chase(context)
    async with anyio.create_task_group() as group:
        group.start_soon(chase.run)
        await broadcast.listen(context.store, chase.heard, caught_up)


class _Chase:
    """The newest revision announced, chased until this replica's source has it. A newer
    announcement replaces the one being chased, so a bogus one delays nothing real."""

    def __init__(self, context: GatewayContext) -> None:
        self.context = context
        self.revision = ""
        self.news = anyio.Event()

    async def heard(self, revision: str) -> None:
        self.revision = revision
        self.news.set()

    async def run(self) -> None:
        while True:
            await self.news.wait()
            self.news = anyio.Event()
            await self._chase(self.revision)

    async def _chase(self, revision: str) -> None:
        for pause in (0, *CHASE_S):
            with anyio.move_on_after(pause):
                await self.news.wait()
            if self.news.is_set() or revision == self.context.policy.revision:  # newer news, or nothing to do
                return
            result = await _reload_quietly(self.context, "notify")
            if result is None or result.status != "unchanged":  # switched, or refused (and audited): done
                return
        log.warning(
            "the policy source still lacks the revision another replica announced; %s serves on", self.context.policy.revision
        )


async def _reload_quietly(context: GatewayContext, trigger: str) -> ReloadResult | None:
    try:
        return await reload_and_audit(context, trigger)
    except Exception as exc:  # a reload never stops the listener
        log.error("policy reload (%s) failed: %s", trigger, type(exc).__name__)
        return None


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
