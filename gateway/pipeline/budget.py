"""Pack one budget in UTF-8 bytes, split across sources; an item is never cut mid-way.

See docs/budget.md for how shares are redistributed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from gateway.pipeline.ranking import Ranked
from gateway.settings import BUDGET_SOURCES

SOURCE_OF_KIND = {"memory": "memory", "document": "document", "property": "property", "edge": "graph"}


def source_of(kind: str) -> str:
    return SOURCE_OF_KIND.get(kind, "external")


def size_of(entry: Ranked) -> int:
    return len(entry.record.text.encode("utf-8"))


@dataclass(frozen=True, slots=True)
class Packed:
    items: tuple[Ranked, ...]
    limit_bytes: int
    used_bytes: int
    per_source: dict[str, dict[str, int]] = field(default_factory=dict)
    dropped_ids: tuple[str, ...] = ()
    leftover: tuple[Ranked, ...] = ()  # what did not fit, best first (an expand cursor continues here)


def pack(ranked: Sequence[Ranked], limit_bytes: int, shares: Mapping[str, float]) -> Packed:
    present = {source_of(r.record.kind) for r in ranked}
    weight = sum(shares[s] for s in present)
    allotted = {s: int(limit_bytes * shares[s] / weight) if s in present and weight > 0 else 0 for s in BUDGET_SOURCES}
    if weight <= 0 and present:  # every present source has a zero share: the best items take it all
        allotted = dict.fromkeys(BUDGET_SOURCES, 0)
    used = dict.fromkeys(BUDGET_SOURCES, 0)
    taken: set[int] = set()
    for index, entry in enumerate(ranked):  # each source inside its own share, in rank order
        source, size = source_of(entry.record.kind), size_of(entry)
        if used[source] + size <= allotted[source]:
            used[source] += size
            taken.add(index)
    spare = limit_bytes - sum(used.values())
    for index, entry in enumerate(ranked):  # what is left of the budget, best first, any source
        size = size_of(entry)
        if index not in taken and size <= spare:
            used[source_of(entry.record.kind)] += size
            spare -= size
            taken.add(index)
    per_source = {s: {"share_bytes": allotted[s], "used_bytes": used[s], "dropped": 0} for s in BUDGET_SOURCES}
    for index, entry in enumerate(ranked):
        if index not in taken:
            per_source[source_of(entry.record.kind)]["dropped"] += 1
    kept = tuple(entry for index, entry in enumerate(ranked) if index in taken)
    leftover = tuple(entry for index, entry in enumerate(ranked) if index not in taken)
    return Packed(kept, limit_bytes, sum(used.values()), per_source, tuple(e.record.id for e in leftover), leftover)
