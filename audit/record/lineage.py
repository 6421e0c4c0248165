"""What every call's lineage has, whatever its kind: how it came, its span, its admission; and how a
lineage is stored (its parts in one fixed order) and read back (older rows too).

Each kind of call adds its own parts (audit.record.kinds). Version 2 adds `version` and typed reasons
(`SourceRecord.skip`, `DepthRecord.fallback_reason`). Rows written before it (version 1: the same
keys, no `version`, reasons as free text) are read by `Lineage.read`, which derives the reasons from
the exact text version 1 wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

from audit.record.parts import WorkRecord
from audit.record.records import STORED, Part, Parts
from core.records import SkipReason

LINEAGE_VERSION = 2

# The order of the parts in a stored lineage, as rows have always held them (the rows are
# hash-chained and signed, and served as stored): whatever the kind of call, its parts are stored in
# this order; keys of older rows no kind knows follow, in the order they had.
STORED_ORDER = (
    "version",
    "channel",
    "otel",
    "request",
    "actor",
    "decision",
    "constraints",
    "entities",
    "subjects",
    "retrieved",
    "dropped_by_policy",
    "pushdown_mismatches",
    "section_lookup_error",
    "section_pieces",
    "merged_into_sections",
    "relevance",
    "pii",
    "dropped_as_historical",
    "dropped_for_budget",
    "dropped_since_issued",
    "packed",
    "returned",
    "named_entities",
    "not_delivered",
    "cursor_issued",
    "sources",
    "timings",
    "depth",
    "synthesis",
    "ingest",
    "document",
    "entity",
    "merge",
    "tombstone",
    "about",
    "policy_reload",
    "policy_explain",
    "used",
    "used_about",
    "not_returned_by_that_call",
    "feedback",
    "audit_read",
    "audit_export",
    "audit_verify",
    "audit_session",
    "keys",
    "admission",
    "policy_impact",
    "route",
)
_PLACE = {key: place for place, key in enumerate(STORED_ORDER)}


class Channel(Parts):
    """How the call came: `mcp` for an MCP tool call or message. Never left for the HTTP API, so an
    HTTP row (and every older row) has no channel."""

    channel: str | None = None


class OtelRecord(Part):
    """The call's OpenTelemetry span, when it had one."""

    key = "otel"
    trace_id: str | None = None
    span_id: str | None = None


class AdmissionRecord(Part):
    """A call's admission (gateway/admission): its estimate, its price, how long it queued and gave
    way, and what it used. Left again as the call is admitted and settled (each a new value), so a
    refused call keeps `cost`."""

    key = "admission"
    omittable = frozenset({"price", "queued_ms", "used", "work", "gave_way_ms"})
    cost: int | None = None
    price: int | None = None
    queued_ms: float | None = None
    used: float | None = None
    work: WorkRecord | None = None
    gave_way_ms: float | None = None


class Lineage(Channel):
    """One call's lineage: the parts every call may have. Each kind of call is a subclass with its own
    parts and the decision its row carries (audit.record.kinds); a call of no kind of its own (an
    MCP message, GET /v1/policy) has these only."""

    access: ClassVar[str] = "none"  # the row's decision once the call's handler runs: read, write or none

    version: int = LINEAGE_VERSION
    otel: OtelRecord | None = None
    admission: AdmissionRecord | None = None

    @property
    def task_type(self) -> str | None:
        return None

    def decided(self, began: bool) -> str:
        """The row's decision: what the call does (`access`) once its handler began, else `none`."""
        return self.access if began else "none"

    def to_json(self) -> dict[str, Any]:
        """The stored form: the parts that were written, in the stored order, JSON types only."""
        written = self.model_dump(mode="json", exclude_unset=True)
        keys = sorted(written, key=lambda key: _PLACE.get(key, len(STORED_ORDER)))
        return {"version": self.version, **{key: written[key] for key in keys if key != "version" and written[key] is not None}}

    @classmethod
    def read(cls, stored: Mapping[str, Any] | None) -> Self:
        """A stored lineage of any version as this kind's record."""
        data = dict(stored or {})
        if "version" not in data:  # version 1: reasons were text only
            data = _from_version_1(data)
        return cls.model_validate(data, context=STORED)

    @classmethod
    def assembled(cls, parts: Mapping[str, object]) -> Self:
        """The lineage of the parts a call's records set (already typed, so not validated again)."""
        return cls.model_construct(None, **parts)


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
