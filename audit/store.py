"""Writes and reads audit traces. Imports nothing from HTTP."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session, select

from audit.tables import AuditTrace
from audit.trace import Trace
from gateway.db import writer
from gateway.errors import AuditWriteError


class AuditStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def write_sync(self, trace: Trace) -> None:
        row = AuditTrace(
            trace_id=trace.trace_id,
            created_at=trace.created_at,
            tenant=trace.tenant,
            actor=trace.actor,
            endpoint=trace.endpoint,
            status_code=trace.status_code,
            decision=trace.decision,
            policy_engine=trace.policy_engine,
            policy_revision=trace.policy_revision,
            error_code=trace.error_code,
            lineage=trace.lineage,
        )
        try:
            with Session(writer(self.engine)) as session:
                session.add(row)
                session.commit()
        except SQLAlchemyError as exc:
            raise AuditWriteError("the audit trace could not be written; the call was not answered") from exc

    async def write(self, trace: Trace) -> None:
        await anyio.to_thread.run_sync(self.write_sync, trace)

    def get(self, trace_id: str) -> dict[str, Any] | None:
        with Session(self.engine) as session:
            row = session.exec(select(AuditTrace).where(AuditTrace.trace_id == trace_id)).first()
            return None if row is None else _as_dict(row)


def _as_dict(row: AuditTrace) -> dict[str, Any]:
    return {
        "trace_id": row.trace_id,
        "created_at": row.created_at.isoformat(),
        "tenant": row.tenant,
        "actor": row.actor,
        "endpoint": row.endpoint,
        "status_code": row.status_code,
        "decision": row.decision,
        "policy_engine": row.policy_engine,
        "policy_revision": row.policy_revision,
        "error_code": row.error_code,
        "lineage": row.lineage,
    }
