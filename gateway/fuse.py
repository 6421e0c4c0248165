"""Fuse: reciprocal rank fusion (k = 60) over the connectors' lists, de-duplicated by id.

Each entry also carries its evidence `strength` in [0, 1]: the mean over the lists that returned
anything of its score divided by that list's best score (0 where the list did not find it; every
exact hit counts 1, being about the subject by construction). RRF orders; strength says which
items are of comparable relevance (gateway.ranking), which ranks alone cannot tell.
"""

from __future__ import annotations

from dataclasses import dataclass

from connectors.base import Candidate, Record

RRF_K = 60
FLAT = frozenset({"exact"})  # lists whose hits are all equally relevant


@dataclass(frozen=True, slots=True)
class Fused:
    record: Record
    score: float
    found_by: tuple[str, ...]
    pieces: tuple[str, ...] = ()  # for a document hit: the ids of the pieces its section was read from
    strength: float = 1.0


def fuse(lists: dict[str, tuple[Candidate, ...]], allowed_ids: frozenset[str]) -> list[Fused]:
    """Only allowed ids take part; an item found by a single connector is kept."""
    scores: dict[str, float] = {}
    strength: dict[str, float] = {}
    found_by: dict[str, list[str]] = {}
    records: dict[str, Record] = {}
    admitted = {name: [c for c in candidates if c.record.id in allowed_ids] for name, candidates in lists.items()}
    admitted = {name: candidates for name, candidates in admitted.items() if candidates}
    for connector, candidates in admitted.items():
        best = max(c.score for c in candidates)
        for candidate in candidates:
            item_id = candidate.record.id
            scores[item_id] = scores.get(item_id, 0.0) + 1.0 / (RRF_K + candidate.rank)
            relative = 1.0 if connector in FLAT or best <= 0 else max(candidate.score, 0.0) / best
            strength[item_id] = strength.get(item_id, 0.0) + relative / len(admitted)
            found_by.setdefault(item_id, [])
            if connector not in found_by[item_id]:
                found_by[item_id].append(connector)
            records.setdefault(item_id, candidate.record)
    ordered = sorted(scores, key=lambda i: (-scores[i], i))
    return [Fused(records[i], scores[i], tuple(found_by[i]), strength=strength[i]) for i in ordered]
