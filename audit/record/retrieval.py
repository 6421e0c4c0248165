"""The stage records of a retrieve and an expand: each stage leaves its own, once, where it ends.

A retrieve leaves its lineage stage by stage, because a call denied by the policy or failing half-way
must still leave what it reached: the request's shape before any check, the actor before the
decision, the decision before a denial ends the call. So each stage of the pipeline (gateway/pipeline)
builds the record of what it did when it ends and leaves it with `TraceBuilder.record`; the record is
the parts that stage owns and no others (audit.record.records), exactly as the stored rows have always
held them (tests/audit/test_retrieve_records.py holds real calls to their stored shape). The lineage
of a retrieve (audit.record.kinds.RetrieveCall) is made of these records.

Nothing is completed after it is left: a stage that ends later and knows more leaves a record of its
own. The call's `timings` are the figures its records carry: `Accounted` (or `Expanded`) the stages
up to the response, `Timed` what masking the response and synthesis add (the trace assembles them,
audit.record.trace).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from audit.record.parts import (
    DecisionRecord,
    DepthRecord,
    Dropped,
    EntitiesRecord,
    Fingerprint,
    Ms,
    RelevanceRecord,
    ReturnedRecord,
    SourceRecord,
)
from audit.record.records import Part, Parts


def dropped(denied: tuple[tuple[str, str], ...]) -> tuple[Dropped, ...]:
    """The items the policy denied, as (id, reason) pairs, as the lineage keeps them."""
    return tuple(Dropped(id=item, reason=reason) for item, reason in denied)


class RequestShape(Part):
    """The request's shape: hashes and sizes of its text, never the text. Left before any check of the
    request (gateway.pipeline.respond.request_shape builds it)."""

    key = "request"
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


class Presented(Part):
    """What the policy is told of the actor beyond its id and tenant (the row has those), left before
    it decides. Absent in older rows."""

    key = "actor"
    roles: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    clearance: str


class Decided(Parts):
    """The policy's decision, and the constraints of an allow (None for a denial, which has none)."""

    decision: DecisionRecord | None = None
    constraints: dict[str, Any] | None = None  # the policy's own document, as it returned it


class Resolved(Parts):
    """The request's entities as they resolved (None when it named none), and the entities the items
    policy was given."""

    entities: EntitiesRecord | None = None
    subjects: tuple[str, ...] | None = None  # absent in older rows


class SectionsUnread(Parts):
    """The sections of the document hits could not be read: the hits are returned as found."""

    section_lookup_error: str | None = None


class Recalled(Parts):
    """What each source recalled (source -> ids), and what the policy's second look denied (`dropped`)."""

    retrieved: dict[str, list[str]] | None = None
    dropped_by_policy: tuple[Dropped, ...] | None = None


class Verified(Recalled):
    """A retrieve's verify: what was recalled and denied, and how many were denied (each a pushdown
    mismatch: the filter let through what the policy denies)."""

    pushdown_mismatches: int | None = None


class Sifted(Parts):
    """After fusion: the allowed section pieces, the hits read as their whole section, and the
    relevance floor's report."""

    section_pieces: tuple[str, ...] | None = None
    merged_into_sections: tuple[str, ...] | None = None
    relevance: RelevanceRecord | None = None


class Masked(Part):
    """Personal values masked so far, by type, and how many texts were analysed during the call; left
    when the entries are masked and again when the rest of the response is."""

    key = "pii"
    masked: dict[str, int] = Field(default_factory=dict)
    analysed_at_request: int = 0


class Packed(Parts):
    """What the budget left out, and what was packed."""

    dropped_for_budget: tuple[str, ...] | None = None
    packed: tuple[str, ...] | None = None


class Budgeted(Packed):
    """A retrieve's ranking and packing: what history hid, what the budget left out, what was packed,
    and whether a cursor to the rest was issued."""

    dropped_as_historical: tuple[str, ...] | None = None
    cursor_issued: bool | None = None


class Timed(Parts):
    """Milliseconds per stage. Left after the call was accounted (masking the response, synthesis),
    its figures replace the accounted ones of the same stage and add the others, in that order."""

    timings: dict[str, float] | None = None


class Reported(Timed):
    """The sources as the response reports them, and the timings of the stages up to the response."""

    sources: dict[str, SourceRecord] | None = None


class Accounted(Reported):
    """A retrieve's sources and timings as the response reports them, and the depth it ran at."""

    depth: DepthRecord | None = None


class Returned(Parts):
    """What the body returns, counted (items by sensitivity, those carrying a placeholder, the types
    revealed), and the entities the items the call read name: entity id -> item ids."""

    returned: ReturnedRecord | None = None  # absent in older rows
    named_entities: dict[str, list[str]] | None = None


class Expanded(Recalled, Packed, Reported):
    """An expand's page: the cursor entries it read again (as `retrieved` from `expand`), what the
    policy denied, what was gone since the cursor was issued, what the budget left out, what was
    packed, its sources and the timings of its stages up to the response."""

    dropped_since_issued: tuple[str, ...] | None = None


class Synthesised(Part):
    """An answer asked of the model: the items sent, those it cited, the citations it invented, the
    items it flagged as instructions, whether it was grounded, its error, how long it took, and what
    was masked for it."""

    key = "synthesis"
    sent: tuple[str, ...] = ()
    cited: tuple[str, ...] = ()
    invented_citations: int = 0
    flagged_as_instructions: tuple[str, ...] = ()
    grounded: bool | None = None
    error: str | None = None
    ms: Ms | None = None
    masked_for_model: dict[str, int] = Field(default_factory=dict)


class SynthesisSkipped(Synthesised):
    """Nothing was sent to the model: personal data could not be masked, for this reason."""

    omittable = frozenset(Synthesised.model_fields) - {"sent", "error"}

    @classmethod
    def of(cls, reason: str) -> SynthesisSkipped:
        return cls(sent=(), error=reason)


class NotDelivered(Parts):
    """The answer never reached its client (its body failed to build, or the client left): what the
    call had packed is kept for review as not delivered, out of the per-item index of "which calls
    returned item X"."""

    not_delivered: tuple[str, ...] | None = None

    def parts(self) -> Mapping[str, object]:
        return {"packed": None, "not_delivered": self.not_delivered}
