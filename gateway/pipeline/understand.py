"""Understand the query, cheaply: no model call, only rules."""

from __future__ import annotations

from typing import Any

from core.records import SourceResult
from gateway.pipeline.entities import ResolvedEntity


def has_letters(text: str) -> bool:
    """A query with no letter in it runs no text or vector search."""
    return any(ch.isalpha() for ch in text)


def rephrase(query: str, resolved: tuple[ResolvedEntity, ...], task_type: str) -> str:
    """Depth `deep`: widen the query with what the request already says, the entities' names and
    the task, instead of asking a model for rephrasings."""
    names = [r.record.name for r in resolved if r.record.name]
    task_words = task_type.replace("_", " ").replace(".", " ")
    return " ".join([query, *names, task_words]).strip()


def depth_report(requested: str, semantic: SourceResult, unavailable: str | None) -> dict[str, Any]:
    """What depth actually ran: standard and deep need the semantic source to have run."""
    if requested == "fast" or semantic.status in ("ok", "empty"):
        return {"requested": requested, "effective": requested, "fallback_reason": None}
    if semantic.status in ("timeout", "error"):
        reason = f"{requested}_{semantic.status}"
    elif unavailable:
        reason = "semantic_unavailable"
    elif semantic.detail and "no words" in semantic.detail:
        reason = "no_words_to_embed"
    else:
        reason = "semantic_not_requested"
    return {"requested": requested, "effective": "fast", "fallback_reason": reason}
