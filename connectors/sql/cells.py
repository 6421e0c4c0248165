"""Cells: a coarse partition of one tenant's vectors, so a crowd of near-duplicates is scored whole.

The HNSW graph finds a query's neighbourhood but cannot rank inside a crowd of near-copies
(versions of one document, a thread's quoted replies, one abstract stored 200 times): the links it
keeps are chosen to point in different directions, so among ~200 vectors within 0.01 cosine of
each other its walk reaches about a third, and which third is chance. At a million items of
SciFact abstracts and their copies, a caller permitted half of them got 0.30 of the exact top 10
from the graph alone (bench/scale_bench.py; wider `ef` or a denser graph reached 0.61).

So the approximate plan also scores, exactly, every row of the query's nearest cells: k-means
centroids trained on a sample of the rows, every row filed under its nearest centroid (an inverted
file, as FAISS's `IndexIVFFlat` probes one). A crowd of near-copies lands in one cell or two and is
read whole. On the million the graph's window and 8 cells (~3,500 rows, +3.7 ms) found 0.98 of the
exact top 10 for that caller (docs/scale.md). On a corpus without crowds the cells add candidates
the exact scoring ranks anyway: never fewer of the true top 10 than the graph alone.

Written here in numpy rather than taken from FAISS: the rows' vectors already live in the tenant's
matrix (connectors/sql/vectors.py), and FAISS's inverted file keeps its own copy of every vector
(1.5 GB at a million rows of 384 floats); its k-means alone would replace the dozen lines of
`train`, over the same BLAS products.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

CELL_ROWS = 256  # rows a cell holds on average: a million rows make 3,906 cells
CELL_PROBES = 8  # the query's nearest cells scored whole (bench/scale_bench.py: 4 found 0.953, 8 0.975)
# At most this many rows probed a query (the nearest cells first, at least one): a cell grows past
# CELL_ROWS when rows arrive after training (retrained at twice the size: `TenantVectors`) or when
# thousands of rows share one vector; a query's cost stays bounded either way.
PROBED_MAX = 16_384
RETRAIN_GROWTH = 2  # the cells are trained again once they hold this many times the rows they were trained on
TRAIN_PER_CELL = 16  # sampled rows per centroid while training
TRAIN_ROUNDS = 4  # k-means rounds: the cells only need to hold crowds together, not be optimal
# Rows compared with every centroid at a time: 4,096 x 3,906 cells of a million rows, 64 MB of scores.
ASSIGN_CHUNK = 4_096


@dataclass
class Cells:
    """The centroids, and for each cell the matrix rows filed under it. A row whose vector was
    replaced may also remain under its old cell: the rows are only candidates, scored afresh."""

    centroids: npt.NDArray[np.float32]
    members: list[npt.NDArray[np.int64]]
    trained_rows: int = 0  # the rows the centroids were trained on
    filed: int = 0  # rows filed since, counting a replaced row's vector again (it stays under its old cell too)

    @classmethod
    def train(cls, matrix: npt.NDArray[np.float32], seed: int = 7) -> Cells:
        """Cells for every row of `matrix` (unit vectors): spherical k-means on a sample."""
        count = max(1, len(matrix) // CELL_ROWS)
        rng = np.random.default_rng(seed)
        taken = min(len(matrix), count * TRAIN_PER_CELL)
        sample = matrix[np.sort(rng.choice(len(matrix), taken, replace=False))]
        centroids = sample[rng.choice(taken, count, replace=False)].copy()
        for _ in range(TRAIN_ROUNDS):
            order, used, starts = _grouped(_nearest(sample, centroids))
            sums = np.add.reduceat(sample[order], starts, axis=0)
            centroids[used] = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)
        cells = cls(centroids, [np.zeros(0, dtype=np.int64)] * count, len(matrix))
        cells.add(np.arange(len(matrix), dtype=np.int64), matrix)
        return cells

    def add(self, rows: npt.NDArray[np.int64], vectors: npt.NDArray[np.float32]) -> None:
        """File `rows` (with these vectors) under their nearest centroids."""
        if not len(rows):
            return
        order, cells, starts = _grouped(_nearest(vectors, self.centroids))
        self.filed += len(rows)
        for cell, group in zip(cells.tolist(), np.split(rows[order], starts[1:])):
            held = self.members[cell]
            self.members[cell] = np.concatenate([held, group]) if len(held) else group

    def near(self, q: npt.NDArray[np.float32], probes: int = CELL_PROBES, most: int = PROBED_MAX) -> npt.NDArray[np.int64]:
        """The rows of the `probes` cells whose centroids are nearest `q`, nearest cell first, at
        most `most` of them (a cell past the bound is cut: its rows were filed as alike)."""
        scores = self.centroids @ q
        chosen = np.argpartition(-scores, probes - 1)[:probes] if probes < len(scores) else np.arange(len(scores))
        taken: list[npt.NDArray[np.int64]] = []
        left = most
        for cell in chosen[np.argsort(-scores[chosen], kind="stable")].tolist():
            if left <= 0:
                break
            rows = self.members[cell][:left]
            taken.append(rows)
            left -= len(rows)
        return np.concatenate(taken) if taken else np.zeros(0, dtype=np.int64)

    def stale(self) -> bool:
        """Whether these cells have outgrown their training: new rows, and replaced vectors filed
        again, make each cell hold ever more rows (a query's probe reads them all, up to PROBED_MAX)."""
        return self.filed >= RETRAIN_GROWTH * self.trained_rows


def _grouped(
    nearest: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Positions ordered by their cell, the cells present, and where each one's run starts."""
    order = np.argsort(nearest, kind="stable")
    cells, starts = np.unique(nearest[order], return_index=True)
    return order, cells, starts


def _nearest(vectors: npt.NDArray[np.float32], centroids: npt.NDArray[np.float32]) -> npt.NDArray[np.int64]:
    """Each vector's nearest centroid (by inner product), a chunk of vectors at a time."""
    if not len(vectors):
        return np.zeros(0, dtype=np.int64)
    return np.concatenate(
        [np.argmax(vectors[at : at + ASSIGN_CHUNK] @ centroids.T, axis=1) for at in range(0, len(vectors), ASSIGN_CHUNK)]
    )
