"""Writing the calls' rows onto their chains with group commit, and reading one back. Imports nothing from HTTP."""

from __future__ import annotations

import secrets
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

import anyio.to_thread
from sqlalchemy import select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from audit.chain.rows import StoredTrace, audit_trace
from audit.chain.writes import Appended, Rollup, add_to_rollup, append
from audit.record import Trace
from core.audit_tables import AuditSecret
from core.errors import AuditWriteError
from core.store import DISK_FULL, disk_full, writer

APPEND_ATTEMPTS = 20
GROUP_LIMIT = 128  # traces committed together at most
NOT_WRITTEN = "the audit trace could not be written; the call was not answered"


@dataclass(slots=True)
class _Pending:
    """One trace waiting for its commit; `done` and `error` are set by whichever writer committed it."""

    trace: Trace
    also: tuple[Callable[[Connection], None], ...] = ()  # the call's other writes, in the same transaction
    done: bool = False
    error: AuditWriteError | None = None


class ChainWriter:
    """Appends traces to their tenant chains, with group commit: writers that arrive while another
    is committing queue up, and the next one to get the turn commits them all in one transaction
    (one lock, one sync to disk) instead of each taking its own. Every writer still returns only
    once its own row is committed, so a call is never answered without its record. With a seal key
    every row carries its seal; `appended` hears of each committed group (the checkpointer counts
    towards its next checkpoint)."""

    def __init__(
        self,
        engine: Engine,
        seal_key: bytes | None = None,
        appended: Callable[[list[Appended]], None] | None = None,
    ) -> None:
        self.engine = engine
        self._seal_key = seal_key
        self._appended = appended
        self._queue: list[_Pending] = []
        self._queue_lock = threading.Lock()
        self._turn = threading.Lock()  # one committer at a time

    def write_sync(self, trace: Trace, also: Sequence[Callable[[Connection], None]] = ()) -> None:
        """Append the trace to its tenant's chain, with `also` (the call's own writes) in the same
        transaction; raises AuditWriteError when it could not be, and then none of them is written."""
        pending = _Pending(trace, tuple(also))
        with self._queue_lock:
            self._queue.append(pending)
        with self._turn:
            while not pending.done:  # nobody committed it while this writer waited: commit the queue
                with self._queue_lock:
                    group, self._queue = self._queue[:GROUP_LIMIT], self._queue[GROUP_LIMIT:]
                self._commit(group)
        if pending.error is not None:
            raise pending.error

    def _commit(self, group: list[_Pending]) -> None:
        """The whole group in one transaction; if that fails for a reason other than a lost race for
        the head, each trace alone, so one bad trace never takes the others down with it."""
        try:
            self._append(group)
        except AuditWriteError:
            for pending in group:
                try:
                    self._append([pending])
                except AuditWriteError as exc:
                    pending.error = exc
        for pending in group:
            pending.done = True

    def _append(self, group: list[_Pending]) -> None:
        """Two writers (processes, replicas) racing for one position: the loser's insert fails on the
        unique (chain, seq) index and it appends again on the new head."""
        for attempt in range(APPEND_ATTEMPTS):
            try:
                with writer(self.engine).begin() as conn:
                    for pending in group:
                        for write in pending.also:
                            write(conn)
                    rollup: Rollup = Counter()  # the group's overview counts, one upsert per key
                    appended: list[Appended] = [append(conn, pending.trace, self._seal_key, rollup) for pending in group]
                    add_to_rollup(conn, rollup)
                if self._appended is not None:
                    self._appended(appended)
                return
            except IntegrityError as exc:
                if attempt == APPEND_ATTEMPTS - 1:
                    raise AuditWriteError(NOT_WRITTEN) from exc
            except Exception as exc:  # the store, or a row it could not take: either way no record, no answer
                raise AuditWriteError(f"{NOT_WRITTEN} ({DISK_FULL})" if disk_full(exc) else NOT_WRITTEN) from exc

    async def write(self, trace: Trace, also: Sequence[Callable[[Connection], None]] = ()) -> None:
        await anyio.to_thread.run_sync(self.write_sync, trace, also)

    def get(self, trace_id: str) -> StoredTrace | None:
        """One row, by its trace id, of any chain (the service's own look-up, not a reviewer's)."""
        with self.engine.connect() as conn:
            found = conn.execute(select(audit_trace).where(audit_trace.c.trace_id == trace_id)).first()
        return StoredTrace.of(found._mapping) if found is not None else None


def load_or_create_key(engine: Engine) -> bytes:
    """The store's audit key: read it, or create it once (a concurrent creator's key wins the race)."""
    for _ in range(3):
        with Session(engine) as session:
            found = session.get(AuditSecret, "fingerprint")
            if found is not None:
                return bytes.fromhex(found.value)
        try:
            with Session(writer(engine)) as session:
                session.add(AuditSecret(name="fingerprint", value=secrets.token_hex(32)))
                session.commit()
        except IntegrityError:
            continue
    raise AuditWriteError("the audit key could not be read or created")
