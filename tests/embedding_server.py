"""An OpenAI-compatible embeddings server on loopback that computes its vectors with the packaged
MiniLM (so they equal the gateway's own), for the tests and for bench/embedding_server_bench.py.

It serves `POST /v1/embeddings` as text-embeddings-inference and vLLM do
(`{"data": [{"embedding": [...], "index": i}], "model": ...}`; a request for another model is a
404, as vLLM answers), records every request (how many, the most in flight at once, each
Authorization header), and can be told to fail the next N requests: `500`, `429` (with
Retry-After), `close` (the connection dropped without an answer), `slow` (an answer only after
`slow_s`, past any sensible deadline) or `dims` (vectors one number short).

In a process of its own (a benchmark's server, with its own GIL):

    python -m tests.embedding_server --port 0 [--integer]    # prints its URL, serves until killed
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: the repository root on the path, as the benchmarks do
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from http.server import ThreadingHTTPServer

from tests.loopback import Loopback, QuietHandler

FAULTS = ("500", "429", "close", "slow", "dims")


class EmbeddingServer(Loopback):
    """`model` (default the packaged MiniLM as shipped) behind `POST /v1/embeddings` on a free
    loopback port (or `port`); `url` ends in /v1, as GATEWAY_EMBEDDINGS_URL would."""

    def __init__(
        self, model: Any = None, *, port: int = 0, slow_s: float = 5.0, retry_after: str | None = "0", delay_s: float = 0.0
    ) -> None:
        if model is None:
            from gateway.writes.embeddings import OnnxMiniLM

            model = OnnxMiniLM(threads=1)
        self.model = model
        self.name = model.model_id  # the model it serves, by the id the gateway gives the packaged one
        self.slow_s = slow_s
        self.delay_s = delay_s  # a wait before every answer, using no CPU: a remote server's round trip
        self.retry_after = retry_after
        self.requests = 0  # POSTs to /v1/embeddings
        self.texts = 0  # texts embedded and answered
        self.in_flight = 0
        self.max_in_flight = 0
        self.authorizations: list[str | None] = []
        self._faults: list[str] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        server = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a real server: a client reuses its connections

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path.rstrip("/") != "/v1/embeddings":
                    self._answer(404, {"error": {"message": "no such route"}})
                    return
                with server._lock:
                    server.requests += 1
                    server.authorizations.append(self.headers.get("Authorization"))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    fault = server._faults.pop(0) if server._faults else None
                try:
                    self._serve(raw, fault)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up first (past its deadline)
                    self.close_connection = True
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _serve(self, raw: bytes, fault: str | None) -> None:
                if fault == "500":
                    self._answer(500, {"error": {"message": "internal error"}})
                    return
                if fault == "429":
                    headers = {"Retry-After": server.retry_after} if server.retry_after is not None else {}
                    self._answer(429, {"error": {"message": "too many requests"}}, headers)
                    return
                if fault == "close":
                    self.close_connection = True  # no answer at all: the client sees the connection drop
                    return
                if fault == "slow" and server._closing.wait(server.slow_s):
                    self.close_connection = True
                    return
                try:
                    body = json.loads(raw)
                    texts = body["input"]
                    texts = [texts] if isinstance(texts, str) else texts
                    assert isinstance(texts, list) and all(isinstance(t, str) for t in texts)
                except (ValueError, KeyError, TypeError, AssertionError):
                    self._answer(400, {"error": {"message": "expected {model, input: [str]}"}})
                    return
                if body.get("model") != server.name:
                    self._answer(404, {"error": {"message": "the model does not exist"}})
                    return
                if server.delay_s:
                    time.sleep(server.delay_s)
                vectors = server.model.embed(texts).tolist()
                if fault == "dims":
                    vectors = [v[:-1] for v in vectors]
                data = [{"object": "embedding", "embedding": v, "index": i} for i, v in enumerate(vectors)]
                self._answer(
                    200, {"object": "list", "data": data, "model": server.name, "usage": {"prompt_tokens": 0, "total_tokens": 0}}
                )
                with server._lock:
                    server.texts += len(texts)

            def _answer(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                encoded = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(encoded)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(encoded)

        if port:
            self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
            self.url = f"http://127.0.0.1:{port}/v1"
            self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
            self.thread.start()
        else:
            super().__init__(Handler, "/v1")

    def fail(self, fault: str, times: int = 1) -> None:
        """Fail the next `times` requests with `fault` (one of FAULTS)."""
        assert fault in FAULTS, fault
        with self._lock:
            self._faults.extend([fault] * times)

    def reset(self) -> None:
        """Forget the requests seen and any faults still queued."""
        with self._lock:
            self._faults.clear()
            self.requests = self.texts = self.max_in_flight = 0
            self.authorizations.clear()

    def settings(self, **more: Any) -> dict[str, Any]:
        """The gateway's settings for embedding through this server, and `more`."""
        return {"embeddings_url": self.url, "embeddings_model": self.name, "embeddings_dims": self.model.dims, **more}

    def close(self) -> None:
        self._closing.set()  # a `slow` request still waiting ends now
        super().close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime threads per request")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="wait this long (no CPU) before each answer")
    parser.add_argument(
        "--integer", action="store_true", help="MiniLM re-quantized for integer arithmetic (GATEWAY_EMBEDDINGS=minilm)"
    )
    args = parser.parse_args()
    from gateway.writes.embeddings import OnnxMiniLM

    server = EmbeddingServer(OnnxMiniLM(threads=args.threads, integer=args.integer), port=args.port, delay_s=args.delay_ms / 1000)
    print(json.dumps({"url": server.url, "model": server.name, "dims": server.model.dims}), flush=True)
    try:
        server.thread.join()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
