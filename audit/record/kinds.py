"""The lineage of each kind of call, keyed on its endpoint: one typed, frozen record per kind, made of
the records its handler or its stages leave (audit.record.calls, audit.record.retrieval) and of what
every call has (audit.record.lineage). Each fact has one name: the field of the record that left it,
which is the key it is stored under.

A kind also says which decision its row carries: a retrieve the policy's (`allow`, `deny`), a write
`write` and a review `read` once the call's handler runs, an agent's report `write` once it names
the trace it reports on; the others `none`. A call that fails on the gateway's side says `error`
(audit.record.trace). `read_lineage` reads a stored row as the record of its endpoint's kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from audit.record.calls import (
    AuditExported,
    AuditListed,
    ChainVerified,
    DocumentWritten,
    EntityMerged,
    EntityTombstoned,
    EntityWritten,
    EvidenceExported,
    FeedbackGiven,
    ItemsWritten,
    KeyCreated,
    KeyRevoked,
    KeysListed,
    PolicyExplained,
    PolicyImpactRun,
    PolicyReloaded,
    ReportedOn,
    SessionEnded,
    SessionOpened,
    TraceRead,
    Unrouted,
    UsageReported,
)
from audit.record.lineage import Lineage
from audit.record.retrieval import (
    Accounted,
    Budgeted,
    Decided,
    Expanded,
    Masked,
    NotDelivered,
    Presented,
    RequestShape,
    Resolved,
    Returned,
    SectionsUnread,
    Sifted,
    Synthesised,
    Verified,
)


class RetrieveCall(
    Lineage, Decided, Resolved, SectionsUnread, Verified, Sifted, Budgeted, Accounted, Returned, Expanded, NotDelivered
):
    """POST /v1/retrieve (and an expand, its mode): what each stage left, up to where the call got."""

    request: RequestShape | None = None
    actor: Presented | None = None
    pii: Masked | None = None
    synthesis: Synthesised | None = None

    @property
    def task_type(self) -> str | None:
        return self.request.task_type if self.request else None

    def decided(self, began: bool) -> str:
        if self.decision is None:
            return "none"
        return "allow" if self.decision.allow else "deny"


class IngestCall(Lineage):
    access = "write"
    ingest: ItemsWritten | None = None


class DocumentCall(Lineage):
    access = "write"
    document: DocumentWritten | None = None


class EntityCall(Lineage):
    """PUT or DELETE /v1/entities/{id}."""

    access = "write"
    entity: EntityWritten | None = None
    tombstone: EntityTombstoned | None = None


class MergeCall(Lineage):
    access = "write"
    merge: EntityMerged | None = None


class KeysListCall(Lineage):
    access = "read"
    keys: KeysListed | None = None


class KeyCreateCall(Lineage):
    access = "write"
    keys: KeyCreated | None = None


class KeyRevokeCall(Lineage):
    access = "write"
    keys: KeyRevoked | None = None


class ListCall(Lineage):
    """A list of traces or an overview, over the API or as a page."""

    access = "read"
    audit_read: AuditListed | None = None


class SubjectCall(Lineage):
    """A subject report: its page of calls, or every call as CSV."""

    access = "read"
    audit_read: AuditListed | None = None
    audit_export: AuditExported | None = None


class TraceCall(Lineage):
    """One trace, its inclusion proof, or its page."""

    access = "read"
    audit_read: TraceRead | None = None


class ExportCall(Lineage):
    access = "read"
    audit_export: AuditExported | None = None


class EvidenceCall(Lineage):
    access = "read"
    audit_export: EvidenceExported | None = None


class VerifyCall(Lineage):
    access = "read"
    audit_verify: ChainVerified | None = None


class SignInCall(Lineage):
    audit_session: SessionOpened | None = None


class SignOutCall(Lineage):
    audit_session: SessionEnded | None = None


class UsageCall(Lineage, ReportedOn, UsageReported):
    """An agent's report of the items it used: a write once the trace it names is found."""

    def decided(self, began: bool) -> str:
        return "write" if self.about is not None else "none"


class FeedbackCall(Lineage, ReportedOn):
    """An agent's rating of an answer: a write once the trace it names is found."""

    feedback: FeedbackGiven | None = None

    def decided(self, began: bool) -> str:
        return "write" if self.about is not None else "none"


class ReloadCall(Lineage):
    policy_reload: PolicyReloaded | None = None


class ExplainCall(Lineage):
    policy_explain: PolicyExplained | None = None


class ImpactCall(Lineage):
    access = "read"
    policy_impact: PolicyImpactRun | None = None


class UnroutedCall(Lineage):
    """A call no route took (404, 405)."""

    route: Unrouted | None = None


# The kind of each endpoint (the name a call's row carries: gateway.http.traced.serving). An endpoint
# of no kind of its own (`mcp`, `policy`) has the parts every call has, and decides `none`.
KINDS: Mapping[str, type[Lineage]] = {
    "retrieve": RetrieveCall,
    "ingest": IngestCall,
    "edges": IngestCall,
    "document": DocumentCall,
    "entity": EntityCall,
    "entity_merge": MergeCall,
    "keys_list": KeysListCall,
    "keys_create": KeyCreateCall,
    "key_revoke": KeyRevokeCall,
    "audit_list": ListCall,
    "audit_overview": ListCall,
    "audit_page": ListCall,
    "audit_page_overview": ListCall,
    "audit_subject": SubjectCall,
    "audit_page_subjects": SubjectCall,
    "audit_page_subject": SubjectCall,
    "audit_trace": TraceCall,
    "audit_proof": TraceCall,
    "audit_page_trace": TraceCall,
    "audit_export": ExportCall,
    "audit_evidence": EvidenceCall,
    "audit_verify": VerifyCall,
    "audit_page_verify": VerifyCall,
    "audit_sign_in": SignInCall,
    "audit_sign_out": SignOutCall,
    "usage": UsageCall,
    "feedback": FeedbackCall,
    "policy_reload": ReloadCall,
    "policy_explain": ExplainCall,
    "policy_impact": ImpactCall,
    "unknown_route": UnroutedCall,
    "method_not_allowed": UnroutedCall,
}


def kind_of(endpoint: str) -> type[Lineage]:
    """The lineage record of an endpoint's calls."""
    return KINDS.get(endpoint, Lineage)


def read_lineage(endpoint: str, stored: Mapping[str, Any] | None) -> Lineage:
    """A stored lineage of any version, as the record of its endpoint's kind."""
    return kind_of(endpoint).read(stored)
