"""The typed, versioned lineage of one call: what the stages write and the reviewers read.

Version 2 adds `version` and typed reasons (`SourceRecord.skip`, `DepthRecord.fallback_reason`).
Rows written before it (version 1: the same keys, no `version`, reasons as free text) are read by
`read_lineage`, which derives the reasons from the exact text version 1 wrote.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core.records import SkipReason

LINEAGE_VERSION = 2


class FallbackReason(StrEnum):
    """Why a call ran at a shallower depth than it asked for."""

    STANDARD_TIMEOUT = "standard_timeout"
    STANDARD_ERROR = "standard_error"
    DEEP_TIMEOUT = "deep_timeout"
    DEEP_ERROR = "deep_error"
    SEMANTIC_UNAVAILABLE = "semantic_unavailable"
    NO_WORDS_TO_EMBED = "no_words_to_embed"
    SEMANTIC_NOT_REQUESTED = "semantic_not_requested"
    EXPAND_READS_BY_ID = "expand_reads_by_id"


class LineagePart(BaseModel):
    """A lineage part: keys are fixed, unknown keys of older rows are kept as they were."""

    model_config = ConfigDict(extra="allow")


class IsItsPart(BaseModel):
    """A record that is the lineage part it fills: frozen like every record, given every field its part
    declares (the part's own defaults are for reading older rows) and no other, so the stored part
    holds every key, as the record's fields always did."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="after")
    def _every_field_given(self) -> IsItsPart:
        missing = sorted(set(type(self).model_fields) - self.model_fields_set)
        if missing:
            raise ValueError(f"{type(self).__name__} takes every field of its part; missing: {', '.join(missing)}")
        return self


class Fingerprint(LineagePart):
    hmac: str
    length: int


class RequestShape(LineagePart):
    """The request's shape: hashes and sizes of its text, never the text."""

    task: dict[str, Any] = Field(default_factory=dict)
    mode: str | None = None
    mode_requested: str | None = None
    kinds: list[str] | None = None
    sources: dict[str, bool | None] = Field(default_factory=dict)
    depth: str | None = None
    budget_bytes: int | None = None
    as_of: str | None = None
    query: Fingerprint | None = None
    entities: list[dict[str, Fingerprint]] = Field(default_factory=list)
    fetch_count: int = 0
    tags: list[Fingerprint | str] = Field(default_factory=list)  # fingerprints; text in version 1 rows
    include_historical: bool = False
    graph: dict[str, Any] | None = None  # the graph options {max_depth, relations}; absent in older rows

    @property
    def task_type(self) -> str | None:
        value = self.task.get("type")
        return value if isinstance(value, str) else None


class ActorRecord(LineagePart):
    """What the policy was told of the actor beyond its id and tenant (the row has those)."""

    roles: list[str] = Field(default_factory=list)
    groups: list[str] = Field(default_factory=list)
    clearance: str


class DecisionRecord(LineagePart):
    allow: bool
    reasons: list[str] = Field(default_factory=list)
    ms: float = 0.0


class EntitiesRecord(LineagePart):
    resolved: int = 0
    tombstones: int = 0
    aliases: int = 0
    alias_error: str | None = None


class Dropped(LineagePart):
    id: str
    reason: str


class RelevanceRecord(LineagePart):
    floor: float
    best_similarity: float | None = None
    below_floor: list[str] = Field(default_factory=list)


class PiiRecord(LineagePart):
    masked: dict[str, int] = Field(default_factory=dict)
    analysed_at_request: int = 0


class ReturnedRecord(LineagePart):
    """What a call returned, counted from the envelopes and the placeholders issued, never the text:
    the items by sensitivity, how many carried a placeholder, and the types of personal data the
    items held in clear because the policy revealed them to this reader."""

    sensitivity: dict[str, int] = Field(default_factory=dict)
    masked_items: int = 0
    revealed: list[str] = Field(default_factory=list)


class SourceRecord(LineagePart):
    """One source as the response reported it; `count` holds only policy-confirmed candidates."""

    status: str
    count: int = 0
    ms: float = 0.0
    detail: str | None = None
    skip: SkipReason | None = None
    lag: int | None = None
    aliases: str | None = None
    model: str | None = None  # semantic: the embedding model that ranked

    def wire(self) -> dict[str, Any]:
        """The response's `sources` entry: the typed reason stays in the trail."""
        return self.model_dump(exclude_none=True, exclude={"skip"})


class DepthRecord(LineagePart):
    requested: str
    effective: str
    fallback_reason: FallbackReason | None = None


class SynthesisRecord(LineagePart):
    sent: list[str] = Field(default_factory=list)
    cited: list[str] = Field(default_factory=list)
    invented_citations: int = 0
    flagged_as_instructions: list[str] = Field(default_factory=list)
    grounded: bool | None = None
    error: str | None = None
    ms: float | None = None
    masked_for_model: dict[str, int] = Field(default_factory=dict)


class OtelRecord(LineagePart):
    trace_id: str | None = None
    span_id: str | None = None


class WriteRecord(LineagePart):
    """An ingest or entity write: counts only."""

    received: int | None = None
    created: int = 0
    updated: int = 0
    unchanged: int | None = None
    rejected: int = 0
    removed: int | None = None


class DocumentRecord(LineagePart):
    """A document write: which document, its hash, and what happened to its pieces."""

    document: str
    sha256: str
    changed: bool
    pieces: int
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0


class ChangeRecord(LineagePart):
    """A merge or a deletion mark: what changed."""

    changed: int | bool = 0
    hidden_items: int | None = None


class MergeRecord(ChangeRecord):
    """An entity merge: which entity went into which (ids only). The subject report follows these
    from the chain as well as from the entity envelopes, so an envelope edited in the database
    cannot take a merged id out of a data subject's report."""

    entity: str | None = None
    into: str | None = None


class AuditReadRecord(LineagePart):
    listed: int | None = None
    trace: str | None = None


class AuditVerifyRecord(LineagePart):
    ok: bool
    rows: int
    checkpointed: int | None = None  # rows covered by a signed checkpoint
    not_yet_checkpointed: int | None = None


class FeedbackRecord(LineagePart):
    rating: str | int | None = None
    comment: Fingerprint | None = None


class KeysRecord(LineagePart):
    """A key admin call: listed (a count), created or revoked (a key id), never a secret."""

    listed: int | None = None
    created: str | None = None
    revoked: str | None = None
    changed: bool | None = None
    sessions_ended: int | None = None


class AuditExportRecord(LineagePart):
    """An export: its format, the report it exported, and for an evidence pack its period and rows
    (as text, as the pack's row first wrote them)."""

    format: str | None = None
    report: str | None = None
    since: str | None = None
    until: str | None = None
    rows: str | None = None


class AuditSessionRecord(LineagePart):
    """An audit-page sign-in (the key id, a prefix of the session id, when it expires) or sign-out."""

    ended: str | None = None  # "signed_out", or "already" when there was no session to end
    key_id: str | None = None
    session: str | None = None
    expires_at: str | None = None


class PolicyReloadRecord(LineagePart):
    """A reload's trigger, outcome, revisions and the candidate's errors."""

    trigger: str | None = None
    status: str | None = None
    revision: str | None = None
    previous: str | None = None
    candidate: str | None = None
    errors: list[str] = Field(default_factory=list)
    ms: float | None = None


class PolicyExplainRecord(LineagePart):
    """An explain: the hypothetical actor's principal, the task type, how many items, the revisions."""

    actor: str | None = None
    task: str | None = None
    items: int | None = None
    in_force: str | None = None
    candidate: str | None = None


class PolicyImpactRecord(LineagePart):
    """A policy impact run: the candidate's revision and counts."""

    candidate_revision: str | None = None
    replayed: int | None = None
    flips: int | None = None
    newly_allowed: int | None = None
    newly_denied: int | None = None


class WorkRecord(LineagePart):
    """What an admitted call measured (core.work.Meter.report)."""

    cpu_ms: float | None = None
    sql_steps: int | None = None
    embedded_chars: int | None = None
    analysed_bytes: int | None = None


class AdmissionRecord(LineagePart):
    """A call's admission (gateway/admission): its estimate, its price, how long it queued and gave
    way, and what it used. Filled as the call is admitted and settled, so a refused call keeps `cost`."""

    cost: int | None = None
    price: int | None = None
    queued_ms: float | None = None
    used: float | None = None
    work: WorkRecord | None = None
    gave_way_ms: float | None = None


class RouteRecord(LineagePart):
    """A call no route took (404, 405): its method and a keyed fingerprint of its path, never the path."""

    method: str | None = None
    path: Fingerprint | None = None


class Lineage(LineagePart):
    """One call's lineage. Retrieve and expand fill the retrieval parts stage by stage, each stage
    leaving its record (audit.record.retrieval); every other call leaves the record of its kind
    (audit.record.calls), which fills its parts (`ingest`, `merge`, `audit_read`, `used`, ...)."""

    version: int = LINEAGE_VERSION
    # How the call came: "mcp" for an MCP tool call; absent for the HTTP API (and in older rows), so
    # an HTTP row is stored exactly as before.
    channel: str | None = None
    otel: OtelRecord | None = None
    request: RequestShape | None = None
    actor: ActorRecord | None = None  # absent in older rows
    decision: DecisionRecord | None = None
    constraints: dict[str, Any] | None = None  # the policy's own document, as it returned it
    entities: EntitiesRecord | None = None
    subjects: list[str] | None = None  # the entity ids the items policy was given; absent in older rows
    retrieved: dict[str, list[str]] | None = None
    dropped_by_policy: list[Dropped] | None = None
    pushdown_mismatches: int | None = None
    section_lookup_error: str | None = None
    section_pieces: list[str] | None = None
    merged_into_sections: list[str] | None = None
    relevance: RelevanceRecord | None = None
    pii: PiiRecord | None = None
    dropped_as_historical: list[str] | None = None
    dropped_for_budget: list[str] | None = None
    dropped_since_issued: list[str] | None = None
    packed: list[str] | None = None
    returned: ReturnedRecord | None = None  # absent in older rows
    # The entities the items this call read name (core.records.Record.linked_entities, and an
    # entity item its own id): entity id -> those item ids. What a subject report is built from.
    named_entities: dict[str, list[str]] | None = None
    # What the call had packed but never delivered (its body failed to build, or the client left):
    # kept for review, out of the per-item index of "which calls returned item X".
    not_delivered: list[str] | None = None
    cursor_issued: bool | None = None
    sources: dict[str, SourceRecord] | None = None
    timings: dict[str, float] | None = None
    depth: DepthRecord | None = None
    synthesis: SynthesisRecord | None = None
    ingest: WriteRecord | None = None
    document: DocumentRecord | None = None
    entity: WriteRecord | None = None
    merge: MergeRecord | None = None
    tombstone: ChangeRecord | None = None
    about: str | None = None
    policy_reload: PolicyReloadRecord | None = None
    policy_explain: PolicyExplainRecord | None = None
    used: list[str] | None = None
    used_about: list[str] | None = None  # the entities the used items name, as that call's trace recorded
    not_returned_by_that_call: int | None = None
    feedback: FeedbackRecord | None = None
    audit_read: AuditReadRecord | None = None
    audit_export: AuditExportRecord | None = None
    audit_verify: AuditVerifyRecord | None = None
    audit_session: AuditSessionRecord | None = None
    keys: KeysRecord | None = None
    admission: AdmissionRecord | None = None
    policy_impact: PolicyImpactRecord | None = None
    route: RouteRecord | None = None

    @property
    def task_type(self) -> str | None:
        return self.request.task_type if self.request else None

    def to_json(self) -> dict[str, Any]:
        """The stored form: the parts and fields that were written, JSON types only."""
        written = self.model_dump(mode="json", exclude_unset=True)
        return {"version": self.version, **{key: value for key, value in written.items() if value is not None}}


def read_lineage(stored: dict[str, Any] | None) -> Lineage:
    """A stored lineage of any version as the typed record."""
    data = dict(stored or {})
    if "version" not in data:  # version 1: reasons were text only
        data = _from_version_1(data)
    return Lineage.model_validate(data)


def _from_version_1(data: dict[str, Any]) -> dict[str, Any]:
    data["version"] = 1
    sources = data.get("sources")
    if isinstance(sources, dict):
        data["sources"] = {
            name: {**entry, "skip": _skip_of(entry)} if isinstance(entry, dict) else entry for name, entry in sources.items()
        }
    return data


def _skip_of(entry: dict[str, Any]) -> SkipReason | None:
    """The reason a version-1 row gave as text, when it is one of the known texts (exact match)."""
    if entry.get("status") != "skipped":
        return None
    detail = entry.get("detail")
    known = {reason.value: reason for reason in SkipReason}
    return known.get(detail) if isinstance(detail, str) else None
