"""The values the lineage's records hold: frozen, and read from older rows as they were written
(their defaults are for rows that lacked a field; keys no field knows are kept as they were)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from core.records import SkipReason


class LineagePart(BaseModel):
    """A value of the lineage: frozen, its keys fixed, unknown keys of older rows kept as they were.
    Stored as the fields it was given (an older row's part, read back, is stored as it was)."""

    model_config = ConfigDict(frozen=True, extra="allow")


# Milliseconds as the trail keeps them: rounded to the microsecond where the value is made.
Ms = Annotated[float, AfterValidator(lambda ms: round(ms, 3))]


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


class Fingerprint(LineagePart):
    hmac: str
    length: int


class DecisionRecord(LineagePart):
    allow: bool
    reasons: list[str] = Field(default_factory=list)
    ms: Ms = 0.0


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


class WorkRecord(LineagePart):
    """What an admitted call measured (core.work.Meter.report)."""

    cpu_ms: float | None = None
    sql_steps: int | None = None
    embedded_chars: int | None = None
    analysed_bytes: int | None = None
