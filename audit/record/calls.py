"""One record per kind of call that is not a retrieve: what its handler knows, left once on the trace.

A handler builds its call's record when it knows what the call did and leaves it with
`TraceBuilder.record`; the record fills the lineage parts of its kind and no others, exactly as the
stored rows have always held them (rows are hash-chained and signed: a record changes nothing of
the stored JSON, tests/audit/test_call_records.py holds every kind to its bytes).

Retrieve and expand are not here: a call denied or failing half-way must still leave what it
reached, so each of their stages leaves its own record as it ends (audit.record.retrieval). Nor are
the parts every call shares, which `governed` fills (channel, otel, admission).

A record whose fields are exactly its part's is that part (a subclass of it and of
`lineage.IsItsPart`): the fields are declared once, in audit.record.lineage, and the record is what
the lineage holds. The others keep their own fields: a narrower view of a part another record shares
(`WriteRecord`, `AuditSessionRecord`), or a value other code builds by position (`PolicyReloaded`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

from audit.record.lineage import (
    AuditExportRecord,
    AuditReadRecord,
    AuditSessionRecord,
    AuditVerifyRecord,
    ChangeRecord,
    DocumentRecord,
    FeedbackRecord,
    IsItsPart,
    KeysRecord,
    Lineage,
    MergeRecord,
    PolicyExplainRecord,
    PolicyImpactRecord,
    PolicyReloadRecord,
    RouteRecord,
    WriteRecord,
)


class CallRecord(Protocol):
    """A kind of call's record: frozen, and it fills the lineage parts of its kind."""

    def fill(self, lineage: Lineage) -> None: ...


def _fields(record: Any) -> dict[str, Any]:
    """A record's fields by name, for the part of the same fields (every one set, as it was stored)."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


# Writes (role `ingest`).


@dataclass(frozen=True, slots=True)
class ItemsWritten:
    """PUT /v1/items, PUT /v1/edges: counts only."""

    received: int
    created: int
    updated: int
    unchanged: int
    rejected: int

    def fill(self, lineage: Lineage) -> None:
        lineage.ingest = WriteRecord(**_fields(self))


@dataclass(frozen=True, slots=True)
class EntityWritten:
    """PUT /v1/entities/{id}: counts only."""

    created: int
    updated: int
    rejected: int

    def fill(self, lineage: Lineage) -> None:
        lineage.entity = WriteRecord(**_fields(self))


class DocumentWritten(DocumentRecord, IsItsPart):
    """PUT /v1/documents/{id}: which document, its hash, and what happened to its pieces."""

    @classmethod
    def of(cls, report: Mapping[str, Any]) -> DocumentWritten:
        """The record of a document write's report (gateway.writes.items.ingest_document)."""
        return cls(**{name: report[name] for name in cls.model_fields})

    def fill(self, lineage: Lineage) -> None:
        lineage.document = self


@dataclass(frozen=True, slots=True)
class EntityMerged:
    """POST /v1/entities/{id}/merge: which entity went into which (ids only)."""

    changed: int | bool
    entity: str
    into: str

    def fill(self, lineage: Lineage) -> None:
        lineage.merge = MergeRecord(**_fields(self))


class EntityTombstoned(ChangeRecord, IsItsPart):
    """DELETE /v1/entities/{id}: whether the mark changed anything, and how many items it hid."""

    def fill(self, lineage: Lineage) -> None:
        lineage.tombstone = self


# Key admin (role `key_admin`): key ids and counts, never a secret or its hash.


@dataclass(frozen=True, slots=True)
class KeysListed:
    count: int

    def fill(self, lineage: Lineage) -> None:
        lineage.keys = KeysRecord(listed=self.count)


@dataclass(frozen=True, slots=True)
class KeyCreated:
    key_id: str

    def fill(self, lineage: Lineage) -> None:
        lineage.keys = KeysRecord(created=self.key_id)


@dataclass(frozen=True, slots=True)
class KeyRevoked:
    key_id: str
    changed: bool
    sessions_ended: int

    def fill(self, lineage: Lineage) -> None:
        lineage.keys = KeysRecord(revoked=self.key_id, changed=self.changed, sessions_ended=self.sessions_ended)


# Audit reads (role `auditor`, over the API and the audit pages).


@dataclass(frozen=True, slots=True)
class AuditListed:
    """A list, an overview or a subject report: how many calls it counted or showed."""

    listed: int

    def fill(self, lineage: Lineage) -> None:
        lineage.audit_read = AuditReadRecord(listed=self.listed)


@dataclass(frozen=True, slots=True)
class TraceRead:
    """One trace, or its inclusion proof."""

    trace_id: str

    def fill(self, lineage: Lineage) -> None:
        lineage.audit_read = AuditReadRecord(trace=self.trace_id)


@dataclass(frozen=True, slots=True)
class AuditExported:
    """The rows as JSON lines or CSV; `report` names a report exported (a subject's calls)."""

    format: str
    report: str | None = None

    def fill(self, lineage: Lineage) -> None:
        lineage.audit_export = (
            AuditExportRecord(format=self.format, report=self.report) if self.report else AuditExportRecord(format=self.format)
        )


@dataclass(frozen=True, slots=True)
class EvidenceExported:
    """An evidence pack of [since, until): the period's instants and its rows."""

    since: str
    until: str
    rows: int

    def fill(self, lineage: Lineage) -> None:
        lineage.audit_export = AuditExportRecord(format="evidence", since=self.since, until=self.until, rows=str(self.rows))


class ChainVerified(AuditVerifyRecord, IsItsPart):
    """A verify of the tenant's chains: whether it held, over how many rows, how many are checkpointed."""

    @classmethod
    def of(cls, report: Mapping[str, Any]) -> ChainVerified:
        """The record of a verify report (audit.integrity)."""
        return cls(
            ok=report["ok"],
            rows=sum(c["rows"] for c in report["chains"].values()),
            checkpointed=report.get("checkpointed"),
            not_yet_checkpointed=report.get("not_yet_checkpointed"),
        )

    def fill(self, lineage: Lineage) -> None:
        lineage.audit_verify = self


@dataclass(frozen=True, slots=True)
class SessionOpened:
    """An audit-page sign-in: the key's id, a prefix of the session's id, when it expires."""

    key_id: str
    session: str
    expires_at: str

    def fill(self, lineage: Lineage) -> None:
        lineage.audit_session = AuditSessionRecord(**_fields(self))


@dataclass(frozen=True, slots=True)
class SessionEnded:
    """An audit-page sign-out: the session it ended, or None when there was none left to end."""

    session: str | None

    def fill(self, lineage: Lineage) -> None:
        if self.session:
            lineage.audit_session = AuditSessionRecord(ended="signed_out", session=self.session)
        else:
            lineage.audit_session = AuditSessionRecord(ended="already")


# Agent reports on one of its own retrieve calls.


@dataclass(frozen=True, slots=True)
class ReportedOn:
    """The trace an agent reports on, left as soon as it is found: a report that turns out malformed
    still names the call it was about."""

    trace_id: str

    def fill(self, lineage: Lineage) -> None:
        lineage.about = self.trace_id


@dataclass(frozen=True, slots=True)
class UsageReported:
    """The returned items the agent used, how many ids it named that the call never returned, and the
    entities the used items name."""

    used: tuple[str, ...]
    not_returned: int
    used_about: tuple[str, ...] = ()

    def fill(self, lineage: Lineage) -> None:
        lineage.used, lineage.not_returned_by_that_call = list(self.used), self.not_returned
        lineage.used_about = list(self.used_about) or None


class FeedbackGiven(FeedbackRecord, IsItsPart):
    """A rating and a keyed fingerprint of the comment (free text: it may hold anything)."""

    def fill(self, lineage: Lineage) -> None:
        lineage.feedback = self


# Policy admin (role `policy_admin`).


@dataclass(frozen=True, slots=True)
class PolicyReloaded:
    """A reload: what started it, `switched`, `unchanged` or `rejected`, the revisions, the
    candidate's errors. gateway.policy.reload.ReloadResult is one."""

    trigger: str
    status: str
    revision: str  # in force after the reload
    previous: str
    candidate: str | None = None
    errors: tuple[str, ...] = ()
    ms: float = 0.0

    def part(self) -> PolicyReloadRecord:
        return PolicyReloadRecord(**{**_fields(self), "errors": list(self.errors), "ms": round(self.ms, 3)})

    def fill(self, lineage: Lineage) -> None:
        lineage.policy_reload = self.part()


class PolicyExplained(PolicyExplainRecord, IsItsPart):
    """An explain: the hypothetical actor's principal and task type, how many items, the revisions."""

    def fill(self, lineage: Lineage) -> None:
        lineage.policy_explain = self


class PolicyImpactRun(PolicyImpactRecord, IsItsPart):
    """An impact run: the candidate's revision, the calls replayed, the decisions that flip, the items
    newly allowed and newly denied."""

    @classmethod
    def of(cls, report: Mapping[str, Any]) -> PolicyImpactRun:
        """The record of an impact report (gateway.policy_tools.impact)."""
        return cls(
            candidate_revision=report["candidate_revision"],
            replayed=report["replayed"],
            flips=sum(g["count"] for groups in report["flips"].values() for g in groups),
            newly_allowed=report["items"]["newly_allowed"]["count"],
            newly_denied=report["items"]["newly_denied"]["count"],
        )

    def fill(self, lineage: Lineage) -> None:
        lineage.policy_impact = self


# Calls of no handler of their own.


class Unrouted(RouteRecord, IsItsPart):
    """A call no route took (404, 405): its method and a keyed fingerprint of its path, never the path."""

    def fill(self, lineage: Lineage) -> None:
        lineage.route = self


@dataclass(frozen=True, slots=True)
class McpMessage:
    """An MCP message that is no tool call (`initialize`, `tools/list`, a refused frame): its channel."""

    channel: str = "mcp"

    def fill(self, lineage: Lineage) -> None:
        lineage.channel = self.channel
