"""The cells beside the HNSW graph (connectors/sql/cells.py, issue 57): a crowd of near-copies is
filed together and scored whole, so the approximate plan ranks inside it as exact search does,
still returning only permitted rows; rows written after the build are filed too."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine

import connectors.sql.vectors as vectors_module
from connectors.sql.cells import PROBED_MAX, Cells
from connectors.sql.lexical import FullTextConnector
from connectors.sql.vectors import TenantVectors, VectorIndex
from core.records import RecallQuery
from core.store import open_store
from gateway.writes.items import ingest
from tests.connectors.test_contract import CONSTRAINTS
from tests.connectors.test_vector_plan import write_vectors

DIMS = 128
MODEL = "crowds@1"
CROWDS, COPIES = 30, 100  # 3,000 items: past the graph's threshold (ann_min_items 2,000)
NOISE = 0.0125  # a copy's cosine with its crowd's centre ~0.99; two copies' ~0.98


def unit(m: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return (m / np.linalg.norm(m, axis=-1, keepdims=True)).astype(np.float32)


def crowds(rng: np.random.Generator) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """CROWDS centres, and COPIES noisy copies of each (row i is a copy of centre i // COPIES)."""
    centres = unit(rng.standard_normal((CROWDS, DIMS)))
    copies = unit(np.repeat(centres, COPIES, axis=0) + rng.standard_normal((CROWDS * COPIES, DIMS)) * NOISE)
    return centres, copies


def test_cells_file_every_row_once_and_hold_a_crowd_together() -> None:
    centres, matrix = crowds(np.random.default_rng(1))
    cells = Cells.train(matrix)
    filed = np.concatenate(cells.members)
    assert sorted(filed.tolist()) == list(range(len(matrix)))  # every row, once
    assert sorted(cells.near(centres[0], probes=len(cells.members)).tolist()) == list(range(len(matrix)))
    for crowd, centre in enumerate(centres):
        near = set(cells.near(centre, probes=2).tolist())
        assert set(range(crowd * COPIES, (crowd + 1) * COPIES)) <= near, crowd


def test_rows_added_later_are_filed_under_their_nearest_cell() -> None:
    centres, matrix = crowds(np.random.default_rng(2))
    cells = Cells.train(matrix)
    late = unit(centres[[3, 7]] + 0.01)
    cells.add(np.array([len(matrix), len(matrix) + 1]), late)
    assert len(matrix) in cells.near(centres[3], probes=1).tolist()
    assert len(matrix) + 1 in cells.near(centres[7], probes=1).tolist()
    assert len(matrix) not in cells.near(centres[7], probes=1).tolist()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Engine, np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    folder: Path = tmp_path_factory.mktemp("cells")
    engine = open_store(f"sqlite:///{folder}/gateway.db")
    # Half the copies of every crowd readable by group:half, the other half by group:other.
    rows = [
        {"id": f"c{i}", "kind": "memory", "text": f"copy {i}", "acl": ["group:half" if i % 2 == 0 else "group:other"]}
        for i in range(CROWDS * COPIES)
    ]
    assert ingest(engine, "acme", rows).rejected == []
    centres, matrix = crowds(np.random.default_rng(3))
    write_vectors(engine, MODEL, {f"c{i}": matrix[i] for i in range(len(matrix))})
    yield engine, centres, matrix
    engine.dispose()


def planned(engine: Engine) -> VectorIndex:
    # The graph built here, once, not also on a background thread that could replace it (and its
    # cells) while a test looks.
    index = VectorIndex(engine, MODEL, DIMS, ann_min_items=10**9, admitted=FullTextConnector(engine).admitted)
    index.exact_max = 100  # group:half admits 1,500: the graph's plan
    with engine.connect() as conn:
        index.tenant(conn, "acme").build_graph()
    return index


def nearest(index: VectorIndex, q: np.ndarray[Any, Any]) -> tuple[list[str], str]:
    where = replace(CONSTRAINTS, principals=("group:half",), subjects=())
    found, used = index.nearest_rows(where, RecallQuery(vector=tuple(float(x) for x in q), model=MODEL, limit=10))
    return [row._mapping["id"] for row, _ in found], used


def exact(matrix: np.ndarray[Any, Any], q: np.ndarray[Any, Any]) -> list[str]:
    rows = np.arange(0, len(matrix), 2)  # group:half's
    return [f"c{i}" for i in rows[np.argsort(-(matrix[rows] @ q), kind="stable")[:10]]]


def test_inside_a_crowd_the_graph_plan_ranks_as_exact_search_does(
    store: tuple[Engine, np.ndarray[Any, Any], np.ndarray[Any, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A graph walk this narrow (10 candidates kept) reaches only some of a crowd; the crowd's cell
    is scored whole, so the answer is exact search's, and only group:half's copies."""
    engine, centres, matrix = store
    monkeypatch.setattr(vectors_module, "ANN_EF_MIN", 10)
    monkeypatch.setattr(vectors_module, "ANN_WINDOW_MIN", 10)
    index = planned(engine)
    rng = np.random.default_rng(4)
    for crowd in range(0, CROWDS, 3):
        q = unit(centres[crowd] + rng.standard_normal(DIMS) * 0.1)
        ids, used = nearest(index, q)
        assert used == "approximate"
        assert all(int(i[1:]) % 2 == 0 for i in ids)
        assert ids == exact(matrix, q), crowd


def test_without_cells_the_same_narrow_walk_misses_inside_the_crowd(
    store: tuple[Engine, np.ndarray[Any, Any], np.ndarray[Any, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the cells are for: the same plan with its cells taken away finds fewer of exact search's
    top 10 (the previous test would fail without them)."""
    engine, centres, matrix = store
    monkeypatch.setattr(vectors_module, "ANN_EF_MIN", 10)
    monkeypatch.setattr(vectors_module, "ANN_WINDOW_MIN", 10)
    index = planned(engine)
    with engine.connect() as conn:
        index.tenant(conn, "acme").cells = None
    rng = np.random.default_rng(4)
    hits = total = 0
    for crowd in range(0, CROWDS, 3):
        q = unit(centres[crowd] + rng.standard_normal(DIMS) * 0.1)
        ids, _ = nearest(index, q)
        hits, total = hits + len(set(ids) & set(exact(matrix, q))), total + 10
    assert hits / total < 0.9, hits / total


def test_a_copy_written_after_the_build_is_found_through_its_cell(
    store: tuple[Engine, np.ndarray[Any, Any], np.ndarray[Any, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, centres, matrix = store
    monkeypatch.setattr(vectors_module, "ANN_EF_MIN", 10)
    monkeypatch.setattr(vectors_module, "ANN_WINDOW_MIN", 10)
    index = planned(engine)
    q = unit(centres[5] + 0.02)
    assert ingest(engine, "acme", [{"id": "late", "kind": "memory", "text": "late copy", "acl": ["group:half"]}]).rejected == []
    write_vectors(engine, MODEL, {"late": q}, seq=2)
    try:
        assert nearest(index, q)[0][0] == "late"
    finally:
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM item_vector WHERE item_pk = (SELECT pk FROM item WHERE id = 'late')"))
            conn.execute(text("DELETE FROM item WHERE id = 'late'"))


def test_a_query_probes_a_bounded_number_of_rows_nearest_cell_first() -> None:
    centres, matrix = crowds(np.random.default_rng(5))
    cells = Cells.train(matrix)
    near = cells.near(centres[0], probes=len(cells.members), most=150)
    assert len(near) == 150
    assert set(range(COPIES)) & set(near[:COPIES].tolist())  # the crowd's own cell comes first
    crowded = Cells(cells.centroids, [np.arange(100_000, dtype=np.int64)] + cells.members[1:], len(matrix))
    assert len(crowded.near(cells.centroids[0])) == PROBED_MAX  # one cell of 100,000 alike rows, cut


def test_a_tenant_that_doubled_since_its_cells_were_trained_gets_them_trained_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cells trained on a tenant's first rows would hold ever more rows each as it grows; at twice
    the rows they are trained again on a thread, rows written meanwhile filed too."""
    centres, matrix = crowds(np.random.default_rng(6))
    tenant = TenantVectors(DIMS)
    first = 1_000
    with tenant.lock:
        tenant.upsert(list(range(first)), [1] * first, matrix[:first])
    tenant.build_graph()
    assert tenant.cells is not None and tenant.cells.trained_rows == first
    written_meanwhile = len(matrix) - 1
    original_train = Cells.train.__func__  # type: ignore[attr-defined]

    def train_while_a_row_is_written(cls: type[Cells], rows: np.ndarray[Any, Any], seed: int = 7) -> Cells:
        with tenant.lock:  # a write lands while the new cells are trained
            tenant.upsert([written_meanwhile], [1], matrix[[written_meanwhile]])
        return original_train(cls, rows, seed)  # type: ignore[no-any-return]

    monkeypatch.setattr(Cells, "train", classmethod(train_while_a_row_is_written))
    with tenant.lock:  # the tenant grows to twice its rows (all but the last)
        tenant.upsert(list(range(first, len(matrix) - 1)), [1] * (len(matrix) - 1 - first), matrix[first:-1])
    deadline = time.monotonic() + 30
    while tenant.refiled is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tenant.refiled is None and tenant.cells.trained_rows == len(matrix) - 1
    assert sorted(set(np.concatenate(tenant.cells.members).tolist())) == list(range(len(matrix)))


def test_cells_refiled_by_replaced_vectors_are_trained_again() -> None:
    """A replaced vector is filed again (and stays under its old cell): a tenant whose vectors are
    all re-embedded, at the same size, has cells holding twice its rows until they are retrained."""
    _, matrix = crowds(np.random.default_rng(7))
    tenant = TenantVectors(DIMS)
    with tenant.lock:
        tenant.upsert(list(range(len(matrix))), [1] * len(matrix), matrix)
    tenant.build_graph()
    assert tenant.cells is not None and not tenant.cells.stale()
    with tenant.lock:  # every vector written again (a new stamp), nudged
        tenant.upsert(list(range(len(matrix))), [2] * len(matrix), unit(matrix + 0.01))
    deadline = time.monotonic() + 30
    while (tenant.refiled is not None or tenant.cells.filed > len(matrix)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tenant.refiled is None and tenant.cells.filed == len(matrix)
    assert sorted(np.concatenate(tenant.cells.members).tolist()) == list(range(len(matrix)))  # once each again
