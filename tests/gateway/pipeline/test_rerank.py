"""The rerank: after the verify, the semantic list is ranked again over every allowed candidate by
its stored vector; `found_by` keeps naming only the sources that returned an item."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.records import Candidate, Record
from gateway.pipeline.fuse import fuse
from tests.conftest import Gateway, open_gateway
from tests.gateway.fixtures import doc


def record(item_id: str) -> Record:
    return Record(
        id=item_id,
        kind="document",
        tenant="t",
        text=item_id,
        acl=("*",),
        sensitivity="internal",
        scope=(),
        authority="unreviewed",
        status="active",
    )


def listed(connector: str, *scored: tuple[str, float]) -> tuple[Candidate, ...]:
    return tuple(Candidate(record(i), connector, rank, score) for rank, (i, score) in enumerate(scored, start=1))


LISTS = {
    "lexical": listed("lexical", ("a", 9.0), ("b", 8.0)),
    "semantic": listed("semantic", ("c", 0.7)),
}


def test_an_item_only_the_lexical_search_found_is_judged_by_its_meaning_too() -> None:
    allowed = frozenset({"a", "b", "c"})
    plain = fuse(LISTS, allowed)
    assert [f.record.id for f in plain][0] in ("a", "c")  # rank 1 of either list, as RRF has it
    reranked = fuse(LISTS, allowed, {"a": 0.2, "b": 0.8, "c": 0.7})
    assert [f.record.id for f in reranked] == ["b", "a", "c"]
    found_by = {f.record.id: f.found_by for f in reranked}
    assert found_by == {"a": ("lexical",), "b": ("lexical",), "c": ("semantic",)}  # honest: b was not found by meaning
    # b is now as close in meaning as the best: its evidence strength counts that.
    strength = {f.record.id: f.strength for f in reranked}
    assert strength["b"] > strength["a"]


def test_a_similarity_of_an_item_the_policy_did_not_allow_changes_nothing() -> None:
    allowed = frozenset({"a", "c"})
    reranked = fuse(LISTS, allowed, {"a": 0.2, "b": 0.99, "c": 0.7, "zz": 0.99})
    assert {f.record.id for f in reranked} == {"a", "c"}
    assert [f.record.id for f in reranked] == [f.record.id for f in fuse(LISTS, allowed, {"a": 0.2, "c": 0.7})]


DOCS = [
    doc("doc_refund_terms", "Prorated refunds: annual subscriptions return the unused months when cancelled early."),
    doc("doc_refund_word", "The word refund appears in the glossary of billing terms, next to invoice and credit."),
    doc("doc_hours", "The support desk answers tickets on weekdays from eight to six."),
    # Closest in meaning to the question, and forbidden to the agent.
    doc("doc_secret", "Refund for annual plans: the unused months are returned, board decision.", acl=["group:executives"]),
]
QUESTION = "refund for an annual plan cancelled early"


def reranked_call(gateway: Gateway, key: str) -> dict[str, Any]:
    response = gateway.retrieve(key, {"task": {"type": "research"}, "query": QUESTION, "limit": 10}, semantic=True)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_the_rerank_reads_only_allowed_candidates_and_says_how_many(sqlite_url: str, tmp_path: Path) -> None:
    with open_gateway(sqlite_url, tmp_path) as gateway:
        gateway.ingest("acme", DOCS)
        gateway.embed_all()
        agent = gateway.key("agent", groups=("sales",))
        body = reranked_call(gateway, agent)
        text = str(body)
        assert "doc_secret" not in text and "board decision" not in text
        semantic = body["sources"]["semantic"]
        # The count is of the caller's own candidates (the three documents it may see), never the
        # forbidden fourth, though the semantic search's nearest neighbour is that one.
        assert "3 of 3 candidates reranked by stored vectors" in semantic["detail"]
        assert semantic["model"].startswith("bge-small-en-v1.5-q@")
        # found_by names a source only when that source returned the item (the trail's `retrieved`).
        retrieved = gateway.trace(body["trace_id"])["lineage"]["retrieved"]
        for item in body["items"]:
            assert all(item["id"] in retrieved[source] for source in item["found_by"]), item
        executive = reranked_call(gateway, gateway.key("exec", groups=("executives",)))
        assert "doc_secret" in {item["id"] for item in executive["items"]}
        assert "4 of 4 candidates reranked" in executive["sources"]["semantic"]["detail"]


def test_with_the_rerank_off_the_fusion_is_plain(sqlite_url: str, tmp_path: Path) -> None:
    with open_gateway(sqlite_url, tmp_path, rerank="off") as gateway:
        gateway.ingest("acme", DOCS)
        gateway.embed_all()
        body = reranked_call(gateway, gateway.key("agent"))
        assert "reranked" not in body["sources"]["semantic"]["detail"]
