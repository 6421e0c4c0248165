"""The gateway on a live Weaviate (GATEWAY_WEAVIATE_URL), through its HTTP API: the same answers as
the in-process index while items are written, re-embedded, re-shared, merged and deleted, with the
forbidden nearest neighbours never surfacing."""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from connectors.weaviate import collection_for
from gateway.writes import integer_model
from gateway.writes.embeddings import OnnxBgeSmall
from gateway.writes.vectorize import embed_all, lag, publish_to_weaviate
from tests.conftest import Gateway, open_gateway
from tests.engines import Endpoint
from tests.gateway.fixtures import SALES_TASK
from tests.gateway.pipeline.test_semantic import TOPICS as SEMANTIC_TOPICS

SEMANTIC_ONLY = {"exact": False, "lexical": False, "semantic": True, "graph": False}


def doc(item_id: str, text: str, **envelope: Any) -> dict[str, Any]:
    return {"id": item_id, "kind": "document", "text": text, "acl": ["*"], "scope": ["sales"], **envelope}


def memory(item_id: str, text: str, **envelope: Any) -> dict[str, Any]:
    return {"id": item_id, "kind": "memory", "text": text, "acl": ["*"], "scope": ["sales"], **envelope}


TOPICS = [{**topic, "scope": ["sales"]} for topic in SEMANTIC_TOPICS[:5]]  # refunds, discounts, onboarding, security, invoices
# The refunds question's nearest neighbours, each forbidden by one hard filter: none may surface.
TWINS = [
    doc("twin_acl", "Refunds for annual plans are prorated to the remaining months, board only.", acl=["group:executives"]),
    doc("twin_restricted", "Refunds for annual plans are prorated to remaining months (restricted).", sensitivity="restricted"),
    doc("twin_scope", "Refunds for annual plans are prorated to the remaining months, support desk.", scope=["support"]),
    doc("twin_expired", "Refunds for annual plans were prorated to the remaining months.", valid_to="2020-01-01T00:00:00Z"),
    doc("twin_retracted", "Refunds for annual plans are prorated to the remaining contract months.", status="retracted"),
]
PEOPLE = [
    {"id": "ent_old", "kind": "entity", "entity_type": "contact", "email": "old@acme.example", "acl": ["*"]},
    {"id": "ent_new", "kind": "entity", "entity_type": "contact", "email": "new@acme.example", "acl": ["*"]},
    memory("mem_old_pref", "Prefers to be called about renewals on Tuesday mornings.", attached_to="ent_old"),
    memory("mem_new_pref", "Prefers written quotes before any renewal call.", attached_to="ent_new"),
]
QUESTIONS = {
    "refunds": "how are refunds for a yearly plan calculated",
    "security": "is customer information protected with encryption",
    "renewal": "when does this contact like renewal calls",
}


def wait_embedded(gateway: Gateway, seconds: float = 60) -> None:
    """Until the background worker has embedded (and, on Weaviate, copied) everything written."""
    semantic = gateway.client.app.state.context.connectors.semantic  # type: ignore[attr-defined]
    deadline = time.monotonic() + seconds
    while lag(gateway.store, semantic.embedder.model_id):
        semantic.worker.nudge()
        assert time.monotonic() < deadline, "the embedding worker did not catch up"
        time.sleep(0.1)


def ask(gateway: Gateway, key: str, question: str, **extra: Any) -> tuple[str, list[str]]:
    response = gateway.retrieve(
        key, {"task": SALES_TASK, "query": QUESTIONS[question], "sources": SEMANTIC_ONLY, "limit": 4, **extra}, semantic=True
    )
    assert response.status_code == 200, response.text
    body = response.json()
    return body["sources"]["semantic"]["status"], [i["id"] for i in body["items"]]


def scenario(gateway: Gateway) -> list[tuple[str, tuple[str, list[str]]]]:
    """The same writes and questions on any gateway; every answer, in order, by step."""
    key = gateway.key("alice", groups=("sales",), clearance="confidential")
    writer = gateway.auth(gateway.key("writer-acme", roles=("ingest",)))
    answers: list[tuple[str, tuple[str, list[str]]]] = []

    def step(name: str, *questions: str, **extra: Any) -> None:
        wait_embedded(gateway)
        for question in questions:
            answers.append((f"{name}/{question}", ask(gateway, key, question, **extra)))

    gateway.ingest("acme", TOPICS + TWINS + PEOPLE)
    gateway.ingest("globex", [doc("doc_globex_refunds", "Refunds for annual plans are prorated to the remaining months.")])
    step("written", "refunds", "security")
    # Re-embedding: new text under the same id moves the item to its new meaning.
    gateway.ingest("acme", [doc("doc_security", "Refunds of a yearly plan follow the months left on the contract.")])
    step("rewritten", "refunds", "security")
    # Re-shared: narrowed, the item leaves the answer; widened again, it comes back.
    gateway.ingest("acme", [doc("doc_refunds", TOPICS[0]["text"], acl=["group:executives"])])
    step("narrowed", "refunds")
    gateway.ingest("acme", [TOPICS[0]])
    step("widened", "refunds")
    # Merged: what was said about the old record belongs to the survivor.
    merged = gateway.client.post("/v1/entities/ent_old/merge", json={"into": "ent_new"}, headers=writer)
    assert merged.status_code == 200, merged.text
    step("merged", "renewal", entities=[{"id": "ent_new"}])
    # Deleted: a tombstoned entity's items disappear though the index still holds their vectors.
    deleted = gateway.client.delete("/v1/entities/ent_new", headers=writer)
    assert deleted.status_code == 200, deleted.text
    step("deleted", "renewal", "refunds")
    return answers


@pytest.fixture
def collection() -> str:
    return f"GatewayItemLive{secrets.token_hex(4)}"


def on_weaviate(endpoint: Endpoint, collection: str, tmp_path: Path, **overrides: Any) -> Any:
    return open_gateway(
        f"sqlite:///{tmp_path / 'weaviate.db'}",
        tmp_path / "weaviate",
        weaviate_url=endpoint.url,
        weaviate_grpc_port=endpoint.grpc_port,
        weaviate_api_key=endpoint.api_key,
        weaviate_collection=collection,
        **overrides,
    )


MODELS = (OnnxBgeSmall.MODEL_ID, integer_model.model_id())


@pytest.fixture
def drop(weaviate_endpoint: Endpoint) -> Iterator[Callable[[str], None]]:
    """Drops, after the test, the collections the gateway makes of this base name (one per model)."""
    made: list[str] = []
    yield made.append
    client = weaviate_endpoint.client()
    try:
        for name in made:
            for model in MODELS:
                client.collections.delete(collection_for(name, model))
    finally:
        client.close()


def copies(endpoint: Endpoint, collection: str, model: str = OnnxBgeSmall.MODEL_ID) -> int:
    """Objects in the tenant acme's shard of the model's collection."""
    client = endpoint.client()
    try:
        name = collection_for(collection, model)
        if not client.collections.exists(name):
            return 0
        return len(client.collections.use(name).with_tenant("acme").query.fetch_objects(limit=100).objects)
    finally:
        client.close()


def test_weaviate_answers_as_the_in_process_index_through_writes_merges_and_deletes(
    weaviate_endpoint: Endpoint, collection: str, drop: Callable[[str], None], tmp_path: Path
) -> None:
    with open_gateway(f"sqlite:///{tmp_path / 'memory.db'}", tmp_path / "memory", vector_index="memory") as gateway:
        expected = scenario(gateway)
    drop(collection)
    with on_weaviate(weaviate_endpoint, collection, tmp_path) as gateway:
        assert type(gateway.client.app.state.context.connectors.semantic.connector.inner).__name__ == "WeaviateConnector"  # type: ignore[attr-defined]
        found = scenario(gateway)
    assert found == expected
    answers = dict(found)
    # The comparison is between real answers, and they are the right ones.
    assert answers["written/refunds"] == ("ok", ["doc_refunds"]) and answers["written/security"] == ("ok", ["doc_security"])
    # rewritten about refunds, the item answers the refunds question first and no longer the security one
    assert answers["rewritten/refunds"][1][0] == "doc_security" and "doc_security" not in answers["rewritten/security"][1]
    assert "doc_refunds" not in answers["narrowed/refunds"][1] and "doc_refunds" in answers["widened/refunds"][1]
    assert set(answers["merged/renewal"][1]) >= {"mem_old_pref", "mem_new_pref"}
    assert not {"mem_old_pref", "mem_new_pref"} & set(answers["deleted/renewal"][1])
    for name, (_, ids) in found:
        assert not any(i.startswith("twin_") or i == "doc_globex_refunds" for i in ids), (name, ids)


def test_gateway_embed_copies_into_weaviate_before_it_counts_an_item_embedded(
    weaviate_endpoint: Endpoint, collection: str, drop: Callable[[str], None], tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from gateway.cli import main

    drop(collection)
    with on_weaviate(weaviate_endpoint, collection, tmp_path, background_embedding=False) as gateway:
        gateway.ingest("acme", TOPICS)
        database = str(gateway.settings.effective_database_url)
        env = {
            "GATEWAY_WEAVIATE_URL": weaviate_endpoint.url,
            "GATEWAY_WEAVIATE_GRPC_PORT": str(weaviate_endpoint.grpc_port),
            "GATEWAY_WEAVIATE_COLLECTION": collection,
        }
        result = CliRunner().invoke(main, ["embed", "--database-url", database, "--threads", "1"], env=env)
        assert result.exit_code == 0, result.output
        assert f"{len(TOPICS)} items embedded; 0 waiting" in result.output
        key = gateway.key("alice", groups=("sales",), clearance="confidential")
        assert ask(gateway, key, "security")[1][0] == "doc_security"  # served from Weaviate's copy


def test_an_unreachable_weaviate_leaves_items_waiting_for_gateway_embed(tmp_path: Path, collection: str) -> None:
    from click.testing import CliRunner

    from gateway.cli import main

    with open_gateway(f"sqlite:///{tmp_path / 'g.db'}", tmp_path / "g", background_embedding=False) as gateway:
        gateway.ingest("acme", TOPICS[:2])
        database = str(gateway.settings.effective_database_url)
    env = {
        "GATEWAY_WEAVIATE_URL": "http://127.0.0.1:9",
        "GATEWAY_WEAVIATE_GRPC_PORT": "10",
        "GATEWAY_WEAVIATE_COLLECTION": collection,
    }
    result = CliRunner().invoke(main, ["embed", "--database-url", database, "--threads", "1"], env=env)
    assert result.exit_code == 1
    assert "the items not yet copied are still waiting" in result.output and "Traceback" not in result.output
    with open_gateway(database, tmp_path / "g", background_embedding=False) as gateway:
        semantic = gateway.client.app.state.context.connectors.semantic  # type: ignore[attr-defined]
        assert lag(gateway.store, semantic.embedder.model_id) == 2


def test_a_weaviate_grpc_port_equal_to_its_http_port_is_refused_at_start(tmp_path: Path) -> None:
    from core.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="GATEWAY_WEAVIATE_GRPC_PORT \\(8080\\) must differ"):
        with open_gateway(
            f"sqlite:///{tmp_path / 'g.db'}", tmp_path, weaviate_url="http://127.0.0.1:8080", weaviate_grpc_port=8080
        ):
            pass


GUIDE = """---
acl: ["*"]
scope: [sales]
title: Travel guide
---
# Hotels
Hotel stays are booked through the travel desk and capped at two hundred euros a night.
# Trains
Second class train tickets are the default for trips under four hours.
# Flights
Economy flights need a manager's approval when they cost more than five hundred euros.
"""


def test_a_documents_removed_pieces_leave_weaviate_when_a_search_meets_them(
    weaviate_endpoint: Endpoint, collection: str, drop: Callable[[str], None], tmp_path: Path
) -> None:
    drop(collection)
    with on_weaviate(weaviate_endpoint, collection, tmp_path) as gateway:
        key = gateway.key("alice", groups=("sales",), clearance="confidential")
        writer = gateway.auth(gateway.key("writer-acme", roles=("ingest",)))

        def put(body: str) -> None:
            response = gateway.client.put("/v1/documents/travel", content=body.encode(), headers=writer)
            assert response.status_code == 200, response.text

        put(GUIDE)
        wait_embedded(gateway)
        assert copies(weaviate_endpoint, collection) == 3
        put(GUIDE.split("# Trains")[0])  # only the hotels section is left: two pieces removed from the store
        wait_embedded(gateway)
        assert copies(weaviate_endpoint, collection) == 3  # Weaviate still holds the removed pieces' copies
        question = {
            "task": SALES_TASK,
            "query": "which class of train ticket and which flights need approval",
            "sources": SEMANTIC_ONLY,
            "limit": 3,
        }
        response = gateway.retrieve(key, question, semantic=True)
        assert response.status_code == 200, response.text
        assert [i["id"] for i in response.json()["items"]] in ([], ["travel:0000"])
        assert (
            copies(weaviate_endpoint, collection) == 1
        )  # met by that search, confirmed gone from the store, dropped from Weaviate


def copied(gateway: Gateway) -> None:
    """Embed what waits and copy it into Weaviate, now, as the worker would (it is off here)."""
    semantic = gateway.client.app.state.context.connectors.semantic  # type: ignore[attr-defined]
    embed_all(gateway.store, semantic.embedder, publish=functools.partial(publish_to_weaviate, semantic.connector.inner))


def test_each_model_has_its_own_collection_and_a_new_one_is_filled_again(
    weaviate_endpoint: Endpoint, collection: str, drop: Callable[[str], None], tmp_path: Path
) -> None:
    """MiniLM's collection, then bge's on the same store: the bge one starts empty and is filled by
    embedding again, and no search compares vectors of the two. A collection the store's vectors
    were never copied into (a new base name) makes them wait again rather than search an empty index."""
    drop(collection)
    drop(f"{collection}Renamed")
    with on_weaviate(weaviate_endpoint, collection, tmp_path, embeddings="minilm", background_embedding=False) as gateway:
        gateway.ingest("acme", TOPICS[2:4])
        copied(gateway)
    assert copies(weaviate_endpoint, collection, integer_model.model_id()) == 2
    with on_weaviate(weaviate_endpoint, collection, tmp_path, background_embedding=False) as gateway:
        key = gateway.key("alice", groups=("sales",), clearance="confidential")
        assert lag(gateway.store, OnnxBgeSmall.MODEL_ID) == 2
        assert ask(gateway, key, "security") == ("empty", [])  # MiniLM's copies are in another collection
        copied(gateway)
        assert copies(weaviate_endpoint, collection) == 2
        assert ask(gateway, key, "security")[1][0] == "doc_security"
    assert copies(weaviate_endpoint, collection, integer_model.model_id()) == 2  # left as it was, never searched
    with on_weaviate(weaviate_endpoint, f"{collection}Renamed", tmp_path, background_embedding=False) as gateway:
        key = gateway.key("alice", groups=("sales",), clearance="confidential")
        assert ask(gateway, key, "security") == ("empty", [])  # the search created the collection...
        assert lag(gateway.store, OnnxBgeSmall.MODEL_ID) == 2  # ...and its vectors wait to be copied again
        copied(gateway)
        assert ask(gateway, key, "security")[1][0] == "doc_security"
