"""The records of the calls that are not a retrieve: what a handler knows, left once on the trace.

A handler builds its call's record when it knows what the call did and leaves it with
`TraceBuilder.record`. Each record is the part it stores (audit.record.records): `KeyCreated` is the
`keys` part of a key creation, its fields the part's keys, so the stored rows are exactly what they
have always been (rows are hash-chained and signed: tests/audit/test_call_records.py holds every
kind to its bytes). The lineage of each kind of call (audit.record.kinds) is made of these.

Retrieve and expand are not here: a call denied or failing half-way must still leave what it
reached, so each of their stages leaves its own record as it ends (audit.record.retrieval). Nor are
the parts every call has, which the governed path leaves (audit.record.lineage: channel, otel,
admission).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from audit.record.parts import Fingerprint, Ms
from audit.record.records import Part, Parts

# Writes (role `ingest`).


class ItemsWritten(Part):
    """PUT /v1/items, PUT /v1/edges: counts only."""

    key = "ingest"
    received: int | None = None
    created: int = 0
    updated: int = 0
    unchanged: int | None = None
    rejected: int = 0


class EntityWritten(Part):
    """PUT /v1/entities/{id}: counts only."""

    key = "entity"
    created: int = 0
    updated: int = 0
    rejected: int = 0


class DocumentWritten(Part):
    """PUT /v1/documents/{id}: which document, its hash, and what happened to its pieces."""

    key = "document"
    document: str
    sha256: str
    changed: bool
    pieces: int
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0

    @classmethod
    def of(cls, report: Mapping[str, Any]) -> DocumentWritten:
        """The record of a document write's report (gateway.writes.items.ingest_document)."""
        return cls(**{name: report[name] for name in cls.model_fields})


class EntityMerged(Part):
    """POST /v1/entities/{id}/merge: which entity went into which (ids only). The subject report
    follows these from the chain as well as from the entity envelopes, so an envelope edited in the
    database cannot take a merged id out of a data subject's report."""

    key = "merge"
    changed: int | bool = 0
    entity: str | None = None
    into: str | None = None


class EntityTombstoned(Part):
    """DELETE /v1/entities/{id}: whether the mark changed anything, and how many items it hid."""

    key = "tombstone"
    changed: int | bool = 0
    hidden_items: int | None = None


# Key admin (role `key_admin`): key ids and counts, never a secret or its hash.


class KeysListed(Part):
    key = "keys"
    listed: int | None = None


class KeyCreated(Part):
    key = "keys"
    created: str | None = None  # the key id


class KeyRevoked(Part):
    key = "keys"
    revoked: str | None = None  # the key id
    changed: bool | None = None
    sessions_ended: int | None = None


# Audit reads (role `auditor`, over the API and the audit pages).


class AuditListed(Part):
    """A list, an overview or a subject report: how many calls it counted or showed."""

    key = "audit_read"
    listed: int | None = None


class TraceRead(Part):
    """One trace, or its inclusion proof."""

    key = "audit_read"
    trace: str | None = None  # its trace id


class AuditExported(Part):
    """The rows as JSON lines or CSV; `report` names a report exported (a subject's calls)."""

    key = "audit_export"
    omittable = frozenset({"report"})
    format: str | None = None
    report: str | None = None


class EvidenceExported(Part):
    """An evidence pack of [since, until): the period's instants and its rows (as text, as the pack's
    row first wrote them)."""

    key = "audit_export"
    format: str | None = None  # "evidence"
    since: str | None = None
    until: str | None = None
    rows: str | None = None

    @classmethod
    def of(cls, since: str, until: str, rows: int) -> EvidenceExported:
        return cls(format="evidence", since=since, until=until, rows=str(rows))


class ChainVerified(Part):
    """A verify of the tenant's chains: whether it held, over how many rows, how many are checkpointed."""

    key = "audit_verify"
    ok: bool
    rows: int
    checkpointed: int | None = None  # rows covered by a signed checkpoint
    not_yet_checkpointed: int | None = None


class SessionOpened(Part):
    """An audit-page sign-in: the key's id, a prefix of the session's id, when it expires."""

    key = "audit_session"
    key_id: str | None = None
    session: str | None = None
    expires_at: str | None = None


class SessionEnded(Part):
    """An audit-page sign-out: `signed_out` and the session it ended, or `already` when there was no
    session left to end."""

    key = "audit_session"
    omittable = frozenset({"session"})
    ended: str | None = None
    session: str | None = None

    @classmethod
    def of(cls, session: str | None) -> SessionEnded:
        return cls(ended="signed_out", session=session) if session else cls(ended="already")


# Agent reports on one of its own retrieve calls.


class ReportedOn(Parts):
    """The trace an agent reports on, left as soon as it is found: a report that turns out malformed
    still names the call it was about."""

    about: str | None = None


class UsageReported(Parts):
    """The returned items the agent used, the entities they name (None when none), and how many ids
    it named that the call never returned."""

    used: tuple[str, ...] | None = None
    used_about: tuple[str, ...] | None = None  # the entities the used items name, as that call's trace recorded
    not_returned_by_that_call: int | None = None


class FeedbackGiven(Part):
    """A rating and a keyed fingerprint of the comment (free text: it may hold anything)."""

    key = "feedback"
    rating: str | int | None = None
    comment: Fingerprint | None = None


# Policy admin (role `policy_admin`).


class PolicyReloaded(Part):
    """A reload: what started it, `switched`, `unchanged` or `rejected`, the revisions, the
    candidate's errors, how long it took. gateway.policy.reload.ReloadResult is one."""

    key = "policy_reload"
    trigger: str
    status: str
    revision: str  # in force after the reload
    previous: str
    candidate: str | None = None
    errors: tuple[str, ...] = ()
    ms: Ms | None = None


class PolicyExplained(Part):
    """An explain: the hypothetical actor's principal and task type, how many items, the revisions."""

    key = "policy_explain"
    actor: str | None = None
    task: str | None = None
    items: int | None = None
    in_force: str | None = None
    candidate: str | None = None


class PolicyImpactRun(Part):
    """An impact run: the candidate's revision, the calls replayed, the decisions that flip, the items
    newly allowed and newly denied."""

    key = "policy_impact"
    candidate_revision: str | None = None
    replayed: int | None = None
    flips: int | None = None
    newly_allowed: int | None = None
    newly_denied: int | None = None

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


# Calls of no handler of their own.


class Unrouted(Part):
    """A call no route took (404, 405): its method and a keyed fingerprint of its path, never the path."""

    key = "route"
    method: str | None = None
    path: Fingerprint | None = None
