"""One call's audit record: built during the call, frozen when it ends."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from sqlalchemy.engine import Connection

from audit.record.calls import CallRecord
from audit.record.lineage import Fingerprint, Lineage


def new_trace_id() -> str:
    return "tr_" + secrets.token_hex(12)


def fingerprint(text: str, key: bytes) -> Fingerprint:
    """A keyed hash (HMAC-SHA256) and a length stand in for text the trace must not hold. Keyed, so a
    short value (an email, a name) cannot be recovered by hashing guesses without the key."""
    digest = hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()[:32]
    return Fingerprint(hmac=digest, length=len(text))


@dataclass(frozen=True, slots=True)
class Trace:
    """What one call leaves: the first columns of its audit row, in the table's order
    (core.audit_tables). The chain adds the rest (audit.chain.StoredTrace, which is this and more)."""

    trace_id: str
    created_at: datetime
    tenant: str | None
    actor: str | None
    endpoint: str
    status_code: int
    decision: str
    policy_engine: str | None
    policy_revision: str | None
    error_code: str | None
    lineage: dict[str, Any]  # the stored form of a Lineage (audit.record.lineage)


@dataclass(slots=True)
class TraceBuilder:
    """Mutable only inside one request; `freeze` hands the audit store a frozen Trace."""

    trace_id: str
    endpoint: str
    created_at: datetime
    tenant: str | None = None
    actor: str | None = None
    decision: str = "none"
    policy_engine: str | None = None
    policy_revision: str | None = None
    error_code: str | None = None
    lineage: Lineage = field(default_factory=Lineage)
    key: bytes = field(default=b"", repr=False)  # the audit key, for fingerprints
    # Writes of the call that commit in the transaction of its row, and only if the call succeeds
    # (the cursor a retrieve issues): one write transaction per call, and no cursor of an answer
    # that was never sent.
    writes: list[Callable[[Connection], None]] = field(default_factory=list, repr=False)

    def record(self, record: CallRecord) -> None:
        """Leave a record: the handler of a call that is not a retrieve builds its kind's once, when it
        knows what the call did (audit.record.calls); a retrieve's or an expand's stages each leave
        theirs as they end (audit.record.retrieval). It fills its lineage parts and no others."""
        record.fill(self.lineage)

    def fingerprint(self, text: str) -> Fingerprint:
        if not self.key:
            raise ValueError("no audit key: fingerprints are always keyed")
        return fingerprint(text, self.key)

    def freeze(self, status_code: int) -> Trace:
        return Trace(
            trace_id=self.trace_id,
            created_at=self.created_at,
            endpoint=self.endpoint,
            status_code=status_code,
            decision=self.decision,
            tenant=self.tenant,
            actor=self.actor,
            policy_engine=self.policy_engine,
            policy_revision=self.policy_revision,
            error_code=self.error_code,
            lineage=self.lineage.to_json(),
        )
