"""Semantic search on the embedded default plans by the admitted count (issue 57): the lexical
index counts and lists the rows a filter may admit; few are scored exactly (no SQL lists the
permitted set), many go to the HNSW graph; either way only permitted rows come back, and the
answer matches exact search over the permitted set."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

import connectors.sql.vectors as vectors_module
from connectors.sql.lexical import FullTextConnector
from connectors.sql.vectors import VectorIndex
from core.records import RecallQuery
from core.store import open_store
from gateway.writes.items import ingest
from tests.connectors.test_contract import CONSTRAINTS

DIMS = 16
MODEL = "planted@1"
ITEMS = 3_000  # past the graph's threshold (ann_min_items 2,000)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, np.ndarray[Any, Any]]]:
    folder: Path = tmp_path_factory.mktemp("plan")
    engine = open_store(f"sqlite:///{folder}/gateway.db")
    # 0.1% readable by group:few, 5% by group:some, 50% by group:half; the rest by no caller here
    rows = [
        {
            "id": f"n{i}",
            "kind": "memory",
            "text": f"note {i}",
            "acl": [g for g, every in (("group:few", 1000), ("group:some", 20), ("group:half", 2)) if i % every == 0]
            or ["group:none"],
        }
        for i in range(ITEMS)
    ]
    assert ingest(engine, "acme", rows).rejected == []
    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((ITEMS, DIMS)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    write_vectors(engine, MODEL, {f"n{i}": matrix[i] for i in range(ITEMS)})
    yield engine, matrix
    engine.dispose()


def write_vectors(engine: Engine, model: str, vectors: dict[str, np.ndarray[Any, Any]], seq: int = 1) -> None:
    """Store each item's vector (by item id) as current for its text, as the embedder would."""
    with engine.begin() as conn:
        found: dict[str, tuple[int, str]] = {
            id_: (pk, digest) for id_, pk, digest in conn.execute(text("SELECT id, pk, content_hash FROM item")).all()
        }
        conn.execute(
            text("INSERT INTO item_vector (item_pk, model, dims, vector, content_hash, seq) VALUES (:pk, :m, :d, :v, :h, :s)"),
            [
                {"pk": found[id_][0], "m": model, "d": len(v), "v": v.tobytes(), "h": found[id_][1], "s": seq}
                for id_, v in vectors.items()
            ],
        )


def nearest(index: VectorIndex, group: str, q: np.ndarray[Any, Any], limit: int = 10) -> tuple[list[str], str]:
    where = replace(CONSTRAINTS, principals=(group,), subjects=())
    found, used = index.nearest_rows(where, RecallQuery(vector=tuple(float(x) for x in q), model=MODEL, limit=limit))
    return [row._mapping["id"] for row, _ in found], used


def truth(matrix: np.ndarray[Any, Any], every: int, q: np.ndarray[Any, Any], limit: int = 10) -> list[str]:
    rows = np.arange(0, ITEMS, every)
    best = rows[np.argsort(-(matrix[rows] @ q), kind="stable")[:limit]]
    return [f"n{i}" for i in best]


def planned(engine: Engine) -> VectorIndex:
    lexical = FullTextConnector(engine)
    index = VectorIndex(engine, MODEL, DIMS, admitted=lexical.admitted)
    with engine.connect() as conn:
        index.tenant(conn, "acme").build_graph()
    return index


def test_a_small_admitted_set_is_scored_exactly_without_listing_it_in_sql(
    store: tuple[Engine, np.ndarray[Any, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, matrix = store
    index = planned(engine)

    def refused(tags: tuple[str, ...]) -> Any:
        raise AssertionError("the permitted set was listed in SQL")

    monkeypatch.setattr(vectors_module, "permitted_pks", refused)
    rng = np.random.default_rng(3)
    for group, every in (("group:few", 1000), ("group:some", 20)):
        for _ in range(5):
            q = rng.standard_normal(DIMS).astype(np.float32)
            q /= np.linalg.norm(q)
            ids, used = nearest(index, group, q)
            assert used == "exact"
            assert ids == truth(matrix, every, q)[: len(ids)] and len(ids) == min(10, len(range(0, ITEMS, every)))


def test_a_large_admitted_set_goes_to_the_graph_and_recall_holds(store: tuple[Engine, np.ndarray[Any, Any]]) -> None:
    engine, matrix = store
    index = planned(engine)
    index.exact_max = 100  # group:half admits 1,500: past the cutoff
    rng = np.random.default_rng(4)
    hits = total = 0
    for _ in range(20):
        q = rng.standard_normal(DIMS).astype(np.float32)
        q /= np.linalg.norm(q)
        ids, used = nearest(index, "group:half", q)
        assert used == "approximate"
        assert all(int(i[1:]) % 2 == 0 for i in ids)  # only admitted rows
        expected = truth(matrix, 2, q)
        hits, total = hits + len(set(ids) & set(expected)), total + len(expected)
    assert hits / total >= 0.95, hits / total


def test_an_item_hidden_after_the_index_was_built_never_comes_back(store: tuple[Engine, np.ndarray[Any, Any]]) -> None:
    engine, matrix = store
    index = planned(engine)
    q = matrix[0]  # n0 itself is nearest, readable by group:few
    assert nearest(index, "group:few", q)[0][0] == "n0"
    with engine.begin() as conn:  # its ACL changes under the running index (as a write would)
        conn.execute(text("UPDATE item SET acl = '[\"group:none\"]' WHERE id = 'n0'"))
    try:
        ids, _ = nearest(index, "group:few", q)
        assert "n0" not in ids and ids == truth(matrix, 1000, q)[1:][: len(ids)]
    finally:
        with engine.begin() as conn:
            conn.execute(text('UPDATE item SET acl = \'["group:few", "group:some", "group:half"]\' WHERE id = \'n0\''))


CURRENT = "UPDATE item_vector SET content_hash = (SELECT content_hash FROM item WHERE pk = item_pk) WHERE item_pk = (SELECT pk FROM item WHERE id = :id)"


def test_a_kept_admitted_list_follows_the_store(store: tuple[Engine, np.ndarray[Any, Any]]) -> None:
    """A filter's admitted rows are kept while the lexical index does not change; a write that
    admits a row (or hides one) changes the index, so the next call lists afresh."""
    engine, matrix = store
    index = planned(engine)
    lexical = index.admitted
    assert lexical is not None
    where = replace(CONSTRAINTS, principals=("group:few",), subjects=())
    with engine.connect() as conn:
        first = lexical(conn, where, 100)
        again = lexical(conn, where, 100)
        assert first is not None and again is not None and first[1] is not None
        assert again[1] is first[1]  # kept: the same list, not listed again
        assert lexical(conn, where, 2) == (first[0], None)  # a smaller cap is past the kept count
    q = matrix[7]  # n7: readable by no caller here until the write below
    assert "n7" not in nearest(index, "group:few", q)[0]
    readable = {"id": "n7", "kind": "memory", "text": "note 7"}
    assert ingest(engine, "acme", [{**readable, "acl": ["group:few"]}]).rejected == []
    with engine.begin() as conn:  # its vector made current again, as the embedder would
        conn.execute(text(CURRENT), {"id": "n7"})
    try:
        assert nearest(index, "group:few", q)[0][0] == "n7"
        with engine.connect() as conn:
            later = lexical(conn, where, 100)
        assert later is not None and later[0] == first[0] + 1
    finally:
        assert ingest(engine, "acme", [{**readable, "acl": ["group:none"]}]).rejected == []
    assert "n7" not in nearest(index, "group:few", q)[0]


def test_a_kept_copy_of_the_admitted_vectors_follows_a_changed_vector(store: tuple[Engine, np.ndarray[Any, Any]]) -> None:
    """The admitted rows' vectors are kept as one copy while none changes: a vector rewritten in the
    store is scored as it is now on the next call, never as it was kept."""
    engine, matrix = store
    index = planned(engine)
    q = matrix[1000]  # n1000: readable by group:few, nearest to itself
    assert nearest(index, "group:few", q)[0][0] == "n1000"
    assert nearest(index, "group:few", q)[0][0] == "n1000"  # the second call scores the kept copy
    with engine.begin() as conn:  # n1000's vector turned away from the query, as a re-embedding would
        conn.execute(
            text("UPDATE item_vector SET vector = :v, seq = 2 WHERE item_pk = (SELECT pk FROM item WHERE id = 'n1000')"),
            {"v": (-q).tobytes()},
        )
    try:
        ids, _ = nearest(index, "group:few", q)
        assert ids[-1] == "n1000" and ids == truth(matrix, 1000, q)[1:] + ["n1000"]
    finally:
        with engine.begin() as conn:
            conn.execute(
                text("UPDATE item_vector SET vector = :v, seq = 3 WHERE item_pk = (SELECT pk FROM item WHERE id = 'n1000')"),
                {"v": q.tobytes()},
            )


def test_best_first_is_the_start_of_a_stable_sort() -> None:
    rng = np.random.default_rng(5)
    for size, at_least in ((10, 20), (1000, 1), (1000, 64), (5000, 256)):
        scores = np.round(rng.standard_normal(size), 1).astype(np.float32)  # many ties
        full = np.argsort(-scores, kind="stable")
        head = vectors_module.best_first(scores, at_least)
        assert len(head) >= min(at_least, size)
        assert head.tolist() == full[: len(head)].tolist()
