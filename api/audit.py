"""The audit trail's answers (GET /v1/audit/...), and what an agent reports about a call it made
(POST /v1/traces/{trace_id}/usage and /feedback)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from api.wire import Instant, Strict, Wire


class TraceSummary(Wire):
    """One audit row as the review list shows it."""

    trace_id: str
    created_at: Instant | None = None
    actor: str | None = None
    endpoint: str
    task: str | None = None
    decision: str | None = None
    status_code: int | None = None
    error_code: str | None = None
    policy_revision: str | None = None
    seq: int | None = None


class TraceList(Wire):
    traces: list[TraceSummary] = Field(default_factory=list)
    cursor: str | None = None


class FeedbackRef(Wire):
    trace_id: str
    created_at: Instant | None = None


class Trace(TraceSummary):
    """One trace whole: its lineage (docs/lineage.md) and what the agent reported about it later."""

    tenant: str | None = None
    policy_engine: str | None = None
    lineage: dict[str, Any] | None = None
    prev_hash: str | None = None
    row_hash: str | None = None
    used: list[str] = Field(default_factory=list)
    feedback: list[FeedbackRef] = Field(default_factory=list)


class TraceProof(Wire):
    format: Literal["gateway.audit.proof/1"]
    trace: dict[str, Any]
    leaf_index: int = Field(ge=0)
    tree_size: int = Field(ge=0)
    inclusion_proof: list[str]
    checkpoint: str


class Adoption(Wire):
    """An operator adopted the chain as found (`gateway audit checkpoint --adopt`): rows 1 to `size`
    were signed as they were found, on `time`, not as the signer saw them written."""

    size: int = Field(ge=0)
    time: str
    what: str


class ChainReport(Wire):
    OPTIONAL = frozenset({"adopted"})
    rows: int = Field(ge=0)
    ok: bool
    adopted: Adoption | None = None


class BrokenLink(Wire):
    """Where a chain breaks: which chain, at which row, and why."""

    OPTIONAL = frozenset({"chain", "seq", "trace_id"})
    chain: str | None = None
    seq: int | None = None
    trace_id: str | None = None
    reason: str


class VerifyReport(Wire):
    """The hash chain checked: `ok`, per chain, and the first broken link if any."""

    OPTIONAL = frozenset({"checkpointed", "not_yet_checkpointed"})
    ok: bool
    chains: dict[str, ChainReport] = Field(default_factory=dict)
    first_broken: BrokenLink | None = None
    checkpointed: int = Field(default=0, ge=0)
    not_yet_checkpointed: int = Field(default=0, ge=0)


class UsageRequest(Strict):
    used: list[str] = Field(max_length=200, description="Ids of items that call returned")


class UsageResult(Wire):
    trace_id: str
    recorded: list[str] = Field(default_factory=list)
    ignored: int = Field(default=0, ge=0)


class FeedbackRequest(Strict):
    rating: int = Field(ge=1, le=5)
    comment: str | None = Field(default=None, max_length=2000, description="Kept as a keyed hash and a length only")


class FeedbackResult(Wire):
    trace_id: str
    rating: int = Field(ge=1, le=5)


class OverviewReport(Wire):
    """The compliance overview of a period (audit.review.overview): counts only, never item text."""

    period: dict[str, Any]
    calls: dict[str, Any]
    timeline: list[dict[str, Any]]
    denials: dict[str, Any]
    returned: dict[str, Any]
    masking: dict[str, Any]
    revisions: list[dict[str, Any]]
    endpoints: dict[str, int]
    chain: dict[str, Any]


class SubjectCall(Wire):
    """One call of a subject report: how far an item about the subject got, and the masking applied."""

    trace_id: str
    created_at: Instant
    actor: str | None = None
    endpoint: str
    channel: str
    task: str | None = None
    decision: str
    status_code: int
    stages: list[Literal["asked", "retrieved", "returned", "sent", "used"]]
    reached: str
    items: dict[str, list[str]]
    masking: dict[str, Any]
    about: str | None = None


class SubjectReport(Wire):
    """Every call about one entity and the entities merged with it (audit.review.subjects), newest first."""

    entity_id: str
    entities: list[str]
    calls: list[SubjectCall] = Field(default_factory=list)
    cursor: str | None = None
