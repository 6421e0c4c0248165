"""Bulk embedding and bulk personal-data analysis (`gateway embed`, `gateway pii analyze`): the fast
paths give the same vectors and spans as one text at a time, each on its own item."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy import select

from core.store import open_store
from gateway.cli import main
from gateway.privacy.detect import Detector, Span
from gateway.privacy.store import analyze_all, analyze_all_processes, item_pii, pending
from gateway.writes.embeddings import OnnxMiniLM
from gateway.writes.items import ingest
from gateway.writes.vectorize import embed_all, item, item_vector, lag

WORDS = "renewal pricing discount billing invoice contract support escalation quarterly forecast".split()
# Lengths from a few tokens to past the 256-token truncation, in an order that sorting changes.
TEXTS = [
    " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(n))
    for i, n in enumerate([40, 3, 300, 12, 90, 1, 260, 25, 150, 7, 60, 33])
]
NOTES = [
    "Call John Smith at +1 415 555 0132 about the renewal.",
    "Nothing personal here: the Q3 forecast moved to 1.2M.",
    "",
    "Maria Garcia (maria.garcia@globex.example) asked for the invoice; card 4111 1111 1111 1111.",
    "   ",
    "Server 10.0.0.12 logged a login from Dr. Peter Novak; IBAN DE89 3704 0044 0532 0130 00.",
    "Dear Anna, the SSN 078-05-1120 must never be in a ticket. Regards, Tom Baker",
]
STORED = [note for note in NOTES if note.strip()]  # a memory needs text


@pytest.fixture(scope="module")
def bulk_model() -> OnnxMiniLM:
    return OnnxMiniLM(threads=2, bulk=True)


def one_at_a_time(model: OnnxMiniLM, texts: list[str]) -> np.ndarray[Any, Any]:
    return np.stack([model.embed([t])[0] for t in texts])


def test_length_sorted_batches_give_each_text_its_own_vector(bulk_model: OnnxMiniLM) -> None:
    single = one_at_a_time(OnnxMiniLM(threads=1), TEXTS)
    bulk = bulk_model.embed_many(TEXTS, batch=4)
    assert bulk.shape == (len(TEXTS), 384)
    cosines = np.sum(bulk * single, axis=1)
    assert cosines.min() > 0.9999, cosines
    # Row i is text i's, not a neighbour's from the same sorted batch.
    assert list(np.argmax(bulk @ single.T, axis=1)) == list(range(len(TEXTS)))


def test_embed_many_counts_progress_and_takes_no_texts(bulk_model: OnnxMiniLM) -> None:
    seen: list[int] = []
    bulk_model.embed_many(TEXTS, batch=5, progress=seen.append)
    assert sum(seen) == len(TEXTS) and max(seen) <= 5
    assert bulk_model.embed_many([], batch=5).shape == (0, 384)


def entries(texts: list[str]) -> list[dict[str, Any]]:
    return [{"id": f"m{i}", "kind": "memory", "text": t, "acl": ["*"]} for i, t in enumerate(texts)]


def test_embed_all_stores_each_vector_on_its_item(database_url: str, bulk_model: OnnxMiniLM) -> None:
    engine = open_store(database_url)
    report = ingest(engine, "acme", entries(TEXTS))
    assert not report.rejected
    seen: list[int] = []
    # Chunks of 5 read in key order and batches of 2 sorted by length inside each chunk.
    assert embed_all(engine, bulk_model, batch=2, progress=seen.append, chunk=5) == len(TEXTS)
    assert sum(seen) == len(TEXTS) and lag(engine, bulk_model.model_id) == 0
    with engine.connect() as conn:
        rows = conn.execute(
            select(item.c.id, item.c.text, item_vector.c.vector).join(item_vector, item_vector.c.item_pk == item.c.pk)
        ).all()
    assert len(rows) == len(TEXTS)
    reference = OnnxMiniLM(threads=1)
    for row in rows:
        stored = np.frombuffer(row.vector, dtype=np.float32)
        expected = reference.embed([TEXTS[int(row.id[1:])]])[0]
        assert float(stored @ expected) > 0.9999, row.id
    # Nothing left: a second run embeds nothing.
    assert embed_all(engine, bulk_model, batch=2, chunk=5) == 0
    engine.dispose()


def test_batch_analysis_gives_the_spans_of_one_at_a_time(detector: Detector) -> None:
    single = [detector.analyze(t) for t in NOTES]
    assert detector.analyze_batch(NOTES, batch_size=3) == single
    assert any(s.type == "PERSON" for s in single[0]) and any(s.type == "EMAIL_ADDRESS" for s in single[3])
    assert single[2] == () and single[4] == ()


def stored(engine: Any) -> dict[str, list[Span]]:
    with engine.connect() as conn:
        rows = conn.execute(select(item.c.id, item_pii.c.spans).join(item_pii, item_pii.c.item_pk == item.c.pk)).all()
    return {row.id: [Span.from_json(s) for s in row.spans] for row in rows}


def test_analysis_in_worker_processes_stores_each_items_own_spans(sqlite_url: str, detector: Detector) -> None:
    engine = open_store(sqlite_url)
    assert not ingest(engine, "acme", entries(STORED)).rejected
    seen: list[int] = []
    assert analyze_all_processes(engine, detector.version, 2, batch=2, progress=seen.append) == len(STORED)
    assert sum(seen) == len(STORED) and pending(engine, detector.version) == 0
    expected = {f"m{i}": [Span.from_json(s.as_json()) for s in detector.analyze(t)] for i, t in enumerate(STORED)}
    assert stored(engine) == expected
    engine.dispose()


def test_serial_analyze_all_matches_one_at_a_time(database_url: str, detector: Detector) -> None:
    engine = open_store(database_url)
    assert not ingest(engine, "acme", entries(STORED)).rejected
    assert analyze_all(engine, detector, batch=3) == len(STORED)
    expected = {f"m{i}": [Span.from_json(s.as_json()) for s in detector.analyze(t)] for i, t in enumerate(STORED)}
    assert stored(engine) == expected
    assert analyze_all(engine, detector, batch=3) == 0
    engine.dispose()


CLEAN_ENV: dict[str, str | None] = {
    "GATEWAY_DATABASE_URL": None,
    "GATEWAY_DATA_DIR": None,
    "GATEWAY_EMBEDDINGS": None,
    "GATEWAY_EMBEDDINGS_URL": None,
}


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["embed", "--batch", "0"], "--batch"),
        (["embed", "--threads", "0"], "--threads"),
        (["pii", "analyze", "--processes", "0"], "--processes"),
        (["pii", "analyze", "--batch", "x"], "--batch"),
    ],
)
def test_bad_bulk_options_are_refused_by_name(tmp_path: Path, args: list[str], field: str) -> None:
    result = CliRunner().invoke(main, [*args, "--data", str(tmp_path)], env=CLEAN_ENV)
    assert result.exit_code == 2 and field in result.output and "Traceback" not in result.output


def test_pii_analyze_command_analyses_everything(tmp_path: Path) -> None:
    engine = open_store(f"sqlite:///{tmp_path / 'gateway.db'}")
    assert not ingest(engine, "acme", entries(STORED)).rejected
    engine.dispose()
    result = CliRunner().invoke(main, ["pii", "analyze", "--data", str(tmp_path), "--processes", "1"], env=CLEAN_ENV)
    assert result.exit_code == 0, result.output
    assert f"{len(STORED)} items analysed; 0 waiting" in result.output
