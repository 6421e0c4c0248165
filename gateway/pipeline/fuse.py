"""Fuse: reciprocal rank fusion (k = 60) over the connectors' lists, de-duplicated by id.

See docs/fusion.md for the evidence strength each entry carries.
"""

from __future__ import annotations

from core.records import Candidate, Fused, Record

RRF_K = 60
SUBJECT_LISTS = frozenset({"exact", "graph"})  # lists whose hits are about the request's entities
SUBJECT_ONLY = 0.8
OTHER_SCALE = 0.64


def fuse(lists: dict[str, tuple[Candidate, ...]], allowed_ids: frozenset[str]) -> list[Fused]:
    """Only allowed ids take part; an item found by a single connector is kept."""
    scores: dict[str, float] = {}
    text_match: dict[str, float] = {}
    found_by: dict[str, list[str]] = {}
    records: dict[str, Record] = {}
    admitted = {name: [c for c in candidates if c.record.id in allowed_ids] for name, candidates in lists.items()}
    admitted = {name: candidates for name, candidates in admitted.items() if candidates}
    text_lists = [name for name in admitted if name not in SUBJECT_LISTS]
    for connector, candidates in admitted.items():
        best = max(c.score for c in candidates)
        for candidate in candidates:
            item_id = candidate.record.id
            scores[item_id] = scores.get(item_id, 0.0) + 1.0 / (RRF_K + candidate.rank)
            if connector in text_lists:
                relative = max(candidate.score, 0.0) / best if best > 0 else 1.0
                text_match[item_id] = text_match.get(item_id, 0.0) + relative / len(text_lists)
            found_by.setdefault(item_id, [])
            if connector not in found_by[item_id]:
                found_by[item_id].append(connector)
            records.setdefault(item_id, candidate.record)
    about_subjects = any(name in SUBJECT_LISTS for name in admitted)

    def strength(item_id: str) -> float:
        text = text_match.get(item_id, 0.0)
        if not about_subjects:
            return text
        if any(name in SUBJECT_LISTS for name in found_by[item_id]):
            return 1.0 if text > 0 else SUBJECT_ONLY
        return OTHER_SCALE * text

    ordered = sorted(scores, key=lambda i: (-scores[i], i))
    return [Fused(records[i], scores[i], tuple(found_by[i]), strength=strength(i)) for i in ordered]
