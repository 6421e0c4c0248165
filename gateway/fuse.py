"""Fuse: reciprocal rank fusion (k = 60) over the connectors' lists, de-duplicated by id."""

from __future__ import annotations

from dataclasses import dataclass

from connectors.base import Candidate, Record

RRF_K = 60


@dataclass(frozen=True, slots=True)
class Fused:
    record: Record
    score: float
    found_by: tuple[str, ...]
    pieces: tuple[str, ...] = ()  # for a document hit: the ids of the pieces its section was read from


def fuse(lists: dict[str, tuple[Candidate, ...]], allowed_ids: frozenset[str]) -> list[Fused]:
    """Only allowed ids take part; an item found by a single connector is kept."""
    scores: dict[str, float] = {}
    found_by: dict[str, list[str]] = {}
    records: dict[str, Record] = {}
    for connector, candidates in lists.items():
        for candidate in candidates:
            item_id = candidate.record.id
            if item_id not in allowed_ids:
                continue
            scores[item_id] = scores.get(item_id, 0.0) + 1.0 / (RRF_K + candidate.rank)
            found_by.setdefault(item_id, [])
            if connector not in found_by[item_id]:
                found_by[item_id].append(connector)
            records.setdefault(item_id, candidate.record)
    ordered = sorted(scores, key=lambda i: (-scores[i], i))
    return [Fused(records[i], scores[i], tuple(found_by[i])) for i in ordered]
