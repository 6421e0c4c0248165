"""Understand the query, cheaply: no model call, only rules."""

from __future__ import annotations

from audit.record import DepthRecord, FallbackReason
from core.records import SkipReason, SourceResult
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


def depth_report(requested: str, semantic: SourceResult, unavailable: str | None) -> DepthRecord:
    """What depth actually ran: standard and deep need the semantic source to have run."""
    if requested == "fast" or semantic.status in ("ok", "empty"):
        return DepthRecord(requested=requested, effective=requested)
    if semantic.status in ("timeout", "error"):
        reason = FallbackReason(f"{requested}_{semantic.status}")
    elif unavailable:
        reason = FallbackReason.SEMANTIC_UNAVAILABLE
    elif semantic.skip is SkipReason.NO_WORDS_TO_EMBED:
        reason = FallbackReason.NO_WORDS_TO_EMBED
    else:
        reason = FallbackReason.SEMANTIC_NOT_REQUESTED
    return DepthRecord(requested=requested, effective="fast", fallback_reason=reason)
