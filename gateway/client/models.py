"""The gateway's answers as typed, frozen values. Each keeps the fields the contract adds later
(`model_extra`) instead of refusing them: the contract grows by adding fields."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Answer(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)


class Task(Answer):
    """A retrieve call's task: its type (which the policy must grant the actor) and scope."""

    type: str
    scope: str | None = None


class Source(Answer):
    system: str | None = None
    uri: str | None = None


class Item(Answer):
    """One packed item of a retrieve answer. Edges also carry from/to/relation/confidence/weight."""

    id: str
    kind: str
    citation: str
    text: str | None = None
    entity: str | None = None
    section: str | None = None
    document: str | None = None
    slot: str | None = None
    authority: str | None = None
    status: str | None = None
    current: bool | None = None
    sensitivity: str | None = None
    scope: list[str] = Field(default_factory=list)
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    recorded_at: datetime | None = None
    source: Source = Field(default_factory=Source)
    found_by: list[str] = Field(default_factory=list)
    pieces: list[str] = Field(default_factory=list)
    from_: str | None = Field(default=None, alias="from")
    to: str | None = None
    relation: str | None = None
    confidence: float | None = None
    weight: float | None = None


class Entity(Answer):
    """A resolved entity, or a bare tombstone (`status` `pending_deletion`, nothing else)."""

    id: str
    kind: str | None = None
    status: str
    resolved_from: dict[str, str] | None = None
    merged_from: list[str] = Field(default_factory=list)
    aliases: list[str] = Field(default_factory=list)


class Decision(Answer):
    allow: bool
    policy_revision: str | None = None
    reasons: list[str] = Field(default_factory=list)


class SourceStatus(Answer):
    """How one source fared: `ok`, `empty`, `error`, `timeout` or `skipped`."""

    status: str
    count: int = 0
    ms: float | None = None
    detail: str | None = None


class Depth(Answer):
    requested: str | None = None
    effective: str | None = None
    fallback_reason: str | None = None


class Share(Answer):
    share_bytes: int | None = None
    used_bytes: int = 0
    dropped: int = 0


class Budget(Answer):
    limit_bytes: int
    used_bytes: int
    per_source: dict[str, Share] = Field(default_factory=dict)


class Synthesis(Answer):
    """The model's answer (`synthesize`), or `text` None and the `error`, the context still returned."""

    text: str | None = None
    citations: list[str] = Field(default_factory=list)
    confidence: float | None = None
    grounded: bool | None = None
    error: str | None = None


class RetrieveResult(Answer):
    """A retrieve, fetch or expand answer. `cursor` leads to the next page (None on the last)."""

    trace_id: str
    mode: str
    decision: Decision
    entities: list[Entity] = Field(default_factory=list)
    items: list[Item] = Field(default_factory=list)
    sources: dict[str, SourceStatus] = Field(default_factory=dict)
    depth: Depth | None = None
    budget: Budget | None = None
    partial: bool = False
    empty_reason: str | None = None
    cursor: str | None = None
    answer: Synthesis | None = None
    timings: dict[str, float] = Field(default_factory=dict)


class Rejection(Answer):
    """An item a write refused: its place in the batch, its id when it had one, and why."""

    index: int | None = None
    id: str | None = None
    errors: list[str] = Field(default_factory=list)


class IngestReport(Answer):
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    rejected: list[Rejection] = Field(default_factory=list)


class DocumentReport(IngestReport):
    """A document write: its pieces, and which of them changed (`removed`: pieces past the new end)."""

    document: str
    sha256: str | None = None
    changed: bool
    pieces: int = 0
    removed: int = 0


class MergeResult(Answer):
    id: str
    into: str
    survivor: str
    changed: bool


class DeletionResult(Answer):
    id: str
    status: str
    changed: bool
    hidden_items: int = 0


class UsageReport(Answer):
    trace_id: str
    recorded: list[str] = Field(default_factory=list)
    ignored: int = 0


class FeedbackReport(Answer):
    trace_id: str
    rating: int


class TraceSummary(Answer):
    """One audit row as the review list shows it."""

    trace_id: str
    created_at: datetime
    actor: str | None = None
    endpoint: str
    task: str | None = None
    decision: str | None = None
    status_code: int
    error_code: str | None = None
    policy_revision: str | None = None
    seq: int | None = None


class TracePage(Answer):
    traces: list[TraceSummary] = Field(default_factory=list)
    cursor: str | None = None


class Feedback(Answer):
    trace_id: str
    created_at: datetime | None = None
    rating: int | None = None


class Trace(TraceSummary):
    """One trace whole: its lineage (docs/lineage.md) and what the agent reported about it later."""

    tenant: str | None = None
    policy_engine: str | None = None
    lineage: dict[str, Any] = Field(default_factory=dict)
    prev_hash: str | None = None
    row_hash: str | None = None
    used: list[str] = Field(default_factory=list)
    feedback: list[Feedback] = Field(default_factory=list)


class ChainReport(Answer):
    rows: int
    ok: bool


class BrokenLink(Answer):
    chain: str | None = None
    seq: int | None = None
    trace_id: str | None = None
    reason: str


class VerifyReport(Answer):
    """The hash chain checked: `ok`, per chain, and the first broken link if any."""

    ok: bool
    chains: dict[str, ChainReport] = Field(default_factory=dict)
    first_broken: BrokenLink | None = None
    problems: list[BrokenLink] = Field(default_factory=list)
