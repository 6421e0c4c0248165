"""One call's audit record: built during the call, frozen when it ends."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from sqlalchemy.engine import Connection

from audit.record.kinds import kind_of
from audit.record.lineage import Lineage
from audit.record.parts import Fingerprint
from audit.record.records import CallRecord


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
    """Mutable only inside one request; `freeze` hands the audit store a frozen Trace.

    The call's records are left on it as they are made (`record`) and never changed after: its
    lineage is the record of its endpoint's kind assembled from them (audit.record.kinds), and its
    row's decision is that record's (`decision`), or `error` once the call failed on the gateway's
    side (`failed`)."""

    trace_id: str
    endpoint: str
    created_at: datetime
    tenant: str | None = None
    actor: str | None = None
    policy_engine: str | None = None
    policy_revision: str | None = None
    error_code: str | None = None
    key: bytes = field(default=b"", repr=False)  # the audit key, for fingerprints
    # Writes of the call that commit in the transaction of its row, and only if the call succeeds
    # (the cursor a retrieve issues): one write transaction per call, and no cursor of an answer
    # that was never sent.
    writes: list[Callable[[Connection], None]] = field(default_factory=list, repr=False)
    _parts: dict[str, object] = field(default_factory=dict, init=False, repr=False)  # the parts left, by key
    _began: bool = field(default=False, init=False)
    _failed: bool = field(default=False, init=False)

    def record(self, record: CallRecord) -> None:
        """Leave a record: the handler of a call that is not a retrieve builds its kind's once, when it
        knows what the call did (audit.record.calls); a retrieve's or an expand's stages each leave
        theirs as they end (audit.record.retrieval); the governed path leaves what every call has
        (audit.record.lineage). A part left again is replaced by the later record's, but `timings`,
        whose later figures replace the earlier of the same stage and add the others."""
        for key, value in record.parts().items():
            earlier = self._parts.get(key)
            if key == "timings" and isinstance(earlier, Mapping) and isinstance(value, Mapping):
                value = {**earlier, **value}
            self._parts[key] = value

    @property
    def lineage(self) -> Lineage:
        """The lineage so far: the record of the endpoint's kind, of the parts left."""
        return kind_of(self.endpoint).assembled(self._parts)

    def begin(self) -> None:
        """The call passed its checks and its handler runs: from here its row carries the decision of
        its kind (a review `read`, a write `write`)."""
        self._began = True

    def failed(self, *, unless: Collection[str] = ()) -> None:
        """The call failed on the gateway's side: its row's decision is `error`, unless the decision
        it had reached is one of `unless` (then it stays)."""
        if self.decision not in unless:
            self._failed = True

    @property
    def decision(self) -> str:
        return "error" if self._failed else self.lineage.decided(self._began)

    def fingerprint(self, text: str) -> Fingerprint:
        if not self.key:
            raise ValueError("no audit key: fingerprints are always keyed")
        return fingerprint(text, self.key)

    def freeze(self, status_code: int) -> Trace:
        lineage = self.lineage
        return Trace(
            trace_id=self.trace_id,
            created_at=self.created_at,
            endpoint=self.endpoint,
            status_code=status_code,
            decision="error" if self._failed else lineage.decided(self._began),
            tenant=self.tenant,
            actor=self.actor,
            policy_engine=self.policy_engine,
            policy_revision=self.policy_revision,
            error_code=self.error_code,
            lineage=lineage.to_json(),
        )
