"""Retrieve and expand leave their stage records (audit.record.retrieval), and the stored lineage is
exactly what the pipeline's field-by-field assignments stored before them: rows are hash-chained and
signed, so not a key, a value or an order may move. The expected shapes below were captured from the
code the records replaced; only what varies from run to run (milliseconds, keyed fingerprints,
instants, span ids) is replaced by a marker, its key and place kept."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from audit.record import (
    CallRecord,
    Decided,
    DecisionRecord,
    EntitiesRecord,
    Resolved,
    SectionsUnread,
    SynthesisSkipped,
    TraceBuilder,
)
from core.instants import utc_now
from tests.conftest import Gateway, open_gateway
from tests.gateway.fixtures import SALES_TASK, doc, memory, seed
from tests.llm_double import LlmDouble, echo_placeholders

VARYING = {"ms", "hmac", "trace_id", "span_id", "valid_at", "as_of", "now"}


def shape(value: Any, key: str = "") -> Any:
    """The value with what varies between runs replaced by a marker; keys and their order kept."""
    if isinstance(value, dict):
        if key == "timings":  # whether the call queued is the machine's, not the pipeline's
            return {k: "<ms>" for k in value if k != "queue_ms"}
        if key == "admission":  # what admission measured (gateway/admission): not a stage's
            return "<admission>"
        return {k: shape(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v, key) for v in value]
    if key in VARYING or key.endswith("_ms"):
        return f"<{key}>"
    return value


def stored(gateway: Gateway, trace_id: str) -> str:
    """The stored lineage's shape, serialised in its stored key order."""
    return json.dumps(shape(gateway.trace(trace_id)["lineage"]))


@pytest.fixture
def llm() -> Iterator[LlmDouble]:
    with LlmDouble(echo_placeholders()) as double:
        yield double


@pytest.fixture
def seeded(llm: LlmDouble, sqlite_url: str, tmp_path: Path) -> Iterator[tuple[Gateway, str]]:
    with open_gateway(sqlite_url, tmp_path, llm_url=llm.url, llm_timeout_ms=2000) as gateway:
        alice = seed(gateway)
        pages = [memory(f"mem_page_{i:02d}", f"walrus pricing note {i:02d} " + "w" * 150) for i in range(6)]
        documents = [
            doc(f"doc_page_{i:02d}", f"walrus study {i:02d} by Jane, jane@globex.example " + "w" * 150, scope=["research"])
            for i in range(6)
        ]
        gateway.ingest("acme", pages + documents)
        yield gateway, alice


def lineages(seeded: tuple[Gateway, str]) -> dict[str, str]:
    gateway, alice = seeded
    calls: dict[str, dict[str, Any]] = {
        "allowed": {"task": SALES_TASK, "query": "wombatacl wombatsens quokkaacl", "entities": [{"id": "ent_jane"}]},
        "denied": {"task": {"type": "no_such_task"}, "query": "wombatacl"},
        "skipped": {"task": SALES_TASK, "query": "4471 -- ??", "sources": {"semantic": True}},
        "paged": {"task": SALES_TASK, "query": "walrus pricing", "budget": {"bytes": 500}},
        "synthesised": {"task": SALES_TASK, "query": "Who wrote the wombatacl note?", "synthesize": True},
        "masked": {"task": {"type": "research"}, "query": "Jane wombatacl walrus", "entities": [{"id": "ent_jane"}]},
        "masked_paged": {"task": {"type": "research"}, "query": "walrus pricing Jane", "budget": {"bytes": 500}},
        "masked_synthesised": {"task": {"type": "research"}, "query": "Who is Jane, jane@globex.example?", "synthesize": True},
        "bad": {"task": SALES_TASK, "query": "x", "mode": "fetch"},
    }
    shapes: dict[str, str] = {}
    for name, body in calls.items():
        response = gateway.retrieve(alice, body, semantic=name == "skipped")
        assert response.status_code == {"denied": 403, "bad": 400}.get(name, 200), response.text
        shapes[name] = stored(gateway, response.headers["x-trace-id"])
        if name in ("paged", "masked_paged"):
            cursor = response.json()["cursor"]
            assert cursor, (name, response.json()["items"])
            page = gateway.retrieve(alice, {"task": body["task"], "cursor": cursor, "budget": {"bytes": 500}})
            assert page.status_code == 200, page.text
            shapes[name.replace("paged", "expanded")] = stored(gateway, page.headers["x-trace-id"])
    return shapes


# The stored lineages as the pipeline's assignments left them, what varies marked. The parts several calls
# store alike are written once below and each call's lineage is put together from them in its stored key
# order; the test compares the whole serialised lineage, so every key, value and order is still held.
OTEL = {"trace_id": "<trace_id>", "span_id": "<span_id>"}
ACTOR = {"roles": ["agent"], "groups": ["sales"], "clearance": "confidential"}
ALLOWED = {"allow": True, "reasons": [], "ms": "<ms>"}
SALES = {"type": "account_followup", "scope": "sales"}
RESEARCH = {"type": "research", "scope": None}
JANE_ASKED = [{"id": {"hmac": "<hmac>", "length": 8}}]
JANE_RESOLVED = {"resolved": 1, "tombstones": 0, "aliases": 0, "alias_error": None}
SCOUT_TIMINGS = ("decide_ms", "verify_ms", "embed_ms", "semantic_ms", "lexical_ms", "graph_ms", "sections_ms", "recall_ms",
                 "fuse_ms", "mask_ms", "total_ms")  # fmt: skip


def request(
    task: dict[str, Any],
    query: int | None,
    *,
    mode: str = "scout",
    mode_requested: str | None = None,
    semantic: bool = False,
    budget: int | None = None,
    entities: list[Any] | None = None,
) -> dict[str, Any]:
    """The stored request; `query` is the length of the query (its text is stored keyed)."""
    return {
        "task": task,
        "mode": mode,
        "mode_requested": mode_requested,
        "kinds": None,
        "sources": {"exact": None, "graph": None, "lexical": None, "semantic": semantic},
        "depth": "standard",
        "budget_bytes": budget,
        "as_of": "<as_of>",
        "query": None if query is None else {"hmac": "<hmac>", "length": query},
        "entities": entities or [],
        "fetch_count": 0,
        "tags": [],
        "include_historical": False,
        "graph": {"max_depth": None, "relations": None},
    }


def constraints(
    graph: dict[str, Any], kinds: list[str], max_sensitivity: str, mask: bool, scopes: list[str], sensitivities: list[str]
) -> dict[str, Any]:
    """What the policy let alice's call see (the same principals, statuses and tenant for every task)."""
    return {
        "entity_statuses": ["active", "superseded", "disputed", "pending_deletion"],
        "graph": graph,
        "history": False,
        "kinds": kinds,
        "max_sensitivity": max_sensitivity,
        "pii": {"mask": mask, "reveal": []},
        "principals": ["user:alice", "*", "group:sales", "role:agent"],
        "scopes": scopes,
        "sensitivities": sensitivities,
        "statuses": ["active", "superseded", "disputed"],
        "tenant": "acme",
        "valid_at": "<valid_at>",
    }


SALES_SEES = constraints(
    {"max_depth": 2, "max_fanout": 10, "relations": ["works_at", "reports_to", "owns"]},
    ["property", "memory", "document", "edge"],
    "confidential",
    False,
    ["sales"],
    ["public", "internal", "confidential"],
)
RESEARCH_SEES = constraints(
    {"max_depth": 1, "max_fanout": 5, "relations": []},
    ["document"],
    "internal",
    True,
    ["research", "sales", "support"],
    ["public", "internal"],
)


def source(status: str, count: int = 0, skip: str | None = None) -> dict[str, Any]:
    """A source's stored outcome in a scout call: why it was skipped stands as both its detail and its skip."""
    return {"status": status, "count": count, "ms": "<ms>", "detail": skip, "skip": skip, "lag": None, "model": None}


NOT_REQUESTED = source("skipped", skip="not requested")
NO_ENTITY = source("skipped", skip="no resolved entity, no ids to fetch and no tags to filter by")


def lexical_sources(exact: dict[str, Any], lexical_count: int) -> dict[str, Any]:
    """The sources of a call that searched words only (graph and semantic not requested)."""
    return {"exact": exact, "lexical": source("ok", lexical_count), "graph": NOT_REQUESTED, "semantic": NOT_REQUESTED}


def pages(prefix: str, first: int, end: int) -> list[str]:
    """The ids of the seeded pages `first` to `end - 1` (`seeded` names them prefix_page_NN)."""
    return [f"{prefix}_page_{i:02d}" for i in range(first, end)]


def returned(sensitivity: dict[str, int], masked_items: int = 0) -> dict[str, Any]:
    return {"sensitivity": sensitivity, "masked_items": masked_items, "revealed": []}


def masked(person: int) -> dict[str, Any]:
    return {"masked": {"PERSON": person, "EMAIL_ADDRESS": 1}, "analysed_at_request": 0}


def synthesis(ids: list[str], masked_for_model: dict[str, int]) -> dict[str, Any]:
    """A grounded answer that cites every item sent to the model."""
    return {
        "sent": ids,
        "cited": ids,
        "invented_citations": 0,
        "flagged_as_instructions": [],
        "grounded": True,
        "error": None,
        "ms": "<ms>",
        "masked_for_model": masked_for_model,
    }


def scout(
    asked: dict[str, Any],
    sees: dict[str, Any],
    *,
    retrieved: dict[str, list[str]],
    packed: list[str],
    sent_back: dict[str, Any],
    sources: dict[str, Any],
    fallback_reason: str,
    entities: dict[str, Any] | None = None,
    subjects: list[str] | None = None,
    pii: dict[str, Any] | None = None,
    dropped_for_budget: list[str] | None = None,
    named_entities: dict[str, list[str]] | None = None,
    cursor_issued: bool = False,
    synthesised: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An allowed scout call's stored lineage; `entities`, `pii` and `synthesised` only where the call stored them."""
    lineage: dict[str, Any] = {"version": 2, "otel": OTEL, "request": asked, "actor": ACTOR, "decision": ALLOWED}
    lineage["constraints"] = sees
    if entities is not None:
        lineage["entities"] = entities
    lineage["subjects"] = subjects or []
    lineage["retrieved"] = retrieved
    lineage["dropped_by_policy"] = []
    lineage["pushdown_mismatches"] = 0
    lineage["section_pieces"] = []
    lineage["merged_into_sections"] = []
    lineage["relevance"] = {"floor": 0.65, "best_similarity": None, "below_floor": []}
    if pii is not None:
        lineage["pii"] = pii
    lineage["dropped_as_historical"] = []
    lineage["dropped_for_budget"] = dropped_for_budget or []
    lineage["packed"] = packed
    lineage["returned"] = sent_back
    lineage["named_entities"] = named_entities or {}
    lineage["cursor_issued"] = cursor_issued
    lineage["sources"] = sources
    stages = SCOUT_TIMINGS + (("synthesis_ms",) if synthesised is not None else ())
    lineage["timings"] = {stage: "<ms>" for stage in stages}
    lineage["depth"] = {"requested": "standard", "effective": "fast", "fallback_reason": fallback_reason}
    if synthesised is not None:
        lineage["synthesis"] = synthesised
    lineage["admission"] = "<admission>"
    return lineage


CONTINUES = {"status": "skipped", "detail": "expand continues a cursor", "skip": "expand continues a cursor"}


def expanded(
    task: dict[str, Any],
    sees: dict[str, Any],
    prefix: str,
    sent_back: dict[str, Any],
    pii: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The second page of a paged call: pages 02 to 05 fetched again, 02 and 03 packed, 04 and 05 over the budget."""
    lineage: dict[str, Any] = {"version": 2, "otel": OTEL, "request": request(task, None, mode="expand", budget=500)}
    lineage["actor"] = ACTOR
    lineage["decision"] = ALLOWED
    lineage["constraints"] = sees
    lineage["retrieved"] = {"expand": pages(prefix, 2, 6)}
    lineage["dropped_by_policy"] = []
    if pii is not None:
        lineage["pii"] = pii
    lineage["dropped_for_budget"] = pages(prefix, 4, 6)
    lineage["dropped_since_issued"] = []
    lineage["packed"] = pages(prefix, 2, 4)
    lineage["returned"] = sent_back
    lineage["named_entities"] = {}
    exact = {"status": "ok", "count": 4, "ms": "<ms>", "detail": None}
    lineage["sources"] = {"exact": exact, "graph": CONTINUES, "lexical": CONTINUES, "semantic": CONTINUES}
    lineage["timings"] = {"decide_ms": "<ms>", "verify_ms": "<ms>", "total_ms": "<ms>"}
    lineage["admission"] = "<admission>"
    return lineage


SALES_SYNTHESISED = ["mem_acl_ok", "mem_confidential_ok", "mem_sales_scope_ok", *pages("mem", 0, 6)]
EXPECTED: dict[str, Any] = {
    "allowed": scout(
        request(SALES, 30, entities=JANE_ASKED),
        SALES_SEES,
        entities=JANE_RESOLVED,
        subjects=["ent_jane"],
        retrieved={"exact": ["mem_attached_jane_ok"], "lexical": ["mem_confidential_ok", "mem_acl_ok"]},
        packed=["mem_attached_jane_ok", "mem_confidential_ok", "mem_acl_ok"],
        sent_back=returned({"internal": 2, "confidential": 1}),
        named_entities={"ent_jane": ["mem_attached_jane_ok"]},
        sources=lexical_sources(source("ok", 1), 2),
        fallback_reason="semantic_not_requested",
    ),
    "denied": {
        "version": 2,
        "otel": OTEL,
        "request": request({"type": "no_such_task", "scope": None}, 9),
        "actor": ACTOR,
        "decision": {"allow": False, "reasons": ["unknown_task_type"], "ms": "<ms>"},
        "admission": "<admission>",
    },
    "skipped": scout(
        request(SALES, 10, semantic=True),
        SALES_SEES,
        retrieved={},
        packed=[],
        sent_back=returned({}),
        sources={
            "exact": NO_ENTITY,
            "graph": NOT_REQUESTED,
            "lexical": NOT_REQUESTED,
            "semantic": source("skipped", skip="query has no words to embed"),
        },
        fallback_reason="no_words_to_embed",
    ),
    "paged": scout(
        request(SALES, 14, budget=500),
        SALES_SEES,
        retrieved={"lexical": pages("mem", 0, 6)},
        dropped_for_budget=pages("mem", 2, 6),
        packed=pages("mem", 0, 2),
        sent_back=returned({"internal": 2}),
        cursor_issued=True,
        sources=lexical_sources(NO_ENTITY, 6),
        fallback_reason="semantic_not_requested",
    ),
    "expanded": expanded(SALES, SALES_SEES, "mem", returned({"internal": 2})),
    "synthesised": scout(
        request(SALES, 29),
        SALES_SEES,
        retrieved={"lexical": SALES_SYNTHESISED},
        packed=SALES_SYNTHESISED,
        sent_back=returned({"internal": 8, "confidential": 1}),
        sources=lexical_sources(NO_ENTITY, 9),
        fallback_reason="semantic_not_requested",
        synthesised=synthesis(SALES_SYNTHESISED, {}),
    ),
    "masked": scout(
        request(RESEARCH, 21, entities=JANE_ASKED),
        RESEARCH_SEES,
        entities=JANE_RESOLVED,
        subjects=["ent_jane"],
        retrieved={"lexical": pages("doc", 0, 6)},
        pii=masked(person=2),
        packed=pages("doc", 0, 6),
        sent_back=returned({"internal": 6}, masked_items=6),
        sources=lexical_sources(source("empty"), 6),
        fallback_reason="semantic_not_requested",
    ),
    "masked_paged": scout(
        request(RESEARCH, 19, budget=500),
        RESEARCH_SEES,
        retrieved={"lexical": pages("doc", 0, 6)},
        pii=masked(person=1),
        dropped_for_budget=pages("doc", 2, 6),
        packed=pages("doc", 0, 2),
        sent_back=returned({"internal": 2}, masked_items=2),
        cursor_issued=True,
        sources=lexical_sources(NO_ENTITY, 6),
        fallback_reason="semantic_not_requested",
    ),
    "masked_expanded": expanded(RESEARCH, RESEARCH_SEES, "doc", returned({"internal": 2}, masked_items=2), masked(person=1)),
    "masked_synthesised": scout(
        request(RESEARCH, 33),
        RESEARCH_SEES,
        retrieved={"lexical": pages("doc", 0, 6)},
        pii=masked(person=1),
        packed=pages("doc", 0, 6),
        sent_back=returned({"internal": 6}, masked_items=6),
        sources=lexical_sources(NO_ENTITY, 6),
        fallback_reason="semantic_not_requested",
        synthesised=synthesis(pages("doc", 0, 6), {"PERSON": 1, "EMAIL_ADDRESS": 1}),
    ),
    "bad": {
        "version": 2,
        "otel": OTEL,
        "request": request(SALES, 1, mode="fetch", mode_requested="fetch"),
        "admission": "<admission>",
    },
}


def test_retrieve_and_expand_store_the_lineage_they_always_stored(seeded: tuple[Gateway, str]) -> None:
    shapes = lineages(seeded)
    assert list(shapes) == list(EXPECTED)
    for name, expected in EXPECTED.items():
        assert shapes[name] == json.dumps(expected), name  # keys, values and their order


# The stages the calls above do not reach, against what the assignments they replaced stored.
# fmt: off
UNREACHED: list[tuple[CallRecord, dict[str, Any]]] = [
    (SectionsUnread(section_lookup_error="sections: connection refused"),
     {"version": 2, "section_lookup_error": "sections: connection refused"}),
    (SynthesisSkipped.of("no personal data detector"),
     {"version": 2, "synthesis": {"sent": [], "error": "no personal data detector"}}),
    (Resolved(entities=EntitiesRecord(resolved=1, tombstones=0, aliases=0, alias_error="aliases: timed out"), subjects=("ent_a",)),
     {"version": 2, "entities": {"resolved": 1, "tombstones": 0, "aliases": 0, "alias_error": "aliases: timed out"},
      "subjects": ["ent_a"]}),
    (Decided(decision=DecisionRecord(allow=True, reasons=[], ms=0.12345), constraints={}),
     {"version": 2, "decision": {"allow": True, "reasons": [], "ms": 0.123}, "constraints": {}}),
]
# fmt: on


@pytest.mark.parametrize(("record", "expected"), UNREACHED, ids=lambda r: type(r).__name__)
def test_each_unreached_stage_stores_what_its_assignment_stored(record: CallRecord, expected: dict[str, Any]) -> None:
    trace = TraceBuilder(trace_id="tr_1", endpoint="retrieve", created_at=utc_now())
    trace.record(record)
    assert json.dumps(trace.freeze(200).lineage) == json.dumps(expected)
