"""The typed lineage: what a call writes reads back through the same types, in both versions."""

from __future__ import annotations

from audit.record import (
    LINEAGE_VERSION,
    Accounted,
    Budgeted,
    DepthRecord,
    Dropped,
    FallbackReason,
    RetrieveCall,
    SourceRecord,
    Synthesised,
    TraceBuilder,
    lineage_stages,
    read_lineage,
)
from core.instants import utc_now
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
    lineage = read_lineage("retrieve", VERSION_1)
    assert isinstance(lineage, RetrieveCall)
    assert lineage.version == 1
    assert lineage.task_type == "research"
    assert lineage.packed == ("mem_1",)
    assert lineage.dropped_by_policy == (Dropped(id="mem_2", reason="acl"),)
    sources = lineage.sources or {}
    assert sources["semantic"].skip is SkipReason.NO_WORDS_TO_EMBED
    assert sources["graph"].skip is SkipReason.NOT_REQUESTED
    assert sources["exact"].skip is None  # unknown text is not guessed at
    assert sources["lexical"].skip is None
    assert lineage.depth == DepthRecord(requested="standard", effective="fast", fallback_reason=FallbackReason.NO_WORDS_TO_EMBED)


def test_what_is_written_reads_back_equal_and_carries_the_version() -> None:
    trace = TraceBuilder("tr_1", "retrieve", utc_now())
    trace.record(Budgeted(dropped_as_historical=(), dropped_for_budget=(), packed=("mem_1",), cursor_issued=False))
    sources = {"semantic": SourceRecord(status="skipped", detail=SkipReason.DEPTH_FAST.value, skip=SkipReason.DEPTH_FAST)}
    trace.record(Accounted(sources=sources, timings=None, depth=None))
    trace.record(
        Synthesised(
            sent=("mem_1",),
            cited=(),
            invented_citations=0,
            flagged_as_instructions=(),
            grounded=None,
            error=None,
            ms=1.0,
            masked_for_model={},
        )
    )
    lineage = trace.lineage
    stored = trace.freeze(200).lineage
    assert stored["version"] == LINEAGE_VERSION == 2
    assert stored["sources"]["semantic"]["skip"] == "depth fast runs no embedding"
    assert stored["synthesis"]["error"] is None  # written as null, not dropped
    assert "timings" not in stored and "depth" not in stored  # a part left as None is absent
    assert "decision" not in stored and "retrieved" not in stored  # parts never written stay absent
    assert read_lineage("retrieve", stored).to_json() == lineage.to_json() == stored


def test_the_wire_entry_of_a_source_keeps_its_detail_and_leaves_the_code_to_the_trail() -> None:
    record = SourceRecord(status="skipped", detail=SkipReason.NO_WORDS_TO_EMBED.value, skip=SkipReason.NO_WORDS_TO_EMBED)
    assert record.wire() == {"status": "skipped", "count": 0, "ms": 0.0, "detail": "query has no words to embed"}


def test_the_stages_read_both_versions_alike() -> None:
    old = lineage_stages({"lineage": VERSION_1, "used": ["mem_1"]})
    new = lineage_stages({"lineage": read_lineage("retrieve", VERSION_1).to_json(), "used": ["mem_1"]})
    assert old == new
    stages = {stage.key: stage for stage in old}
    assert [e.item for g in stages["retrieved"].groups for e in g.entries] == ["mem_1", "mem_2"]
    assert [(e.item, e.note) for g in stages["dropped"].groups for e in g.entries] == [("mem_2", "acl")]
    assert [e.item for g in stages["cited"].groups for e in g.entries] == ["mem_1"]
    assert lineage_stages({"lineage": {"version": 2, "ingest": {"created": 1}}}) == ()
    assert lineage_stages({"endpoint": "ingest", "lineage": VERSION_1}) == ()  # only a retrieve moves items
