"""POST /v1/retrieve: the request, and the packed context it answers with."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from api.instants import parse_rfc3339
from api.wire import Instant, Strict, Wire, clear, personal

Mode = Literal["brief", "scout", "fetch", "filter", "expand"]
ItemKind = Literal["property", "memory", "document", "edge"]
ItemStatus = Literal["current", "historical", "superseded", "disputed"]
NAME = r"^[A-Za-z0-9_.:-]{1,100}$"
MAX_TAGS = 20
MAX_TAG_CHARS = 200  # a stored tag is at most 200 characters: a longer one can match nothing


# ---------------------------------------------------------------- the request


class Task(Strict):
    type: str = Field(pattern=NAME)
    scope: str | None = Field(default=None, pattern=NAME)


class EntityRef(Strict):
    id: str | None = Field(default=None, min_length=1, max_length=200)
    email: str | None = Field(default=None, min_length=3, max_length=320)
    website: str | None = Field(default=None, min_length=3, max_length=2000)
    phone: str | None = Field(default=None, min_length=3, max_length=50)

    @model_validator(mode="after")
    def exactly_one(self) -> "EntityRef":
        given = [name for name in ("id", "email", "website", "phone") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("each entity names exactly one of id, email, website, phone")
        return self


class Sources(Strict):
    exact: bool | None = None
    graph: bool | None = None
    lexical: bool | None = None
    semantic: bool | None = None


class GraphRequest(Strict):
    max_depth: int | None = Field(default=None, ge=1, le=3)
    relations: list[str] | None = Field(default=None, max_length=50)


class Filters(Strict):
    tags: list[str] = Field(default_factory=list, max_length=MAX_TAGS)


class Budget(Strict):
    bytes: int = Field(ge=1, le=200_000)


class RetrieveRequest(Strict):
    task: Task
    query: str | None = Field(default=None, max_length=4000)
    entities: list[EntityRef] = Field(default_factory=list, max_length=20)
    as_of: str | None = None
    mode: Mode | None = None
    kinds: list[ItemKind] | None = None
    sources: Sources = Sources()
    graph: GraphRequest = GraphRequest()
    filters: Filters | None = None
    fetch: list[str] | None = Field(default=None, max_length=20)
    cursor: str | None = None
    depth: Literal["fast", "standard", "deep"] = "standard"
    budget: Budget | None = None
    limit: int = Field(default=50, ge=1, le=200)
    synthesize: bool = False
    include_historical: bool = False

    @field_validator("as_of")
    @classmethod
    def as_of_is_rfc3339(cls, value: str | None) -> str | None:
        if value is not None:
            parse_rfc3339(value)
        return value

    @property
    def as_of_instant(self) -> datetime | None:
        return parse_rfc3339(self.as_of) if self.as_of else None

    @property
    def effective_mode(self) -> Mode:
        """The mode asked for, or the one the request's shape implies."""
        if self.mode:
            return self.mode
        if self.fetch:
            return "fetch"
        if self.filters:
            return "filter"
        if self.cursor:
            return "expand"
        return "scout"


# ---------------------------------------------------------------- the answer


class Decision(Wire):
    allow: bool
    policy_revision: str | None = None
    reasons: list[str] = Field(default_factory=list)


class SourceStatus(Wire):
    """How one source fared: `ok`, `empty`, `error`, `timeout` or `skipped`; `count` holds only
    candidates the policy confirmed."""

    OPTIONAL = frozenset({"detail", "lag", "aliases"})
    status: str
    count: int = 0
    ms: float = 0.0
    detail: str | None = None
    lag: int | None = None
    aliases: str | None = None


class Depth(Wire):
    requested: str | None = None
    effective: str | None = None
    fallback_reason: str | None = None


class Share(Wire):
    share_bytes: int | None = None
    used_bytes: int = 0
    dropped: int = 0


class BudgetReport(Wire):
    OPTIONAL = frozenset({"per_source"})
    limit_bytes: int
    used_bytes: int
    per_source: dict[str, Share] = Field(default_factory=dict)


class ItemSource(Wire):
    OPTIONAL = frozenset({"system", "uri"})
    system: str | None = personal(default=None)
    uri: str | None = personal(default=None)


EDGE_FIELDS = ("from", "to", "relation", "confidence", "weight")


class RetrievedItem(Wire):
    """One packed item. Edges also carry from/to/relation/confidence/weight. When the policy masks,
    every string but those of fields marked clear is masked (`text` was masked before packing)."""

    OPTIONAL: ClassVar[frozenset[str]] = frozenset(
        {"entity", "section", "document", "slot", "authority", "current", "sensitivity", "scope", "valid_from", "valid_to",
         "recorded_at", "source", "pieces", *EDGE_FIELDS}
    )  # fmt: skip
    id: str = clear()
    kind: ItemKind = clear()
    citation: str = clear()
    text: str = clear(description="Masked from the item's stored spans before it was packed")
    entity: str | None = clear(default=None)
    section: str | None = personal(default=None)
    document: str | None = clear(default=None)
    slot: str | None = personal(default=None)
    authority: str | None = clear(default=None)
    status: ItemStatus = clear()
    current: bool | None = clear(default=None)
    sensitivity: str | None = clear(default=None)
    scope: list[str] = clear(default_factory=list)
    valid_from: Instant | None = clear(default=None)
    valid_to: Instant | None = clear(default=None)
    recorded_at: Instant | None = clear(default=None)
    source: ItemSource = personal(default_factory=ItemSource)
    found_by: list[str] = clear(default_factory=list)
    pieces: list[str] = clear(default_factory=list)
    from_: str | None = clear(default=None, alias="from")
    to: str | None = clear(default=None)
    relation: str | None = clear(default=None)
    confidence: float | None = clear(default=None)
    weight: float | None = clear(default=None)


class ResolvedEntity(Wire):
    """A live entity, or a bare tombstone (id, kind, status pending_deletion)."""

    OPTIONAL = frozenset({"resolved_from", "merged_from", "aliases"})
    id: str = clear()
    kind: str = clear()
    status: Literal["live", "pending_deletion"] = clear()
    resolved_from: dict[str, str] | None = personal(default=None)
    merged_from: list[str] = clear(default_factory=list)
    aliases: list[str] = clear(default_factory=list)


class Answer(Wire):
    """The model's answer (`synthesize`), or `text` None and the `error`, the context still returned."""

    OPTIONAL = frozenset({"citations", "confidence", "grounded", "error"})
    text: str | None = None
    citations: list[str] = Field(default_factory=list)
    confidence: float | None = None
    grounded: bool | None = None
    error: str | None = None


class RetrieveResponse(Wire):
    """A retrieve, fetch or expand answer. `cursor` leads to the next page (None on the last)."""

    OPTIONAL = frozenset({"entities", "depth", "budget", "answer", "timings"})
    trace_id: str
    mode: Mode
    decision: Decision
    entities: list[ResolvedEntity] = Field(default_factory=list)
    items: list[RetrievedItem] = Field(default_factory=list)
    sources: dict[str, SourceStatus] = Field(default_factory=dict)
    depth: Depth | None = None
    budget: BudgetReport | None = None
    partial: bool = False
    empty_reason: Literal["no_relevant_permitted_items"] | None = None
    cursor: str | None = None
    answer: Answer | None = None
    timings: dict[str, float | None] = Field(default_factory=dict)
