"""Writes and reads audit traces. Imports nothing from HTTP."""

from __future__ import annotations

import secrets
from dataclasses import fields
from typing import Any

import anyio.to_thread
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlmodel import Session, select

from audit.chain import append
from audit.tables import AuditTrace
from audit.trace import Trace
from gateway.db import writer
from gateway.errors import AuditWriteError


APPEND_ATTEMPTS = 20


class AuditStore:
    def __init__(self, engine: Engine, key: bytes | None = None) -> None:
        self.engine = engine
        # The key of the trace's fingerprints; without one given, a key of this process only.
        self.key = key or secrets.token_bytes(32)

    def write_sync(self, trace: Trace) -> None:
        """Append the trace to its tenant's chain. Two writers racing for one position: the loser's
        insert fails on the unique (chain, seq) index and it appends again on the new head."""
        # Trace and the table share their field names: the row is the frozen value, stored.
        values = {f.name: getattr(trace, f.name) for f in fields(trace)}
        for attempt in range(APPEND_ATTEMPTS):
            try:
                with writer(self.engine).begin() as conn:
                    append(conn, values)
                return
            except IntegrityError as exc:
                if attempt == APPEND_ATTEMPTS - 1:
                    raise AuditWriteError("the audit trace could not be written; the call was not answered") from exc
            except SQLAlchemyError as exc:
                raise AuditWriteError("the audit trace could not be written; the call was not answered") from exc

    async def write(self, trace: Trace) -> None:
        await anyio.to_thread.run_sync(self.write_sync, trace)

    def get(self, trace_id: str) -> dict[str, Any] | None:
        with Session(self.engine) as session:
            row = session.exec(select(AuditTrace).where(AuditTrace.trace_id == trace_id)).first()
            return None if row is None else _as_dict(row)


def _as_dict(row: AuditTrace) -> dict[str, Any]:
    return {**row.model_dump(exclude={"pk"}), "created_at": row.created_at.isoformat()}


def load_or_create_key(engine: Engine) -> bytes:
    """The store's audit key: read it, or create it once (a concurrent creator's key wins the race)."""
    from audit.tables import AuditSecret

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
