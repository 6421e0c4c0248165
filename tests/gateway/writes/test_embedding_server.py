"""The embedding-server path (GATEWAY_EMBEDDINGS_URL) against a real HTTP server on loopback that
computes its vectors with the packaged model (tests/embedding_server.py): the same vectors as local
ones, several requests in flight, retries, a deadline, its key from a file, every answer checked,
and a server that is down or slow leaves items waiting, never failing a write or a retrieve."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from sqlalchemy import select

from core.errors import ConfigurationError, ConnectorError
from core.store import open_store
from gateway.cli import main
from gateway.settings import load_settings
from gateway.writes.embeddings import HttpEmbedder, OnnxMiniLM, load_embedder
from gateway.writes.items import ingest
from gateway.writes.vectorize import embed_all, item, item_vector, lag
from tests.conftest import open_gateway
from tests.embedding_server import EmbeddingServer

WORDS = "renewal pricing discount billing invoice contract support escalation quarterly forecast".split()
TEXTS = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(3 + (i * 13) % 60)) for i in range(40)]
KEY = "sk-loopback-" + "k" * 24
CLEAN_ENV: dict[str, str | None] = {
    "GATEWAY_DATABASE_URL": None,
    "GATEWAY_DATA_DIR": None,
    "GATEWAY_EMBEDDINGS": None,
    "GATEWAY_EMBEDDINGS_KEY": None,
    "GATEWAY_EMBEDDINGS_KEY_FILE": None,
}


@pytest.fixture(scope="module")
def local() -> OnnxMiniLM:
    return OnnxMiniLM(threads=1)


@pytest.fixture(scope="module")
def running(local: OnnxMiniLM) -> Iterator[EmbeddingServer]:
    server = EmbeddingServer(local)
    yield server
    server.close()


@pytest.fixture
def server(running: EmbeddingServer) -> EmbeddingServer:
    running.reset()
    running.slow_s = 5.0
    running.retry_after = "0"
    return running


OPEN: list[HttpEmbedder] = []


@pytest.fixture(autouse=True)
def _closed() -> Iterator[None]:
    """Every embedder a test made is closed after it (its kept-alive connections with it)."""
    yield
    while OPEN:
        OPEN.pop().close()


def client(server: EmbeddingServer, **options: Any) -> HttpEmbedder:
    """An embedder of the server, with quick backoff unless told otherwise."""
    settings: dict[str, Any] = {"batch": 4, "concurrency": 4, "attempts": 4, "backoff_s": 0.01, **options}
    timeout_ms = settings.pop("timeout_ms", 5000)
    key = settings.pop("key", None)
    OPEN.append(HttpEmbedder(server.url, server.name, key, server.model.dims, timeout_ms, **settings))
    return OPEN[-1]


def entries(texts: list[str]) -> list[dict[str, Any]]:
    return [{"id": f"m{i}", "kind": "memory", "text": t, "acl": ["*"]} for i, t in enumerate(texts)]


def stored_vectors(engine: Any) -> dict[str, np.ndarray[Any, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(select(item.c.id, item_vector.c.vector).join(item_vector, item_vector.c.item_pk == item.c.pk)).all()
    return {row.id: np.frombuffer(row.vector, dtype=np.float32) for row in rows}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_embed_all_through_the_server_gives_the_local_vectors_with_requests_in_flight(
    sqlite_url: str, server: EmbeddingServer, local: OnnxMiniLM
) -> None:
    engine = open_store(sqlite_url)
    assert not ingest(engine, "acme", entries(TEXTS)).rejected
    embedder = client(server, key=KEY)
    seen: list[int] = []
    assert embed_all(engine, embedder, progress=seen.append) == len(TEXTS)
    assert sum(seen) == len(TEXTS) and lag(engine, embedder.model_id) == 0
    vectors = stored_vectors(engine)
    assert len(vectors) == len(TEXTS)
    for item_id, vector in vectors.items():
        expected = local.embed([TEXTS[int(item_id[1:])]])[0]
        assert float(vector @ expected) > 0.9999, item_id
    assert server.requests == len(TEXTS) // 4  # batches of 4, none retried
    assert server.max_in_flight >= 2  # several requests in flight at once
    assert set(server.authorizations) == {f"Bearer {KEY}"}
    assert embedder.served_model == server.name
    engine.dispose()


def test_a_query_is_one_request(server: EmbeddingServer, local: OnnxMiniLM) -> None:
    vector = client(server).embed(["renewal pricing"])
    assert server.requests == 1 and float(vector[0] @ local.embed(["renewal pricing"])[0]) > 0.9999
    server.fail("500")
    with pytest.raises(ConnectorError, match="HTTP 500"):
        client(server).embed(["renewal pricing"])  # no retry on the query path: its deadline is the caller's
    assert server.requests == 2


@pytest.mark.parametrize("fault", ["500", "429", "close", "slow"])
def test_a_batch_is_retried_after_a_failure_and_succeeds(server: EmbeddingServer, local: OnnxMiniLM, fault: str) -> None:
    server.slow_s = 2.0
    server.fail(fault, 2)
    vectors = client(server, concurrency=1, timeout_ms=500).embed_many(TEXTS[:4])
    assert server.requests == 3  # two failures, then the answer
    assert all(float(v @ local.embed([t])[0]) > 0.9999 for v, t in zip(vectors, TEXTS[:4]))


def test_retry_after_is_honoured(server: EmbeddingServer) -> None:
    server.retry_after = "0.4"
    server.fail("429")
    started = time.monotonic()
    client(server, concurrency=1).embed_many(TEXTS[:4])
    assert time.monotonic() - started >= 0.4 and server.requests == 2


def test_another_4xx_is_not_retried_and_names_no_secret(server: EmbeddingServer) -> None:
    wrong = HttpEmbedder(server.url, "another-model", KEY, 384, 2000, batch=4, attempts=4, backoff_s=0.01)
    OPEN.append(wrong)
    with pytest.raises(ConnectorError) as failed:
        wrong.embed_many(TEXTS[:4])
    assert "HTTP 404, not retried" in failed.value.message and server.requests == 1
    assert KEY not in failed.value.message and TEXTS[0] not in failed.value.message


def test_a_batch_that_keeps_failing_is_an_error_after_its_attempts(server: EmbeddingServer) -> None:
    server.fail("500", 100)
    with pytest.raises(ConnectorError, match=r"HTTP 500 \(3 attempts\)"):
        client(server, concurrency=1, attempts=3).embed_many(TEXTS[:4])
    assert server.requests == 3


def test_a_server_that_stays_down_leaves_items_waiting_and_gateway_embed_says_so(tmp_path: Path) -> None:
    engine = open_store(f"sqlite:///{tmp_path / 'gateway.db'}")
    assert not ingest(engine, "acme", entries(TEXTS[:10])).rejected
    env = {
        **CLEAN_ENV,
        "GATEWAY_EMBEDDINGS_URL": f"http://127.0.0.1:{closed_port()}/v1",
        "GATEWAY_EMBEDDINGS_MODEL": "bge-small-en-v1.5",
        "GATEWAY_EMBEDDINGS_DIMS": "384",
        "GATEWAY_EMBEDDINGS_ATTEMPTS": "2",
    }
    result = CliRunner().invoke(main, ["embed", "--data", str(tmp_path)], env=env)
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert "embedding endpoint: connection failed (ConnectError) (2 attempts)" in result.output
    assert "still waiting" in result.output
    assert lag(engine, "http:bge-small-en-v1.5") == 10
    engine.dispose()


def test_a_slow_server_is_cut_at_the_deadline_and_leaves_items_waiting(sqlite_url: str, server: EmbeddingServer) -> None:
    engine = open_store(sqlite_url)
    assert not ingest(engine, "acme", entries(TEXTS[:8])).rejected
    server.fail("slow", 100)
    embedder = client(server, timeout_ms=300, attempts=2)
    started = time.monotonic()
    with pytest.raises(ConnectorError, match=r"no answer within 0.3 s \(GATEWAY_EMBEDDINGS_TIMEOUT_MS\)"):
        embed_all(engine, embedder)
    assert time.monotonic() - started < 3  # two attempts of 0.3 s and a short wait, never the server's 5 s
    assert lag(engine, embedder.model_id) == 8 and stored_vectors(engine) == {}
    engine.dispose()


def test_a_wrong_length_answer_is_refused_and_nothing_is_stored(sqlite_url: str, server: EmbeddingServer) -> None:
    engine = open_store(sqlite_url)
    assert not ingest(engine, "acme", entries(TEXTS[:4])).rejected
    server.fail("dims")
    with pytest.raises(ConnectorError, match=r"vector 0 has 383 numbers, not 384 \(GATEWAY_EMBEDDINGS_DIMS\)"):
        embed_all(engine, client(server))
    assert server.requests == 1  # a wrong answer is not retried
    assert stored_vectors(engine) == {} and lag(engine, f"http:{server.name}") == 4
    engine.dispose()


def answer(data: list[Any], model: str = "m") -> bytes:
    return json.dumps({"data": data, "model": model}).encode()


ROW = {"index": 0, "embedding": [1.0, 0.0, 0.0]}


@pytest.mark.parametrize(
    ("body", "count", "message"),
    [
        (b"<html>", 1, "the answer is not JSON"),
        (json.dumps({"data": "x"}).encode(), 1, "no `data` list"),
        (answer([ROW], model="other"), 1, "of model 'other', not GATEWAY_EMBEDDINGS_MODEL 'm'"),
        (answer([ROW]), 2, "1 vectors for 2 texts"),
        (answer([ROW, ROW]), 2, "`index` values are not 0 to 1"),
        (answer([{"index": 0, "embedding": [1.0, 0.0]}]), 1, "vector 0 has 2 numbers, not 3"),
        (answer([{"index": 0, "embedding": [1.0, "x", 0.0]}]), 1, "something other than numbers"),
        (b'{"data": [{"index": 0, "embedding": [1.0, NaN, 0.0]}]}', 1, "NaN or infinity"),
        (answer([{"index": 0, "embedding": [1.0, 1e300, 0.0]}]), 1, "NaN or infinity"),
    ],
)
def test_every_answer_is_checked(body: bytes, count: int, message: str) -> None:
    embedder = HttpEmbedder("http://127.0.0.1:9/v1", "m", None, 3, 1000)
    with pytest.raises(ConnectorError, match="embedding endpoint: ") as refused:
        embedder._vectors(body, count)
    assert message in refused.value.message


def test_the_rows_come_back_in_input_order_whatever_the_answer_order() -> None:
    embedder = HttpEmbedder("http://127.0.0.1:9/v1", "m", None, 3, 1000)
    rows = embedder._vectors(answer([{"index": 1, "embedding": [0.0, 2.0, 0.0]}, {"index": 0, "embedding": [3.0, 0.0, 0.0]}]), 2)
    assert rows.tolist() == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]


# --- the key, from a file or the environment ---------------------------------------------------------


def test_the_key_is_read_from_a_file(tmp_path: Path, server: EmbeddingServer) -> None:
    key_file = tmp_path / "embeddings.key"
    key_file.write_text(f"  {KEY}\n")
    environ = {"GATEWAY_EMBEDDINGS_KEY_FILE": str(key_file), "GATEWAY_EMBEDDINGS_CONCURRENCY": "2"}
    settings = load_settings(server.settings(), environ=environ)
    assert settings.embeddings_key == KEY and settings.embeddings_concurrency == 2
    embedder, _ = load_embedder(settings)
    assert isinstance(embedder, HttpEmbedder)
    OPEN.append(embedder)
    embedder.embed(["renewal"])
    assert server.authorizations == [f"Bearer {KEY}"]


def test_both_key_settings_are_a_start_up_error_naming_both(tmp_path: Path) -> None:
    key_file = tmp_path / "embeddings.key"
    key_file.write_text(KEY)
    environ = {"GATEWAY_EMBEDDINGS_KEY": KEY, "GATEWAY_EMBEDDINGS_KEY_FILE": str(key_file)}
    with pytest.raises(ConfigurationError) as refused:
        load_settings(environ=environ)
    assert "GATEWAY_EMBEDDINGS_KEY and GATEWAY_EMBEDDINGS_KEY_FILE" in refused.value.message
    assert KEY not in refused.value.message


@pytest.mark.parametrize(
    ("content", "reason"), [(None, "cannot read"), ("  \n", "is empty"), (b"\xff\xfe" + KEY.encode(), "cannot read")]
)
def test_an_unusable_key_file_is_a_start_up_error_naming_the_setting(tmp_path: Path, content: Any, reason: str) -> None:
    key_file = tmp_path / "embeddings.key"
    if isinstance(content, bytes):
        key_file.write_bytes(content)
    elif content is not None:
        key_file.write_text(content)
    with pytest.raises(ConfigurationError) as refused:
        load_settings(environ={"GATEWAY_EMBEDDINGS_KEY_FILE": str(key_file)})
    assert refused.value.message.startswith("GATEWAY_EMBEDDINGS_KEY_FILE: ") and reason in refused.value.message
    assert KEY not in refused.value.message


@pytest.mark.parametrize("name", ["GATEWAY_EMBEDDINGS_BATCH", "GATEWAY_EMBEDDINGS_CONCURRENCY", "GATEWAY_EMBEDDINGS_ATTEMPTS"])
@pytest.mark.parametrize("value", ["0", "x", "100000"])
def test_a_malformed_bulk_setting_is_a_start_up_error_naming_it(name: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        load_settings(environ={name: value})


# --- a down server never fails a write or a retrieve --------------------------------------------------


def test_a_down_server_fails_no_write_and_no_retrieve(sqlite_url: str, tmp_path: Path, server: EmbeddingServer) -> None:
    docs = [{"id": f"d{i}", "kind": "document", "text": text, "acl": ["*"]} for i, text in enumerate(TEXTS[:6])]
    # The service's own worker off: what it does with a failing server is the next test's.
    with open_gateway(sqlite_url, tmp_path, **server.settings(embeddings_attempts=2, background_embedding=False)) as gateway:
        gateway.ingest("acme", docs[:3])
        gateway.embed_all()
        ready = gateway.client.get("/readyz").json()
        assert ready["semantic"] == {
            "model": f"http:{server.name}",
            "dims": 384,
            "graphs_ready": 0,
            "graphs_building": 0,
        }  # the index's one model
        server.fail("500", 10_000)  # down from here on
        gateway.ingest("acme", docs[3:])  # the write succeeds; its items wait for vectors
        model = f"http:{server.name}"
        assert lag(gateway.store, model) == 3
        response = gateway.retrieve(gateway.key("agent"), {"task": {"type": "research"}, "query": TEXTS[4]}, semantic=True)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["sources"]["semantic"]["status"] == "error" and body["sources"]["lexical"]["status"] == "ok"
        assert "embedding endpoint: HTTP 500" in body["sources"]["semantic"]["detail"]  # the reason, one request
        assert "d4" in [i["id"] for i in body["items"]]  # the lexical answer, with an item still waiting for its vector
        assert body["depth"]["fallback_reason"] == "standard_error"
        server.reset()  # back up: the waiting items are embedded
        gateway.embed_all()
        assert lag(gateway.store, model) == 0
    engine = open_store(sqlite_url)
    assert len(stored_vectors(engine)) == 6
    engine.dispose()


def test_a_failed_background_batch_leaves_its_items_to_the_next_run(
    sqlite_url: str, tmp_path: Path, server: EmbeddingServer
) -> None:
    server.fail("500", 10_000)  # down from the start
    docs = [{"id": f"d{i}", "kind": "document", "text": text, "acl": ["*"]} for i, text in enumerate(TEXTS[:3])]
    with open_gateway(sqlite_url, tmp_path, **server.settings(embeddings_attempts=1)) as gateway:
        gateway.ingest("acme", docs)  # the write succeeds; the worker's batch fails
        deadline = time.monotonic() + 10
        while server.requests == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        assert server.requests >= 1 and lag(gateway.store, f"http:{server.name}") == 3
        server.reset()  # back up: a run now embeds what waits
        gateway.embed_all()
        assert lag(gateway.store, f"http:{server.name}") == 0
