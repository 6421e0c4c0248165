"""The writes: an item as written (`ItemIn`, over HTTP, from a file or a document's front matter),
an entity merge, and the reports writes answer with."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, field_validator, model_validator

from api.instants import parse_rfc3339
from api.wire import Strict, Wire

ID = r"^[A-Za-z0-9_.:@-]{1,200}$"
PRINCIPAL = re.compile(r"^(\*|(user|group|role):[A-Za-z0-9_.@:-]{1,200})$")
NAME = r"^[A-Za-z0-9_.:-]{1,200}$"
MAX_TEXT_CHARS = 100_000
MAX_SECTION_CHARS = 500
MAX_WEIGHT = 1_000_000  # an edge's weight is finite, from -MAX_WEIGHT to MAX_WEIGHT
MAX_VECTOR_DIMS = 4096  # the longest vector an item may carry (bge-small: 384; OpenAI text-embedding-3-large: 3072)


class ItemIn(BaseModel):
    """One item as written over HTTP or from a file. The tenant is never part of it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: str = Field(pattern=ID)
    kind: Literal["entity", "property", "memory", "document", "edge"]
    text: str | None = Field(default=None, max_length=MAX_TEXT_CHARS)
    value: Any = None
    name: str | None = Field(default=None, max_length=500)
    entity: str | None = Field(default=None, pattern=ID)
    section: str | None = Field(default=None, max_length=MAX_SECTION_CHARS)
    document: str | None = Field(default=None, pattern=ID)
    entity_type: Literal["contact", "company"] | None = None
    email: str | None = Field(default=None, max_length=320)
    website: str | None = Field(default=None, max_length=2000)
    phone: str | None = Field(default=None, max_length=50)
    relation: str | None = Field(default=None, pattern=NAME)
    from_: str | None = Field(default=None, alias="from", pattern=ID)
    to: str | None = Field(default=None, pattern=ID)
    confidence: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    weight: float | None = Field(default=None, ge=-MAX_WEIGHT, le=MAX_WEIGHT, allow_inf_nan=False)
    tags: list[str] = Field(default_factory=list, max_length=50)
    acl: list[str] = Field(min_length=1, max_length=200)
    sensitivity: Literal["public", "internal", "confidential", "restricted"] = "internal"
    valid_from: str | None = None
    valid_to: str | None = None
    scope: list[str] = Field(default_factory=list, max_length=50)
    authority: Literal["approved", "reviewed", "unreviewed", "speculative"] = "unreviewed"
    status: Literal["active", "superseded", "disputed", "retracted", "pending_deletion"] = "active"
    slot: str | None = Field(default=None, max_length=500)
    attached_to: str | None = Field(default=None, pattern=ID)
    source: dict[str, str] | None = None
    recorded_at: str | None = None
    # A vector made outside the gateway and the id of the model that made it: accepted only when both
    # match the index's model (its id and dimension); such an item is not embedded again.
    vector: list[FiniteFloat] | None = Field(default=None, min_length=1, max_length=MAX_VECTOR_DIMS)
    vector_model: str | None = Field(default=None, min_length=1, max_length=200)

    @field_validator("acl")
    @classmethod
    def principals_are_well_formed(cls, acl: list[str]) -> list[str]:
        for principal in acl:
            if not PRINCIPAL.match(principal):
                raise ValueError("each principal is user:ID, group:ID, role:ID or *")
        return acl

    @field_validator("scope", "tags")
    @classmethod
    def names_are_well_formed(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.match(NAME, name):
                raise ValueError("names use letters, digits and _.:- only")
        return names

    @field_validator("valid_from", "valid_to", "recorded_at")
    @classmethod
    def instants_are_rfc3339(cls, value: str | None) -> str | None:
        if value is not None:
            parse_rfc3339(value)
        return value

    @field_validator("source")
    @classmethod
    def source_has_known_keys(cls, source: dict[str, str] | None) -> dict[str, str] | None:
        if source is not None and not set(source) <= {"system", "uri"}:
            raise ValueError("source takes only system and uri")
        return source

    @model_validator(mode="after")
    def fits_its_kind(self) -> "ItemIn":
        if self.kind in ("memory", "document") and not (self.text and self.text.strip()):
            raise ValueError(f"a {self.kind} needs non-empty text")
        if self.kind == "property" and (not self.name or self.value is None):
            raise ValueError("a property needs name and value")
        if self.kind == "entity" and self.entity_type is None:
            raise ValueError("an entity needs entity_type (contact or company)")
        if self.kind == "edge" and not (self.from_ and self.to and self.relation):
            raise ValueError("an edge needs from, to and relation")
        if self.valid_from and self.valid_to and parse_rfc3339(self.valid_to) <= parse_rfc3339(self.valid_from):
            raise ValueError("valid_to must be after valid_from")
        return self


class MergeRequest(Strict):
    into: str = Field(pattern=ID, description="The id of the surviving entity")


class Rejection(Wire):
    """An item that was not written, with its index in the batch and why."""

    index: int = Field(ge=0)
    id: str | None = None
    errors: list[str] = Field(default_factory=list)


class IngestReport(Wire):
    """Counts of a batch; a bad item never blocks the good ones."""

    created: int = Field(default=0, ge=0)
    updated: int = Field(default=0, ge=0)
    unchanged: int = Field(default=0, ge=0)
    rejected: list[Rejection] = Field(default_factory=list)
    # A stream of many bad lines is answered with its first 1,000 rejections and the count of the rest.
    rejected_omitted: int = Field(default=0, ge=0)
    OPTIONAL = frozenset({"rejected_omitted"})  # sent only when rejections were left out


class DocumentReport(IngestReport):
    """A document write: its pieces, and which of them changed (`removed`: pieces past the new end)."""

    document: str
    sha256: str
    changed: bool
    pieces: int = Field(default=0, ge=0)
    removed: int = Field(default=0, ge=0)


class MergeResult(Wire):
    id: str
    into: str
    survivor: str
    changed: bool


class TombstoneResult(Wire):
    id: str
    status: Literal["pending_deletion"]
    changed: bool
    hidden_items: int = Field(default=0, ge=0)
