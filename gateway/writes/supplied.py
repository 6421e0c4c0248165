"""Vectors an item carries, made outside the gateway (Weaviate, Qdrant, Pinecone and pgvector all
take them): checked against the index's model, then stored with the item so it is never embedded
again.

A vector is accepted only with the id of the model that made it, and only when that id and the
vector's length are the index's (one model per index: a ranking never compares vectors of two
models). It is scaled to unit length, as the gateway's own vectors are (a dot product is the
cosine). Stored against the item's content hash, so a later change of the item's text without a
new vector makes the item wait for the worker again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy.engine import Connection, Engine

from core.store import writer
from gateway.writes.envelope import ItemIn
from gateway.writes.vectorize import EMBEDDED_KINDS, Publish, upsert_vectors

Vector = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class VectorIntake:
    """What a supplied vector must match: the index's model id and dimension; `publish` copies the
    items to an outside index (Weaviate) before their vectors count as stored."""

    model: str
    dims: int
    publish: Publish | None = None


# The intake, or what makes it when the first item carrying a vector comes (the CLI loads the model
# only then: most files carry none).
Intake = VectorIntake | Callable[[], VectorIntake | None] | None


def resolve(intake: Intake) -> VectorIntake | None:
    return intake() if callable(intake) else intake


def supplied_vector(item: ItemIn, given: Intake) -> Vector | None | tuple[str, ...]:
    """The item's vector at unit length, None when it carries none, or why it is refused."""
    if item.vector is None and item.vector_model is None:
        return None
    if item.vector is None:
        return ("vector: required with vector_model",)
    if item.kind not in EMBEDDED_KINDS:
        return (f"vector: only {', '.join(EMBEDDED_KINDS)} items are searched by vector",)
    intake = resolve(given)
    if intake is None:
        return ("vector: semantic search is off here (GATEWAY_EMBEDDINGS=none); send the item without a vector",)
    if item.vector_model is None:
        return ("vector_model: required with a vector (the id of the model that made it)",)
    if item.vector_model != intake.model:
        return (f"vector_model: this index holds vectors of {intake.model!r} only",)
    if len(item.vector) != intake.dims:
        return (f"vector: {len(item.vector)} numbers; {intake.model!r} makes {intake.dims}",)
    vector = np.asarray(item.vector, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    if not np.isfinite(norm):  # finite numbers whose squares overflow float32
        return ("vector: too large to scale (numbers within ±1e18)",)
    if norm == 0.0:
        return ("vector: all zeros has no direction",)
    unit: Vector = (vector / norm).astype(np.float32)
    return unit


def vector_values(intake: VectorIntake, stored: Sequence[tuple[int, str, Vector]]) -> list[dict[str, Any]]:
    """item_vector rows for (item key, content hash, vector) triples."""
    seq = time.time_ns()
    return [
        {
            "item_pk": pk,
            "model": intake.model,
            "dims": intake.dims,
            "vector": vector.tobytes(),
            "content_hash": content_hash,
            "seq": seq,
        }
        for pk, content_hash, vector in stored
    ]


def store_supplied(conn: Connection, intake: VectorIntake, stored: Sequence[tuple[int, str, Vector]]) -> None:
    """Store the vectors in the writer's transaction (an index the store serves: the items and their
    vectors commit together)."""
    if stored:
        conn.execute(upsert_vectors(conn.dialect.name, vector_values(intake, stored)))


def publish_supplied(engine: Engine, intake: VectorIntake, stored: Sequence[tuple[int, str, Vector]]) -> None:
    """With an outside index: copy the written items and their vectors there first, then store the
    vectors (as the worker does: an item never counts as embedded while the index that serves it
    lacks its vector). A failed copy raises and stores nothing: the items wait for the worker."""
    if not stored or intake.publish is None:
        return
    intake.publish(engine, {pk: [float(x) for x in vector] for pk, _, vector in stored})
    with writer(engine).begin() as conn:
        store_supplied(conn, intake, stored)
