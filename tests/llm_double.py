"""A loopback test double for an OpenAI-compatible chat-completions endpoint.

A real HTTP server on ``http://127.0.0.1:<free port>`` (a ``ThreadingHTTPServer`` in a
background thread), standard library only. It records every request it receives and answers
whatever the test programmed:

    with LlmDouble() as llm:
        llm.url                       # "http://127.0.0.1:PORT/v1"
        llm.reply = json_answer("Paris [M1]", ["M1"], 0.9)
        ...                           # POST {llm.url}/chat/completions
        llm.requests[-1].messages     # what the client sent, parsed
        llm.requests[-1].headers["authorization"]

Endpoint: ``POST /v1/chat/completions``. Anything else answers 404 (still recorded).

``llm.reply`` (changeable at any time) is a ``Reply`` or a function ``RecordedRequest -> Reply``:

- ``Reply(content="...")``: 200 with an OpenAI chat-completion body whose
  ``choices[0].message.content`` is the content (``None`` gives a null content).
- ``completion(content)`` / ``json_answer(answer, citations, confidence)``: the same, built for you
  (``json_answer`` puts ``{"answer", "citations", "confidence"}`` JSON in the content).
- ``Reply(status=500, body=b"...")``: any status; ``body`` (bytes, or a value sent as JSON)
  replaces the whole response body, so malformed bodies are easy: ``Reply(body=b"not json")``.
- ``Reply(delay=2.0, ...)``: wait before answering (for timeouts). ``close()`` interrupts the
  wait, and the connection is then dropped unanswered.
- ``Reply(drip=0.15, ...)``: send the headers at once, then the body in four pieces that many
  seconds apart (each gap under a per-read timeout, the whole over a total budget).
- ``Reply(drop=True)``: close the connection without answering.
- ``echo_placeholders(cite=...)``: a reply function answering with every ``<TYPE_n>`` placeholder
  found in the request's messages and the given citations as ``[X]`` markers (by default every
  citation the context message offered), e.g. to check that a caller restores placeholders, or
  to cite ``[M1]`` together with an invented ``[M9]``.

The default reply is ``json_answer("double answer", [], 0.5)``.

``llm.requests`` is a snapshot (a new list) of ``RecordedRequest``s, in arrival order: method,
path, headers (names lower-cased), ``body`` (parsed JSON, or the raw text when not JSON).
"""

from __future__ import annotations

import http.server
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LlmDouble", "RecordedRequest", "Reply", "completion", "json_answer", "echo_placeholders"]

PLACEHOLDER = re.compile(r"<[A-Z][A-Z_]*_\d+>")
OFFERED = re.compile(r"^\[([MDPE]\d+)\] \(", re.MULTILINE)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or the raw text when it is not JSON, or None when empty
    received_at: float = field(default_factory=time.monotonic)

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages = self.body.get("messages") if isinstance(self.body, dict) else None
        return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []

    @property
    def raw_text(self) -> str:
        """The body as the client sent it would read (JSON re-serialised without escaping)."""
        return self.body if isinstance(self.body, str) else json.dumps(self.body, ensure_ascii=False)


_UNSET: Any = object()


@dataclass(frozen=True)
class Reply:
    status: int = 200
    content: str | None = None
    body: Any = _UNSET  # bytes, or a value sent as JSON; replaces the completion body
    delay: float = 0.0
    drop: bool = False
    drip: float = 0.0  # > 0: send the body in four pieces, this many seconds apart
    content_type: str = "application/json"


ReplySource = Reply | Callable[[RecordedRequest], Reply]


def completion(content: str | None, *, status: int = 200, delay: float = 0.0) -> Reply:
    return Reply(status=status, content=content, delay=delay)


def json_answer(answer: str, citations: Sequence[str] = (), confidence: Any = 0.5, *, delay: float = 0.0) -> Reply:
    payload = {"answer": answer, "citations": list(citations), "confidence": confidence}
    return Reply(content=json.dumps(payload), delay=delay)


def echo_placeholders(cite: Sequence[str] | None = None) -> Callable[[RecordedRequest], Reply]:
    """A reply function: the placeholders seen in the non-system messages (in order, once each) and the
    citations ``cite`` (default: those the context message offered) as markers."""

    def reply(request: RecordedRequest) -> Reply:
        text = "\n".join(str(m.get("content", "")) for m in request.messages if m.get("role") != "system")
        seen = list(dict.fromkeys(PLACEHOLDER.findall(text)))
        citations = list(cite) if cite is not None else list(dict.fromkeys(OFFERED.findall(text)))
        answer = "Seen: " + " ".join(seen) + "".join(f" [{c}]" for c in citations)
        return json_answer(answer, citations, 0.8)

    return reply


def _completion_body(model: Any, content: str | None, n: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-double-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model if isinstance(model, str) else "double",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 64

    def __init__(self, double: LlmDouble) -> None:
        self.double = double
        super().__init__(("127.0.0.1", 0), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that give up (timeouts) or connections the double drops are expected.
        if isinstance(sys.exc_info()[1], (ConnectionError, socket.timeout, OSError)):
            return
        super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "LlmDouble/1"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, status: int, body: bytes, content_type: str, drip: float = 0.0) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        if drip <= 0:
            self.wfile.write(body)
            self.wfile.flush()
            return
        self.wfile.flush()
        step = max(1, -(-len(body) // 4))
        stop: threading.Event = self.server.double._stop  # type: ignore[attr-defined]
        for start in range(0, len(body), step):
            if stop.wait(drip):
                return
            self.wfile.write(body[start : start + step])
            self.wfile.flush()

    def _dispatch(self) -> None:
        double: LlmDouble = self.server.double  # type: ignore[attr-defined]
        raw = self._read_body()
        text = raw.decode("utf-8", errors="replace")
        try:
            parsed: Any = json.loads(text) if raw else None
        except ValueError:
            parsed = text
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = RecordedRequest(self.command, self.path, headers, parsed)
        n = double._record(request)
        self.close_connection = True
        if self.command != "POST" or self.path.split("?")[0] != "/v1/chat/completions":
            self._send(404, b'{"error": {"message": "not found"}}', "application/json")
            return
        source = double.reply
        reply = source(request) if callable(source) else source
        if reply.delay and double._stop.wait(reply.delay):
            return  # closing: drop the connection unanswered
        if reply.drop:
            return
        if reply.body is _UNSET:
            model = parsed.get("model") if isinstance(parsed, dict) else None
            body = json.dumps(_completion_body(model, reply.content, n)).encode()
        elif isinstance(reply.body, bytes):
            body = reply.body
        else:
            body = json.dumps(reply.body).encode()
        self._send(reply.status, body, reply.content_type, reply.drip)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _dispatch


class LlmDouble:
    """An OpenAI-compatible chat endpoint double; started on construction, closed by ``close()``
    or by leaving the ``with`` block."""

    def __init__(self, reply: ReplySource | None = None) -> None:
        self.reply: ReplySource = reply if reply is not None else json_answer("double answer", [], 0.5)
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = _Server(self)
        host, port = self._server.server_address[:2]
        self.port = int(port)
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="llm-double", daemon=True
        )
        self._thread.start()

    def _record(self, request: RecordedRequest) -> int:
        with self._lock:
            self._requests.append(request)
            return len(self._requests)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LlmDouble:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
