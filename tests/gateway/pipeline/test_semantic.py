"""Search by meaning inside the policy, through the HTTP API."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gateway.writes.vectorize import lag
from tests.conftest import Gateway, open_gateway
from tests.gateway.fixtures import doc as doc  # re-exported: tests/audit/test_audit_outcomes.py takes it from here
from tests.loopback import Loopback, QuietHandler

RESEARCH = {"type": "research"}
SEMANTIC_ONLY = {"exact": False, "lexical": False, "semantic": True}


TOPICS = [
    doc("doc_refunds", "Refunds for annual plans are prorated to the remaining months of the contract."),
    doc("doc_discounts", "Discounts above twenty percent require approval from the sales director."),
    doc("doc_onboarding", "New customers get a kickoff call and a dedicated onboarding specialist."),
    doc("doc_security", "Customer data is encrypted at rest and in transit with modern ciphers."),
    doc("doc_invoices", "Invoices are issued on the first business day and are due within thirty days."),
    doc("doc_support_hours", "The support desk answers tickets on weekdays from eight to six."),
    doc("doc_sku", "Product code SKU4471B is the rack mount kit for the storage appliance."),
]
# The nearest neighbour of its own text, and forbidden to the agent: it must never surface.
SECRET = doc(
    "doc_secret_refunds", "Refunds for annual plans are prorated to the remaining months, board only.", acl=["group:executives"]
)


@pytest.fixture(scope="module")
def seeded(module_gateway: Gateway) -> tuple[Gateway, str]:
    """The topics, embedded, loaded once per backend: the tests that take this only retrieve."""
    gateway = module_gateway
    gateway.ingest("acme", TOPICS + [SECRET])
    gateway.ingest("globex", [doc("doc_globex_refunds", "Refunds for annual plans are prorated to the remaining months.")])
    gateway.embed_all()
    assert waiting(gateway) == 0
    return gateway, gateway.key("agent", groups=("sales",))


def waiting(gateway: Gateway) -> int:
    embedder = gateway.client.app.state.context.connectors.semantic.embedder  # type: ignore[attr-defined]
    return lag(gateway.store, embedder.model_id)


def ids(response: Any) -> list[str]:
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


def test_forbidden_nearest_neighbour_never_appears_and_k_permitted_still_come_back(seeded: tuple[Gateway, str]) -> None:
    gateway, key = seeded
    response = gateway.retrieve(
        key, {"task": RESEARCH, "query": SECRET["text"], "sources": SEMANTIC_ONLY, "limit": 5}, semantic=True
    )
    body = response.json()
    assert "doc_secret_refunds" not in response.text and "board only" not in response.text
    assert "doc_globex_refunds" not in response.text
    assert body["sources"]["semantic"]["status"] == "ok"
    assert body["sources"]["semantic"]["count"] == 5  # ask for 5, get 5: forbidden rows took no slot
    assert ids(response)[0] == "doc_refunds"
    assert body["items"][0]["found_by"] == ["semantic"]


def test_a_lexical_only_exact_match_survives_fusion(seeded: tuple[Gateway, str]) -> None:
    gateway, key = seeded
    response = gateway.retrieve(key, {"task": RESEARCH, "query": "SKU4471B"}, semantic=True)
    body = response.json()
    assert "doc_sku" in ids(response)
    hit = next(i for i in body["items"] if i["id"] == "doc_sku")
    assert "lexical" in hit["found_by"]
    assert body["sources"]["semantic"]["status"] in ("ok", "empty")


def test_fused_results_say_which_sources_found_them(seeded: tuple[Gateway, str]) -> None:
    gateway, key = seeded
    response = gateway.retrieve(key, {"task": RESEARCH, "query": "approval for discounts"}, semantic=True)
    top = response.json()["items"][0]
    assert top["id"] == "doc_discounts" and sorted(top["found_by"]) == ["lexical", "semantic"]


def test_a_question_about_nothing_stored_abstains(seeded: tuple[Gateway, str]) -> None:
    gateway, key = seeded
    response = gateway.retrieve(key, {"task": RESEARCH, "query": "Who won the football match last night?"}, semantic=True)
    body = response.json()
    assert body["items"] == [] and body["empty_reason"] == "no_relevant_permitted_items"
    assert body["sources"]["semantic"]["count"] > 0  # there were neighbours; none was relevant
    relevance = gateway.trace(body["trace_id"])["lineage"]["relevance"]
    assert relevance["best_similarity"] < relevance["floor"]
    assert len(relevance["below_floor"]) == body["sources"]["semantic"]["count"]


def test_meaning_without_shared_words_is_found(seeded: tuple[Gateway, str]) -> None:
    gateway, key = seeded
    response = gateway.retrieve(
        key, {"task": RESEARCH, "query": "money back when cancelling a yearly subscription"}, semantic=True
    )
    assert ids(response)[0] == "doc_refunds"


def test_depth_fast_runs_no_embedding_and_says_so(seeded: tuple[Gateway, str]) -> None:
    gateway, key = seeded
    body = gateway.retrieve(key, {"task": RESEARCH, "query": "discount approval", "depth": "fast"}, semantic=True).json()
    assert body["sources"]["semantic"]["status"] == "skipped"
    assert body["depth"] == {"requested": "fast", "effective": "fast", "fallback_reason": None}
    standard = gateway.retrieve(key, {"task": RESEARCH, "query": "discount approval"}, semantic=True).json()
    assert standard["depth"] == {"requested": "standard", "effective": "standard", "fallback_reason": None}
    assert standard["timings"]["embed_ms"] > 0


def test_deep_widens_the_query_with_the_entity_and_task(seeded: tuple[Gateway, str]) -> None:
    gateway, key = seeded
    body = gateway.retrieve(key, {"task": RESEARCH, "query": "refunds", "depth": "deep"}, semantic=True).json()
    assert body["depth"]["effective"] == "deep"
    assert "doc_refunds" in [i["id"] for i in body["items"]]


def test_a_query_without_letters_runs_no_text_or_vector_search(seeded: tuple[Gateway, str]) -> None:
    gateway, key = seeded
    body = gateway.retrieve(key, {"task": RESEARCH, "query": "4471 -- ??"}, semantic=True).json()
    assert body["sources"]["lexical"]["status"] == "skipped"
    assert body["sources"]["semantic"]["status"] == "skipped"
    assert body["depth"]["fallback_reason"] == "no_words_to_embed"


def test_new_items_are_searchable_lexically_before_they_have_vectors(gateway: Gateway) -> None:
    gateway.ingest("acme", [doc("doc_fresh", "Freshly written note about the heliotrope rollout.")])
    key = gateway.key("agent")
    response = gateway.retrieve(key, {"task": RESEARCH, "query": "heliotrope"}, semantic=True)
    assert ids(response) == ["doc_fresh"]
    gateway.embed_all()
    assert waiting(gateway) == 0


def test_semantic_off_by_setting_is_skipped_with_a_reason(sqlite_url: str, tmp_path: Path) -> None:
    with open_gateway(sqlite_url, tmp_path, embeddings="none") as gateway:
        gateway.ingest("acme", TOPICS)
        response = gateway.retrieve(gateway.key("agent"), {"task": RESEARCH, "query": "refund policy"}, semantic=True)
        body = response.json()
        assert response.status_code == 200
        assert body["sources"]["semantic"]["status"] == "skipped"
        assert "GATEWAY_EMBEDDINGS=none" in body["sources"]["semantic"]["detail"]
        assert body["depth"]["fallback_reason"] == "semantic_unavailable"
        assert ids(response) == ["doc_refunds"]


def test_a_model_that_cannot_load_degrades_semantic_search(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gateway.writes.embeddings as embeddings

    monkeypatch.setattr(embeddings, "_MODELS", {})
    monkeypatch.setattr(embeddings, "TOKENIZER", tmp_path / "missing-tokenizer.json")
    with open_gateway(sqlite_url, tmp_path, embeddings="minilm") as gateway:
        gateway.ingest("acme", TOPICS)
        response = gateway.retrieve(gateway.key("agent"), {"task": RESEARCH, "query": "refund policy"}, semantic=True)
        assert response.status_code == 200
        semantic = response.json()["sources"]["semantic"]
        assert semantic["status"] == "skipped" and "failed to load" in semantic["detail"]


class EmbeddingsDouble(Loopback):
    """An OpenAI-compatible embeddings endpoint on loopback: bag-of-words vectors, every request recorded."""

    dims = 64

    def __init__(self, fail: bool = False) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail = fail
        double = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                double.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                if double.fail:
                    self.send_response(500)
                    self.end_headers()
                    return
                data = [{"index": i, "embedding": double.vector(text).tolist()} for i, text in enumerate(body["input"])]
                payload = json.dumps({"data": data, "model": body["model"]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        super().__init__(Handler, "/v1")

    def vector(self, text: str) -> np.ndarray:
        v = np.zeros(self.dims)
        for word in text.lower().split():
            v[zlib.crc32(word.strip(".,?").encode()) % self.dims] += 1.0
        return v + 1e-3

    def settings(self, **more: Any) -> dict[str, Any]:
        """The gateway's settings for embedding through this double ("bow-64"), and `more`."""
        return {"embeddings_url": self.url, "embeddings_model": "bow-64", "embeddings_dims": self.dims, **more}


@pytest.fixture
def embeddings_double() -> Iterator[EmbeddingsDouble]:
    double = EmbeddingsDouble()
    yield double
    double.close()


def test_an_openai_compatible_endpoint_embeds_instead(
    sqlite_url: str, tmp_path: Path, embeddings_double: EmbeddingsDouble
) -> None:
    with open_gateway(sqlite_url, tmp_path, **embeddings_double.settings(embeddings_key="k" * 20)) as gateway:
        gateway.ingest("acme", TOPICS)
        gateway.embed_all()
        assert waiting(gateway) == 0
        response = gateway.retrieve(
            gateway.key("agent"), {"task": RESEARCH, "query": "invoices due thirty days", "sources": SEMANTIC_ONLY}, semantic=True
        )
        assert ids(response)[0] == "doc_invoices"
    assert all(r["path"] == "/v1/embeddings" and r["auth"] == "Bearer " + "k" * 20 for r in embeddings_double.requests)
    assert {r["body"]["model"] for r in embeddings_double.requests} == {"bow-64"}


def test_a_failing_embeddings_endpoint_degrades_to_an_error_source(sqlite_url: str, tmp_path: Path) -> None:
    failing = EmbeddingsDouble(fail=True)
    try:
        with open_gateway(sqlite_url, tmp_path, **failing.settings()) as gateway:
            gateway.ingest("acme", TOPICS)
            response = gateway.retrieve(gateway.key("agent"), {"task": RESEARCH, "query": "invoices"}, semantic=True)
            body = response.json()
            assert response.status_code == 200 and body["partial"] is True
            assert body["sources"]["semantic"]["status"] == "error"
            assert body["depth"] == {"requested": "standard", "effective": "fast", "fallback_reason": "standard_error"}
            assert ids(response) == ["doc_invoices"]  # the lexical answer is still there
    finally:
        failing.close()


def test_vectors_of_another_model_are_never_compared(seeded: tuple[Gateway, str]) -> None:
    gateway, _ = seeded
    import asyncio

    from core.errors import ConnectorError
    from core.records import RecallQuery

    connector = gateway.client.app.state.context.connectors.semantic.connector  # type: ignore[attr-defined]
    constraints_like = None
    with pytest.raises(ConnectorError):
        asyncio.run(connector.search(constraints_like, RecallQuery(text="x", vector=(0.1,) * 384, model="other-model")))


def test_a_source_past_its_deadline_is_a_timeout_and_the_answer_comes_back(database_url: str, tmp_path: Path) -> None:
    with open_gateway(database_url, tmp_path, connector_deadline_ms=1) as gateway:
        gateway.ingest("acme", TOPICS)
        gateway.embed_all()
        response = gateway.retrieve(
            gateway.key("agent"), {"task": RESEARCH, "query": "refund policy for annual plans"}, semantic=True
        )
        body = response.json()
        assert response.status_code == 200 and body["partial"] is True
        assert body["sources"]["semantic"]["status"] == "timeout"
        assert body["sources"]["semantic"]["detail"] == "deadline 1 ms"
        assert body["depth"]["fallback_reason"] == "standard_timeout"
        assert body["timings"]["total_ms"] < 1000  # the late thread was left behind, not waited for


def test_the_floor_is_read_from_the_environment_as_a_number() -> None:
    from core.errors import ConfigurationError
    from gateway.settings import load_settings

    assert load_settings(environ={"GATEWAY_SEMANTIC_FLOOR": "0.42"}).semantic_floor == 0.42
    with pytest.raises(ConfigurationError, match="GATEWAY_SEMANTIC_FLOOR"):
        load_settings(environ={"GATEWAY_SEMANTIC_FLOOR": "high"})


def test_a_query_asked_again_by_the_same_caller_is_not_embedded_again_and_no_other_caller_shares_it(
    seeded: tuple[Gateway, str],
) -> None:
    gateway, key = seeded
    query = {"task": RESEARCH, "query": "how are annual refunds approved for a cancelled plan"}
    first, again = (gateway.retrieve(key, query, semantic=True).json() for _ in range(2))
    assert "query embedded in" in first["sources"]["semantic"]["detail"]
    assert "query embedding reused" in again["sources"]["semantic"]["detail"]
    assert ids_of(first) == ids_of(again)  # the same vector, the same answer
    assert gateway.trace(again["trace_id"])["lineage"]["admission"]["work"]["embedded_chars"] == 0
    # Another caller asking the same words has it embedded for itself: a hit would tell it, by the
    # time it saves, that someone else asked them.
    other = gateway.key("rita", groups=("sales",))
    theirs = gateway.retrieve(other, query, semantic=True).json()
    assert "query embedded in" in theirs["sources"]["semantic"]["detail"], theirs["sources"]["semantic"]


def ids_of(body: dict[str, Any]) -> list[str]:
    return [item["id"] for item in body["items"]]


def test_the_query_vectors_keep_the_most_recent_within_their_size() -> None:
    from gateway.pipeline.semantic import QueryVectors

    vectors = QueryVectors(2)
    vectors.put(("a",), (1.0,))
    vectors.put(("b",), (2.0,))
    assert vectors.get(("a",)) == (1.0,)  # "a" is now the most recent
    vectors.put(("c",), (3.0,))
    assert vectors.get(("b",)) is None and vectors.get(("a",)) == (1.0,) and vectors.get(("c",)) == (3.0,)
