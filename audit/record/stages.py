"""One call's lineage as the stages its items moved through, for reviewers: retrieved (per source)
→ dropped (by policy with its reason, as historical, for budget) → returned → sent to the model →
cited → used, as the agent reported. Every entry links to the calls that returned the item."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from audit.record.kinds import RetrieveCall


@dataclass(frozen=True, slots=True)
class Entry:
    item: str
    note: str | None = None

    @property
    def href(self) -> str:
        return "/audit?" + urlencode({"item": self.item})


@dataclass(frozen=True, slots=True)
class Group:
    label: str | None
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class Stage:
    key: str
    title: str
    groups: tuple[Group, ...]
    absent: str = "none"


def _entries(ids: Iterable[str] | None) -> tuple[Entry, ...]:
    return tuple(Entry(i) for i in ids or ())


def lineage_stages(trace: dict[str, Any]) -> tuple[Stage, ...]:
    """The stages of a trace given as its stored columns (`endpoint`, `lineage`, and the `used` reported later)."""
    if trace.get("endpoint", "retrieve") != "retrieve":
        return ()
    return stages_of(RetrieveCall.read(trace.get("lineage")), trace.get("used") or ())


def stages_of(lineage: RetrieveCall | None, used: Sequence[str]) -> tuple[Stage, ...]:
    """A call's items in the order they moved through it: what each source found, what was dropped
    and why, what was returned, what the model saw and cited, and what the agent says it used
    (`used`, from the rows it reported later), from its lineage as read (audit.review's WholeTrace).
    Only a retrieve (or an expand) moves items: any other call (None) has none."""
    if lineage is None:
        return ()
    if lineage.retrieved is None and lineage.packed is None:
        return ()
    by_policy = tuple(Entry(d.id, d.reason) for d in lineage.dropped_by_policy or ())
    synthesis = lineage.synthesis
    no_synthesis = "no synthesis on this call" if synthesis is None else "none"
    return (
        Stage("retrieved", "Retrieved", tuple(Group(s, _entries(ids)) for s, ids in sorted((lineage.retrieved or {}).items()))),
        Stage(
            "dropped",
            "Dropped",
            tuple(
                g
                for g in (
                    Group("by policy", by_policy),
                    Group("as historical", _entries(lineage.dropped_as_historical)),
                    Group("for budget", _entries(lineage.dropped_for_budget)),
                )
                if g.entries
            ),
        ),
        Stage("packed", "Returned to the agent", (Group(None, _entries(lineage.packed)),)),
        Stage("sent", "Sent to the model", (Group(None, _entries(synthesis.sent if synthesis else None)),), no_synthesis),
        Stage("cited", "Cited by the model", (Group(None, _entries(synthesis.cited if synthesis else None)),), no_synthesis),
        Stage("used", "Used, as the agent reported", (Group(None, _entries(list(used))),), "none reported"),
    )
