"""The typed lineage: what a call writes reads back through the same types, in both versions."""

from __future__ import annotations

from audit.record import (
    LINEAGE_VERSION,
    DepthRecord,
    Dropped,
    FallbackReason,
    Lineage,
    SourceRecord,
    SynthesisRecord,
    lineage_stages,
    read_lineage,
)
from core.records import SkipReason

# A version-1 row as the gateway stored it before the lineage was typed (no version, text reasons).
VERSION_1 = {
    "request": {"task": {"type": "research"}, "mode": "scout", "query": {"hmac": "ab" * 16, "length": 4}},
    "decision": {"allow": True, "reasons": [], "ms": 0.5},
    "retrieved": {"lexical": ["mem_1", "mem_2"]},
    "dropped_by_policy": [{"id": "mem_2", "reason": "acl"}],
    "packed": ["mem_1"],
    "sources": {
        "semantic": {"status": "skipped", "count": 0, "ms": 0.0, "detail": "query has no words to embed"},
        "graph": {"status": "skipped", "count": 0, "ms": 0.0, "detail": "not requested"},
        "exact": {"status": "skipped", "count": 0, "ms": 0.0, "detail": "something no version knew"},
        "lexical": {"status": "ok", "count": 1, "ms": 2.0},
    },
    "depth": {"requested": "standard", "effective": "fast", "fallback_reason": "no_words_to_embed"},
    "synthesis": {"sent": ["mem_1"], "cited": ["mem_1"], "error": None},
}


def test_a_version_1_row_reads_with_its_reasons_typed() -> None:
    lineage = read_lineage(VERSION_1)
    assert lineage.version == 1
    assert lineage.task_type == "research"
    assert lineage.packed == ["mem_1"]
    assert lineage.dropped_by_policy == [Dropped(id="mem_2", reason="acl")]
    sources = lineage.sources or {}
    assert sources["semantic"].skip is SkipReason.NO_WORDS_TO_EMBED
    assert sources["graph"].skip is SkipReason.NOT_REQUESTED
    assert sources["exact"].skip is None  # unknown text is not guessed at
    assert sources["lexical"].skip is None
    assert lineage.depth == DepthRecord(requested="standard", effective="fast", fallback_reason=FallbackReason.NO_WORDS_TO_EMBED)


def test_what_is_written_reads_back_equal_and_carries_the_version() -> None:
    lineage = Lineage()
    lineage.packed = ["mem_1"]
    lineage.sources = {"semantic": SourceRecord(status="skipped", detail=SkipReason.DEPTH_FAST.value, skip=SkipReason.DEPTH_FAST)}
    lineage.synthesis = SynthesisRecord(sent=["mem_1"], error=None)
    stored = lineage.to_json()
    assert stored["version"] == LINEAGE_VERSION == 2
    assert stored["sources"]["semantic"]["skip"] == "depth fast runs no embedding"
    assert stored["synthesis"]["error"] is None  # written as null, not dropped
    assert "decision" not in stored and "retrieved" not in stored  # parts never written stay absent
    assert read_lineage(stored) == lineage


def test_the_wire_entry_of_a_source_keeps_its_detail_and_leaves_the_code_to_the_trail() -> None:
    record = SourceRecord(status="skipped", detail=SkipReason.NO_WORDS_TO_EMBED.value, skip=SkipReason.NO_WORDS_TO_EMBED)
    assert record.wire() == {"status": "skipped", "count": 0, "ms": 0.0, "detail": "query has no words to embed"}


def test_the_stages_read_both_versions_alike() -> None:
    old = lineage_stages({"lineage": VERSION_1, "used": ["mem_1"]})
    new = lineage_stages({"lineage": read_lineage(VERSION_1).to_json(), "used": ["mem_1"]})
    assert old == new
    stages = {stage.key: stage for stage in old}
    assert [e.item for g in stages["retrieved"].groups for e in g.entries] == ["mem_1", "mem_2"]
    assert [(e.item, e.note) for g in stages["dropped"].groups for e in g.entries] == [("mem_2", "acl")]
    assert [e.item for g in stages["cited"].groups for e in g.entries] == ["mem_1"]
    assert lineage_stages({"lineage": {"version": 2, "ingest": {"created": 1}}}) == ()
