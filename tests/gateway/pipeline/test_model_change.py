"""A store embedded with one model and served with another: the new model's vectors are made
(the worker, or `gateway embed`), and until then no ranking compares vectors of two models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from core.tables import ItemVector
from gateway.background import Limit
from gateway.writes import integer_model
from gateway.writes.vectorize import embed_pending, lag
from tests.conftest import Gateway, open_gateway

DOCS = [
    {"id": f"doc_{i}", "kind": "document", "text": text, "acl": ["*"]}
    for i, text in enumerate(
        [
            "Refunds for annual plans are prorated to the remaining months.",
            "Discounts above twenty percent need the sales director's approval.",
            "Invoices are due within thirty days of the first business day.",
        ]
    )
]
SEMANTIC_ONLY = {"exact": False, "lexical": False, "semantic": True}


def models(gateway: Gateway) -> list[str]:
    table = ItemVector.__table__  # type: ignore[attr-defined]
    with gateway.store.connect() as conn:
        return sorted(conn.execute(select(table.c.model)).scalars())


def ask(gateway: Gateway, sources: dict[str, bool] | None = None) -> dict[str, Any]:
    body = {"task": {"type": "research"}, "query": "refund of an annual plan", "sources": sources or {}}
    response = gateway.retrieve(gateway.key("agent"), {k: v for k, v in body.items() if v}, semantic=True)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_a_store_of_minilm_vectors_served_with_bge_is_embedded_again_never_mixed(sqlite_url: str, tmp_path: Path) -> None:
    with open_gateway(sqlite_url, tmp_path, embeddings="minilm") as gateway:
        gateway.ingest("acme", DOCS)
        gateway.embed_all()
        assert models(gateway) == [integer_model.model_id()] * 3
        assert [i["id"] for i in ask(gateway, SEMANTIC_ONLY)["items"]][0] == "doc_0"

    with open_gateway(sqlite_url, tmp_path, background_embedding=False) as gateway:
        embedder = gateway.client.app.state.context.connectors.semantic.embedder  # type: ignore[attr-defined]
        assert embedder.model_id.startswith("bge-small")
        assert lag(gateway.store, embedder.model_id) == 3  # every MiniLM vector is stale for bge
        before = ask(gateway, SEMANTIC_ONLY)
        assert before["sources"]["semantic"]["status"] == "empty" and before["items"] == []  # not ranked by MiniLM's vectors
        # One item re-embedded: the rerank reads that one stored vector and no MiniLM one.
        assert embed_pending(gateway.store, embedder, Limit(1, 1 << 30)).items == 1
        fused = ask(gateway, {"exact": False, "lexical": True, "semantic": True})
        assert "of" in fused["sources"]["semantic"]["detail"]
        reranked = fused["sources"]["semantic"]["detail"].split("; ")[-1]
        assert reranked.startswith("1 of ") and reranked.endswith("candidates reranked by stored vectors"), reranked
        gateway.embed_all()
        assert models(gateway) == [embedder.model_id] * 3
        after = ask(gateway, SEMANTIC_ONLY)
        assert after["sources"]["semantic"]["model"] == embedder.model_id
        assert [i["id"] for i in after["items"]][0] == "doc_0"
