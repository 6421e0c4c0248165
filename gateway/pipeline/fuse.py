"""Fuse: reciprocal rank fusion (k = 60) over the connectors' lists, de-duplicated by id.

With `similarity` (the rerank, GATEWAY_RERANK=vectors), the semantic list is ranked again over
every fused candidate that has a stored vector, so an item only the lexical search found is still
judged by its meaning (at half weight: the semantic search did not find it), an item absent from a
text list counts as ranked just after its last, and the semantic evidence is measured from the
model's floor (a cosine at the floor counts as none), so a model whose cosines sit high does not
give every candidate the same evidence. `found_by` still names only the sources that returned an
item. See docs/fusion.md for the evidence strength each entry carries.
"""

from __future__ import annotations

from collections.abc import Mapping

from core.records import Candidate, Fused, Record

RRF_K = 60
SUBJECT_LISTS = frozenset({"exact", "graph"})  # lists whose hits are about the request's entities
SUBJECT_ONLY = 0.8
OTHER_SCALE = 0.64
RERANKED_ONLY = 0.5  # the weight of semantic evidence for an item the semantic search did not return

Lists = dict[str, list[Candidate]]


def fuse(
    lists: dict[str, tuple[Candidate, ...]],
    allowed_ids: frozenset[str],
    similarity: Mapping[str, float] | None = None,
    floor: float = 0.0,
) -> list[Fused]:
    """Only allowed ids take part; an item found by a single connector is kept. `floor` is the
    semantic floor, used with `similarity` only."""
    scores: dict[str, float] = {}
    text_match: dict[str, float] = {}
    found_by: dict[str, list[str]] = {}
    records: dict[str, Record] = {}
    admitted = {name: [c for c in candidates if c.record.id in allowed_ids] for name, candidates in lists.items()}
    admitted = {name: candidates for name, candidates in admitted.items() if candidates}
    for connector, candidates in admitted.items():
        for candidate in candidates:
            found_by.setdefault(candidate.record.id, [])
            if connector not in found_by[candidate.record.id]:
                found_by[candidate.record.id].append(connector)
            records.setdefault(candidate.record.id, candidate.record)
    scoring = reranked(admitted, records, similarity) if similarity else admitted
    text_lists = [name for name in scoring if name not in SUBJECT_LISTS]
    for connector, candidates in scoring.items():
        best = max(c.score for c in candidates)
        for candidate in candidates:
            item_id = candidate.record.id
            scores[item_id] = scores.get(item_id, 0.0) + 1.0 / (RRF_K + candidate.rank)
            if connector in text_lists:
                if similarity and connector == "semantic":
                    relative = max(candidate.score - floor, 0.0) / (best - floor) if best > floor else 0.0
                    relative *= 1.0 if connector in found_by[item_id] else RERANKED_ONLY
                else:
                    relative = max(candidate.score, 0.0) / best if best > 0 else 1.0
                text_match[item_id] = text_match.get(item_id, 0.0) + relative / len(text_lists)
        if similarity and connector in text_lists and connector != "semantic":
            listed = {c.record.id for c in candidates}
            after_last = 1.0 / (RRF_K + len(candidates) + 1)
            for item_id in records:
                if item_id not in listed:
                    scores[item_id] = scores.get(item_id, 0.0) + after_last
    about_subjects = any(name in SUBJECT_LISTS for name in admitted)

    def strength(item_id: str) -> float:
        text = text_match.get(item_id, 0.0)
        if not about_subjects:
            return text
        if any(name in SUBJECT_LISTS for name in found_by[item_id]):
            return 1.0 if text > 0 else SUBJECT_ONLY
        return OTHER_SCALE * text

    ordered = sorted(records, key=lambda i: (-scores.get(i, 0.0), i))
    return [Fused(records[i], scores.get(i, 0.0), tuple(found_by[i]), strength=strength(i)) for i in ordered]


def reranked(admitted: Lists, records: dict[str, Record], similarity: Mapping[str, float]) -> Lists:
    """The lists with the semantic one ranked again by cosine over every candidate that has one:
    the semantic search's own scores, then the stored vectors' (`similarity`)."""
    cosine = {c.record.id: c.score for c in admitted.get("semantic", [])}
    cosine.update({item_id: score for item_id, score in similarity.items() if item_id in records})
    order = sorted(cosine, key=lambda i: (-cosine[i], i))
    semantic = [Candidate(records[i], "semantic", rank, cosine[i]) for rank, i in enumerate(order, start=1)]
    return {**admitted, "semantic": semantic} if semantic else admitted
