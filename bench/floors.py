"""Bare calls of the engines under each retrieve layer: what a layer could cost at best.

Each function does the engine's own work once, on inputs prepared beforehand (tokens, the
permitted rows, the serialised policy input), and returns its time in ms with what it found, so
a layer's time can be set beside the engine it wraps, in the same process on the same data.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

RRF_K = 60


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def onnx_run(session: Any, feeds: dict[str, npt.NDArray[np.int64]]) -> float:
    """One `session.run` of the embedding model on an already tokenised query."""
    started = time.perf_counter()
    session.run(None, feeds)
    return _ms(started)


def numpy_exact(matrix: npt.NDArray[np.float32], rows: npt.NDArray[np.int64], q: npt.NDArray[np.float32], k: int) -> float:
    """Exact top-k by dot product over the permitted rows (rows looked up beforehand)."""
    started = time.perf_counter()
    if len(rows):
        scores = matrix[rows] @ q
        k = min(k, len(rows))
        top = np.argpartition(-scores, k - 1)[:k]
        top[np.argsort(-scores[top], kind="stable")]
    return _ms(started)


def hnsw_knn(graph: Any, q: npt.NDArray[np.float32], k: int) -> float:
    """One hnswlib query of the tenant's graph for the layer's first window (ef set by the caller)."""
    started = time.perf_counter()
    graph.knn_query(q, k=k)
    return _ms(started)


def fts_bm25(conn: sqlite3.Connection, table: str, match: str, limit: int) -> tuple[float, list[int]]:
    """One FTS5 MATCH on the tenant's table, ordered by bm25, top `limit` rowids."""
    started = time.perf_counter()
    rows = conn.execute(
        f"SELECT rowid, bm25({table}) AS s FROM {table} WHERE {table} MATCH ? ORDER BY s LIMIT ?", (match, limit)
    ).fetchall()
    return _ms(started), [int(r[0]) for r in rows]


def exact_lookup(conn: sqlite3.Connection, tenant: str, ids: Sequence[str]) -> float:
    """The items with these ids of one tenant, whole rows, by the (tenant, id) index."""
    marks = ",".join("?" for _ in ids)
    started = time.perf_counter()
    conn.execute(f"SELECT * FROM item WHERE tenant = ? AND id IN ({marks})", (tenant, *ids)).fetchall()
    return _ms(started)


def rego_eval(engine: Any, query: str, input_json: str) -> float:
    """One regorus evaluation in this process (no pipe, input already serialised)."""
    started = time.perf_counter()
    engine.set_input_json(input_json)
    engine.eval_query_as_json(query)
    return _ms(started)


def rrf(lists: Sequence[Sequence[int]], keep: int) -> float:
    """Reciprocal-rank fusion of the ranked lists and a sort: the arithmetic fuse and rank do at least."""
    started = time.perf_counter()
    scores: dict[int, float] = {}
    for ranked in lists:
        for rank, key in enumerate(ranked, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (RRF_K + rank)
    sorted(scores.items(), key=lambda pair: -pair[1])[:keep]
    return _ms(started)


class InsertFloor:
    """A bare INSERT and commit of one row of a given size, in a scratch SQLite file beside the store
    with the store's journal mode and synchronous setting (the audit write commits once per call)."""

    def __init__(self, path: Path, journal_mode: str, synchronous: int) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute(f"PRAGMA journal_mode={journal_mode}")
        self.conn.execute(f"PRAGMA synchronous={int(synchronous)}")
        self.conn.execute("CREATE TABLE IF NOT EXISTS row_floor (pk INTEGER PRIMARY KEY, body BLOB NOT NULL)")

    def insert(self, size: int) -> float:
        body = b"x" * size
        started = time.perf_counter()
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute("INSERT INTO row_floor (body) VALUES (?)", (body,))
        self.conn.execute("COMMIT")
        return _ms(started)

    def close(self) -> None:
        self.conn.close()
