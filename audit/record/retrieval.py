"""The stage records of a retrieve and an expand: each stage leaves its own, once, where it ends.

A retrieve fills its lineage stage by stage, because a call denied by the policy or failing half-way
must still leave what it reached: the request's shape before any check, the actor before the
decision, the decision before a denial ends the call. So a retrieve has no single record: each stage
of the pipeline (gateway/pipeline) builds the record of what it did when it ends and leaves it with
`TraceBuilder.record`, and the record fills the lineage parts that stage owns and no others, exactly
as the stored rows have always held them (tests/audit/test_retrieve_records.py holds real calls to
their stored shape). Parts a later stage completes in place are handed over as they are: the
`timings` a call reports gain the masking and synthesis stages' figures after they are left.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from audit.record.lineage import (
    ActorRecord,
    DecisionRecord,
    DepthRecord,
    Dropped,
    EntitiesRecord,
    IsItsPart,
    Lineage,
    PiiRecord,
    RelevanceRecord,
    RequestShape,
    ReturnedRecord,
    SourceRecord,
    SynthesisRecord,
)


def _dropped(denied: tuple[tuple[str, str], ...]) -> list[Dropped]:
    return [Dropped(id=item, reason=reason) for item, reason in denied]


@dataclass(frozen=True, slots=True)
class Asked:
    """The request's shape (hashes and sizes of its text), left before any check of the request."""

    request: RequestShape

    def fill(self, lineage: Lineage) -> None:
        lineage.request = self.request


@dataclass(frozen=True, slots=True)
class Presented:
    """What the policy is told of the actor beyond its id and tenant, left before it decides."""

    roles: tuple[str, ...]
    groups: tuple[str, ...]
    clearance: str

    def fill(self, lineage: Lineage) -> None:
        lineage.actor = ActorRecord(roles=list(self.roles), groups=list(self.groups), clearance=self.clearance)


@dataclass(frozen=True, slots=True)
class Decided:
    """The policy's decision, and the constraints of an allow (None for a denial, which has none)."""

    allow: bool
    reasons: tuple[str, ...]
    ms: float
    constraints: dict[str, Any] | None = None  # the policy's own document, as it returned it

    def fill(self, lineage: Lineage) -> None:
        lineage.decision = DecisionRecord(allow=self.allow, reasons=list(self.reasons), ms=round(self.ms, 3))
        if self.constraints is not None:
            lineage.constraints = self.constraints


@dataclass(frozen=True, slots=True)
class Resolved:
    """The entities the items policy was given, and the request's entities as they resolved (None
    when it named none)."""

    subjects: tuple[str, ...]
    entities: EntitiesRecord | None = None

    def fill(self, lineage: Lineage) -> None:
        if self.entities is not None:
            lineage.entities = self.entities
        lineage.subjects = list(self.subjects)


@dataclass(frozen=True, slots=True)
class SectionsUnread:
    """The sections of the document hits could not be read: the hits are returned as found."""

    error: str

    def fill(self, lineage: Lineage) -> None:
        lineage.section_lookup_error = self.error


@dataclass(frozen=True, slots=True)
class Verified:
    """What each source recalled (source -> ids) and what the policy's second look denied."""

    retrieved: dict[str, list[str]]
    denied: tuple[tuple[str, str], ...]

    def fill(self, lineage: Lineage) -> None:
        lineage.retrieved = self.retrieved
        lineage.dropped_by_policy = _dropped(self.denied)
        lineage.pushdown_mismatches = len(self.denied)


@dataclass(frozen=True, slots=True)
class Sifted:
    """After fusion: the allowed section pieces, the hits read as their whole section, and the
    relevance floor's report."""

    section_pieces: tuple[str, ...]
    merged_into_sections: list[str]
    relevance: Mapping[str, Any]

    def fill(self, lineage: Lineage) -> None:
        lineage.section_pieces = list(self.section_pieces)
        lineage.merged_into_sections = self.merged_into_sections
        lineage.relevance = RelevanceRecord.model_validate(self.relevance)


class Masked(PiiRecord, IsItsPart):
    """Personal values masked so far, by type, and how many texts were analysed during the call; left
    when the entries are masked and again when the rest of the response is."""

    def fill(self, lineage: Lineage) -> None:
        lineage.pii = self


@dataclass(frozen=True, slots=True)
class Budgeted:
    """Ranking and packing: what history hid, what the budget left out, what was packed, and whether
    a cursor to the rest was issued."""

    historical: tuple[str, ...]
    for_budget: tuple[str, ...]
    packed: tuple[str, ...]
    cursor_issued: bool

    def fill(self, lineage: Lineage) -> None:
        lineage.dropped_as_historical = list(self.historical)
        lineage.dropped_for_budget = list(self.for_budget)
        lineage.packed = list(self.packed)
        lineage.cursor_issued = self.cursor_issued


@dataclass(frozen=True, slots=True)
class Accounted:
    """The sources as the response reports them, the stage timings and the depth the call ran at.
    `timings` is the call's own: the stages after it (masking the response, synthesis) complete it."""

    sources: dict[str, SourceRecord]
    timings: dict[str, float]
    depth: DepthRecord

    def fill(self, lineage: Lineage) -> None:
        lineage.sources, lineage.timings, lineage.depth = self.sources, self.timings, self.depth


@dataclass(frozen=True, slots=True)
class Returned:
    """What the body returns, counted (items by sensitivity, those carrying a placeholder, the types
    revealed), and the entities the items the call read name: entity id -> item ids."""

    sensitivity: dict[str, int]
    masked_items: int
    revealed: tuple[str, ...]
    named_entities: dict[str, list[str]]

    def fill(self, lineage: Lineage) -> None:
        lineage.returned = ReturnedRecord(
            sensitivity=self.sensitivity, masked_items=self.masked_items, revealed=list(self.revealed)
        )
        lineage.named_entities = self.named_entities


@dataclass(frozen=True, slots=True)
class Expanded:
    """An expand's page: the cursor entries it read again, what the policy denied, what was gone
    since the cursor was issued, what the budget left out, what was packed, its sources and timings."""

    entries: tuple[str, ...]
    denied: tuple[tuple[str, str], ...]
    gone: tuple[str, ...]
    for_budget: tuple[str, ...]
    packed: tuple[str, ...]
    sources: dict[str, SourceRecord]
    timings: dict[str, float]

    def fill(self, lineage: Lineage) -> None:
        lineage.retrieved = {"expand": list(self.entries)}
        lineage.dropped_by_policy = _dropped(self.denied)
        lineage.dropped_since_issued, lineage.dropped_for_budget = list(self.gone), list(self.for_budget)
        lineage.packed = list(self.packed)
        lineage.sources, lineage.timings = self.sources, self.timings


@dataclass(frozen=True, slots=True)
class Synthesised:
    """An answer asked of the model: the items sent, those it cited, the citations it invented, the
    items it flagged as instructions, whether it was grounded, its error, and what was masked for it."""

    sent: tuple[str, ...]
    cited: tuple[str, ...]
    invented_citations: int
    flagged_as_instructions: tuple[str, ...]
    grounded: bool | None
    error: str | None
    ms: float
    masked_for_model: dict[str, int]

    def fill(self, lineage: Lineage) -> None:
        lineage.synthesis = SynthesisRecord(
            sent=list(self.sent),
            cited=list(self.cited),
            invented_citations=self.invented_citations,
            flagged_as_instructions=list(self.flagged_as_instructions),
            grounded=self.grounded,
            error=self.error,
            ms=round(self.ms, 3),
            masked_for_model=self.masked_for_model,
        )


@dataclass(frozen=True, slots=True)
class SynthesisSkipped:
    """Nothing was sent to the model: personal data could not be masked, for this reason."""

    reason: str

    def fill(self, lineage: Lineage) -> None:
        lineage.synthesis = SynthesisRecord(sent=[], error=self.reason)
