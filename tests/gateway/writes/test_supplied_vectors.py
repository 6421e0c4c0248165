"""Vectors made outside the gateway: an item may carry its vector and the id of the model that made
it. Taken only when both are the index's model (its id and its dimension), stored with the item at
unit length, never embedded again; every other case is refused by index and field, alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from gateway.writes.items import item_table
from gateway.writes.vectorize import item_vector, lag
from tests.conftest import Gateway, make_gateway
from tests.gateway.fixtures import SALES_TASK, memory

NDJSON = {"Content-Type": "application/x-ndjson"}


def semantic(gateway: Gateway) -> Any:
    found = gateway.client.app.state.context.connectors.semantic  # type: ignore[attr-defined]
    assert found.embedder is not None and found.intake is not None
    return found


def put(gateway: Gateway, items: list[dict[str, Any]], *, stream: bool = False) -> Any:
    writer = gateway.auth(gateway.key("writer-acme", roles=("ingest",)))
    if stream:
        body = "".join(json.dumps(item) + "\n" for item in items).encode()
        return gateway.client.put("/v1/items", content=body, headers={**writer, **NDJSON})
    return gateway.client.put("/v1/items", json=items, headers=writer)


def stored_vector(gateway: Gateway, item_id: str) -> tuple[str, int, np.ndarray[Any, Any], bool] | None:
    """The stored vector's model, dims, values and whether it was made from the item's current text."""
    with gateway.store.connect() as conn:
        row = conn.execute(
            select(
                item_vector.c.model,
                item_vector.c.dims,
                item_vector.c.vector,
                item_vector.c.content_hash,
                item_table.c.content_hash,
            )
            .join(item_table, item_table.c.pk == item_vector.c.item_pk)
            .where(item_table.c.id == item_id)
        ).first()
    if row is None:
        return None
    return row[0], row[1], np.frombuffer(row[2], dtype=np.float32), row[3] == row[4]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "ndjson"])
def test_a_vector_of_the_index_model_is_stored_at_unit_length_and_never_embedded_again(gateway: Gateway, stream: bool) -> None:
    index = semantic(gateway)
    text = "Quokkavec renewal: the customer asked for a three-year term with annual billing."
    made = index.embedder.embed([text])[0] * 7.5  # another scale: the gateway stores it at unit length
    item = memory("mem_vec", text, vector=[float(x) for x in made], vector_model=index.intake.model)
    response = put(gateway, [item], stream=stream)
    assert response.json() == {"created": 1, "updated": 0, "unchanged": 0, "rejected": []}
    found = stored_vector(gateway, "mem_vec")
    assert found is not None
    model, dims, vector, current = found
    assert (model, dims, current) == (index.intake.model, index.intake.dims, True)
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5
    assert float(vector @ (made / np.linalg.norm(made))) > 0.9999
    assert lag(gateway.store, index.intake.model, "acme") == 0  # nothing waits: the worker has nothing to do
    alice = gateway.key("alice", groups=("sales",), clearance="confidential")
    answer = gateway.retrieve(alice, {"task": SALES_TASK, "query": "three-year term annual billing"}, semantic=True).json()
    assert "mem_vec" in [found["id"] for found in answer["items"]]


def test_a_changed_text_without_a_new_vector_waits_for_the_worker_again(sqlite_url: str, tmp_path: Path) -> None:
    for gateway in make_gateway(sqlite_url, tmp_path, background_embedding=False):  # nothing embeds meanwhile
        index = semantic(gateway)
        text = "Quokkavec note one."
        vector = [float(x) for x in index.embedder.embed([text])[0]]
        put(gateway, [memory("mem_v", text, vector=vector, vector_model=index.intake.model)])
        assert lag(gateway.store, index.intake.model, "acme") == 0
        assert put(gateway, [memory("mem_v", "Quokkavec note one, changed.")]).json()["updated"] == 1
        found = stored_vector(gateway, "mem_v")
        assert found is not None and found[3] is False  # made from the old text
        assert lag(gateway.store, index.intake.model, "acme") == 1  # so the item waits again


def test_each_bad_vector_is_refused_alone_naming_its_item_and_field(gateway: Gateway) -> None:
    index = semantic(gateway)
    good = [float(x) for x in index.embedder.embed(["Quokkavec good"])[0]]
    model, dims = index.intake.model, index.intake.dims
    items = [
        memory("mem_ok", "Quokkavec good", vector=good, vector_model=model),
        memory("mem_short", "Quokkavec short", vector=good[:-1], vector_model=model),
        memory("mem_no_model", "Quokkavec no model", vector=good),
        memory("mem_other", "Quokkavec other model", vector=good, vector_model="text-embedding-3-small"),
        memory("mem_zero", "Quokkavec zero", vector=[0.0] * dims, vector_model=model),
        memory("mem_model_only", "Quokkavec model only", vector_model=model),
        {
            "id": "ent_v",
            "kind": "entity",
            "entity_type": "company",
            "name": "V",
            "acl": ["*"],
            "vector": good,
            "vector_model": model,
        },
        memory("mem_strings", "Quokkavec strings", vector=["0.1"] * dims, vector_model=model),
        memory("mem_plain", "Quokkavec plain item, no vector"),
    ]
    report = put(gateway, items).json()
    assert report["created"] == 2  # mem_ok and mem_plain
    errors = {r["id"]: r["errors"] for r in report["rejected"]}
    assert [r["index"] for r in report["rejected"]] == [1, 2, 3, 4, 5, 6, 7]
    assert errors["mem_short"] == [f"vector: {dims - 1} numbers; {model!r} makes {dims}"]
    assert errors["mem_no_model"] == ["vector_model: required with a vector (the id of the model that made it)"]
    assert errors["mem_other"] == [f"vector_model: this index holds vectors of {model!r} only"]
    assert errors["mem_zero"] == ["vector: all zeros has no direction"]
    assert errors["mem_model_only"] == ["vector: required with vector_model"]
    assert errors["ent_v"] == ["vector: only memory, document, property items are searched by vector"]
    assert errors["mem_strings"][0] == "vector.0: Input should be a valid number"
    assert stored_vector(gateway, "mem_ok") is not None
    for refused in ("mem_short", "mem_no_model", "mem_other", "mem_zero", "mem_model_only", "ent_v", "mem_strings"):
        assert stored_vector(gateway, refused) is None


def test_a_number_json_cannot_carry_in_a_vector_is_named(gateway: Gateway) -> None:
    model, dims = semantic(gateway).intake.model, semantic(gateway).intake.dims
    numbers = ", ".join(["0.1", "NaN"] + ["0.1"] * (dims - 2))
    line = f'{{"id": "mem_nan", "kind": "memory", "text": "Quokkavec", "acl": ["*"], "vector_model": "{model}", "vector": [{numbers}]}}'
    writer = gateway.auth(gateway.key("writer-acme", roles=("ingest",)))
    whole = gateway.client.put("/v1/items", content=f"[{line}]".encode(), headers={**writer, "Content-Type": "application/json"})
    assert whole.status_code == 400 and whole.json()["error"]["message"].startswith("[0].vector[1]: ")
    streamed = gateway.client.put("/v1/items", content=(line + "\n").encode(), headers={**writer, **NDJSON})
    assert streamed.status_code == 200
    assert streamed.json()["rejected"][0]["errors"][0].startswith("[0].vector[1]: ")
    assert stored_vector(gateway, "mem_nan") is None


def test_without_semantic_search_a_vector_is_refused_by_name(sqlite_url: str, tmp_path: Path) -> None:
    for gateway in make_gateway(sqlite_url, tmp_path, embeddings="none"):
        report = put(gateway, [memory("mem_v", "Quokkavec", vector=[0.1, 0.2], vector_model="any")]).json()
        assert report["rejected"] == [
            {
                "index": 0,
                "id": "mem_v",
                "errors": ["vector: semantic search is off here (GATEWAY_EMBEDDINGS=none); send the item without a vector"],
            }
        ]


def test_the_documented_outside_example_makes_the_gateways_own_vectors(gateway: Gateway, tmp_path: Path) -> None:
    """docs/loading.md: docs/examples/vectors/embed_outside.py, with only onnxruntime and tokenizers
    over the model files the gateway keeps, makes vectors the gateway takes and would have made."""
    import subprocess
    import sys

    from gateway.writes.maven_model import BGE_SMALL

    index = semantic(gateway)
    items = [
        memory("mem_out_1", "Quokkaout the customer asked for annual billing."),
        {
            "id": "doc_out_1",
            "kind": "document",
            "section": "Renewals > Terms",
            "text": "Three-year terms get a discount.",
            "acl": ["*"],
        },
    ]
    source = tmp_path / "items.ndjson"
    source.write_text("".join(json.dumps(item) + "\n" for item in items), encoding="utf-8")
    script = Path(__file__).resolve().parents[3] / "docs" / "examples" / "vectors" / "embed_outside.py"
    model_dir = BGE_SMALL.directory(gateway.settings.effective_model_dir)
    made = subprocess.run([sys.executable, str(script), str(model_dir), str(source)], capture_output=True, text=True, check=True)
    lines = [json.loads(line) for line in made.stdout.splitlines()]
    assert {line["vector_model"] for line in lines} == {index.intake.model}
    report = put(gateway, lines, stream=True).json()
    assert report == {"created": 2, "updated": 0, "unchanged": 0, "rejected": []}
    ours = index.embedder.embed(
        ["Quokkaout the customer asked for annual billing.", "Renewals > Terms\nThree-year terms get a discount."]
    )
    for item_id, expected in zip(("mem_out_1", "doc_out_1"), ours):
        found = stored_vector(gateway, item_id)
        assert found is not None and found[3]
        assert float(found[2] @ expected) > 0.9999
