"""Abstain honestly: a fused rank is relative, so relevance is judged on absolute evidence.

An item stays when an exact lookup or a lexical match found it, or when its cosine similarity to
the query clears the floor (`GATEWAY_SEMANTIC_FLOOR`). When nothing clears it, the answer is empty,
not the least irrelevant item. How the default floor was calibrated: bench/README.md.
"""

from __future__ import annotations

from typing import Any

from core.records import Candidate, Fused


def above_floor(fused: list[Fused], semantic: tuple[Candidate, ...], floor: float) -> tuple[list[Fused], dict[str, Any]]:
    similarity = {c.record.id: c.score for c in semantic}
    kept, below = [], []
    for entry in fused:
        other_evidence = any(source != "semantic" for source in entry.found_by)
        if other_evidence or similarity.get(entry.record.id, -1.0) >= floor:
            kept.append(entry)
        else:
            below.append(entry.record.id)
    report = {
        "floor": floor,
        "best_similarity": round(max(similarity.values()), 4) if similarity else None,
        "below_floor": below,
    }
    return kept, report
