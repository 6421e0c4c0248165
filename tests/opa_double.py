"""A loopback test double for an OPA server.

It speaks the parts of OPA's REST API the gateway uses and evaluates with real
OPA (1.20.2, embedded through ``opa_bindings``), so decisions are the ones a
real OPA would make. Only the standard library and ``opa_bindings`` are used.

    with OpaDouble() as opa:
        opa.put_policy("t", "package t\\n\\nx := input.a + 1")
        httpx.post(f"{opa.url}/v1/data/t/x", json={"input": {"a": 1}})
        # -> 200 {"result": 2}
        opa.mode = "error"   # next decision queries answer 500

Endpoints:

- ``PUT /v1/policies/{id...}``  raw Rego body -> 200 ``{}``; parse/compile
  error -> 400 ``{"code": "invalid_parameter", "message": "error(s) occurred
  while compiling module(s)", "errors": [...]}``.
- ``DELETE /v1/policies/{id...}`` -> 200 ``{}``; unknown id -> 404
  ``resource_not_found``.
- ``PUT /v1/data[/{path}]`` JSON body -> 204 (replaces the document at path).
- ``POST /v1/data[/{path}]`` ``{"input": ...}`` -> 200 ``{"result": ...}`` or
  ``{}`` when undefined; ``?provenance`` adds a provenance block; evaluation
  error -> 500 ``{"code": "internal_error", ...}``.
- ``GET /v1/data[/{path}][?input=<json>]`` -> same as POST.
- ``GET /health`` -> 200 ``{}``.
- Malformed JSON body -> 400 ``{"code": "invalid_parameter", ...}``.

Modes (``opa.mode``, changeable at any time) only affect decision queries
(``POST``/``GET /v1/data``); policy/data management and ``/health`` always
behave normally so a test can set up state whatever the mode:

- ``"ok"``: evaluate normally.
- ``"error"``: 500 ``{"code": "internal_error", "message": "boom"}``.
- ``"garbage"``: 200 with body ``not json``.
- ``"hang"``: wait ``opa.hang_seconds`` (default 5) then answer normally;
  ``close()`` interrupts the wait (the connection is then dropped unanswered).
- ``"undefined"``: 200 ``{}``.
"""

from __future__ import annotations

import copy
import http.server
import json
import re
import socket
import sys
import threading
import urllib.parse
from typing import Any, cast

from opa_bindings import OpaEngine, OpaError

__all__ = ["OpaDouble", "OpaDoubleError", "MODES"]

MODES = ("ok", "error", "garbage", "hang", "undefined")

OPA_VERSION = "1.20.2"

_MSG_COMPILE_MODULE = "error(s) occurred while compiling module(s)"
_MSG_EVALUATION = "error(s) occurred while evaluating query"
_ERR_LINE = re.compile(r"^(?P<file>.*?):(?P<row>\d+)(?::(?P<col>\d+))?: (?P<code>[a-z_]+_error): (?P<msg>.*)$")
_COUNT_PREFIX = re.compile(r"^\d+ errors? occurred:\s*")


class OpaDoubleError(Exception):
    """Raised by the Python-side helpers (``put_policy`` etc.) when the same
    request over HTTP would have failed; ``status`` and ``body`` hold the
    HTTP answer the double would have given."""

    def __init__(self, status: int, body: dict):
        super().__init__(f"{status}: {json.dumps(body)}")
        self.status = status
        self.body = body


def _ast_errors(message: str) -> list[dict]:
    """Turn an engine error message ("1 error occurred: p:3: rego_x_error: ..."
    or a multi-line list) into OPA-style ``errors`` entries."""
    text = message
    if text.startswith("bundle activation failed: "):
        text = text[len("bundle activation failed: ") :]
    text = _COUNT_PREFIX.sub("", text, count=1)
    errors: list[dict[str, Any]] = []
    for line in text.split("\n"):
        if not line.strip() or line.startswith("\t"):
            continue  # blank, or a source excerpt / caret under the last error
        m = _ERR_LINE.match(line)
        if m is None:
            errors.append({"code": "unknown_error", "message": line})
            continue
        location: dict[str, Any] = {"file": m["file"], "row": int(m["row"])}
        if m["col"]:
            location["col"] = int(m["col"])
        errors.append({"code": m["code"], "message": m["msg"], "location": location})
    return errors


def _error_body(code: str, message: str, errors: list | None = None) -> dict:
    body: dict[str, Any] = {"code": code, "message": message}
    if errors:
        body["errors"] = errors
    return body


def _data_ref(segments: list[str]) -> str:
    """Rego ref for a URL data path, as OPA's stringPathToDataRef builds it:
    integer-looking segments become numbers, everything else strings."""
    ref = "data"
    for seg in segments:
        try:
            ref += f"[{int(seg)}]"
        except ValueError:
            ref += "[" + json.dumps(seg) + "]"
    return ref


def _split_path(rest: str) -> list[str]:
    return [urllib.parse.unquote(s) for s in rest.split("/") if s != ""]


def _truthy_param(query: dict[str, list[str]], name: str) -> bool:
    """OPA's getBoolParam: present and empty, or any value equal to "true"."""
    values = query.get(name)
    if values is None:
        return False
    if len(values) == 1 and values[0] == "":
        return True
    return any(v.lower() == "true" for v in values)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    # The stdlib default backlog of 5 resets connections under a burst of
    # concurrent clients.
    request_queue_size = 128

    def __init__(self, double: "OpaDouble"):
        self.double = double
        self.handler_threads: set[threading.Thread] = set()
        self._threads_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def process_request(self, request, client_address):
        t = threading.Thread(
            target=self._run_request,
            args=(request, client_address),
            name="opa-double-request",
            daemon=True,
        )
        with self._threads_lock:
            self.handler_threads.add(t)
        t.start()

    def _run_request(self, request, client_address):
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._threads_lock:
                self.handler_threads.discard(threading.current_thread())

    def handle_error(self, request, client_address):
        # Clients giving up (timeouts in "hang" mode, closed sockets) are
        # expected; anything else is reported to stderr as usual.
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, socket.timeout, OSError)):
            return
        super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "OpaDouble/" + OPA_VERSION
    sys_version = ""

    # -- plumbing --------------------------------------------------------

    def log_message(self, format, *args):  # noqa: A002 - stdlib signature
        pass

    @property
    def double(self) -> "OpaDouble":
        return self.server.double  # type: ignore[attr-defined]

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size_line = self.rfile.readline()
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, status: int, body: bytes | None, content_type: str = "application/json"):
        self.send_response(status)
        if body is not None:
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
        elif status != 204:
            self.send_header("Content-Length", "0")
        # One request per connection keeps shutdown simple (no idle
        # keep-alive handler threads left behind).
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        if body:
            self.wfile.write(body)
        self.wfile.flush()

    def _send_json(self, status: int, value):
        self._send(status, json.dumps(value).encode())

    def _dispatch(self):
        split = urllib.parse.urlsplit(self.path)
        path = split.path
        query = urllib.parse.parse_qs(split.query, keep_blank_values=True)
        raw = self._read_body()
        text = raw.decode("utf-8", errors="replace")
        if raw:
            try:
                recorded = json.loads(text)
            except ValueError:
                recorded = text
        else:
            recorded = None
        self.double._record(
            {
                "method": self.command,
                "path": path,
                "query": {k: v[-1] for k, v in query.items()},
                "body": recorded,
            }
        )
        try:
            status, body = self.double._handle(self.command, path, query, raw)
        except _Dropped:
            self.close_connection = True
            return
        if isinstance(body, bytes):
            self._send(status, body)
        elif body is None:
            self._send(status, None)
        else:
            self._send_json(status, body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _dispatch


class _Dropped(Exception):
    """The double is shutting down: drop the connection without answering."""


class OpaDouble:
    """An OPA server double on ``http://127.0.0.1:<free port>``.

    Started on construction; use as a context manager or call ``close()``.
    """

    def __init__(
        self,
        mode: str = "ok",
        *,
        hang_seconds: float = 5.0,
        revision: str = "double-rev-1",
        policies: dict[str, str] | None = None,
        data: dict | None = None,
    ):
        self._mode = "ok"
        self.mode = mode
        #: How long "hang" mode waits before answering.
        self.hang_seconds = hang_seconds
        #: Bundle revision reported under provenance.bundles.gateway.revision.
        self.revision = revision
        #: Every request received: {"method", "path", "query", "body"}.
        self.requests: list[dict] = []
        self._requests_lock = threading.Lock()
        # One lock for the policy/data state and the engine built from it:
        # evaluations and rebuilds are serialised (one engine at a time).
        self._engine_lock = threading.RLock()
        self._policies: dict[str, str] = {}
        self._data: dict = {}
        self._engine: OpaEngine | None = None
        self._stop = threading.Event()
        self._closed = False

        with self._engine_lock:
            self._policies = dict(policies or {})
            self._data = copy.deepcopy(data or {})
            self._engine = self._build(self._policies, self._data)

        self._server = _Server(self)
        host, port = cast(tuple[str, int], self._server.server_address[:2])
        #: Base URL, e.g. "http://127.0.0.1:54321".
        self.url = f"http://{host}:{port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="opa-double",
            daemon=True,
        )
        self._thread.start()

    # -- lifecycle -------------------------------------------------------

    def __enter__(self) -> "OpaDouble":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving, interrupt hanging requests and free the engine.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        with self._server._threads_lock:
            pending = list(self._server.handler_threads)
        for t in pending:
            t.join(timeout=2)
        with self._engine_lock:
            if self._engine is not None:
                self._engine.close()
                self._engine = None

    # -- test-facing attributes and helpers --------------------------------

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, value: str) -> None:
        if value not in MODES:
            raise ValueError(f"unknown mode {value!r}; expected one of {MODES}")
        self._mode = value

    @property
    def policies(self) -> dict[str, str]:
        """A copy of the stored policies (id -> Rego source)."""
        with self._engine_lock:
            return dict(self._policies)

    @property
    def data(self) -> dict:
        """A deep copy of the stored base data document."""
        with self._engine_lock:
            return copy.deepcopy(self._data)

    def put_policy(self, policy_id: str, source: str) -> None:
        """Same as ``PUT /v1/policies/{policy_id}``; raises OpaDoubleError."""
        self._raise_unless_ok(*self._put_policy(policy_id, source))

    def delete_policy(self, policy_id: str) -> None:
        """Same as ``DELETE /v1/policies/{policy_id}``; raises OpaDoubleError."""
        self._raise_unless_ok(*self._delete_policy(policy_id))

    def put_data(self, path: str, value) -> None:
        """Same as ``PUT /v1/data/{path}`` (slash-separated, "" for root)."""
        self._raise_unless_ok(*self._put_data(_split_path(path), value))

    def clear_requests(self) -> None:
        with self._requests_lock:
            self.requests.clear()

    def requests_to(self, path: str, method: str | None = None) -> list[dict]:
        """Recorded requests whose path equals ``path`` (and method, if given)."""
        with self._requests_lock:
            return [r for r in self.requests if r["path"] == path and (method is None or r["method"] == method)]

    @staticmethod
    def _raise_unless_ok(status: int, body) -> None:
        if status >= 400:
            raise OpaDoubleError(status, body)

    # -- engine state ------------------------------------------------------

    def _record(self, entry: dict) -> None:
        with self._requests_lock:
            self.requests.append(entry)

    @staticmethod
    def _build(policies: dict[str, str], data: dict) -> OpaEngine:
        """A fresh engine with all policies and data. Compiles everything
        (OPA would on a policy/data write) so errors surface here."""
        engine = OpaEngine()
        try:
            for pid, source in policies.items():
                engine.add_policy(pid, source)
            if data:
                engine.add_data(data)
            engine.eval_query("true")
        except BaseException:
            engine.close()
            raise
        return engine

    def _swap(self, policies: dict[str, str], data: dict) -> tuple[int, dict] | None:
        """Rebuild with new state; on success commit it and return None, else
        return the 400 answer and keep the old state. Caller holds the lock."""
        try:
            engine = self._build(policies, data)
        except OpaError as e:
            return 400, _error_body("invalid_parameter", _MSG_COMPILE_MODULE, _ast_errors(e.message))
        old, self._engine = self._engine, engine
        self._policies, self._data = policies, data
        if old is not None:
            old.close()
        return None

    def _put_policy(self, policy_id: str, source: str):
        if not policy_id:
            return 400, _error_body("invalid_parameter", "policy id must not be empty")
        with self._engine_lock:
            if self._engine is None:
                return 503, _error_body("internal_error", "double is closed")
            policies = dict(self._policies)
            policies[policy_id] = source
            failed = self._swap(policies, self._data)
        return failed or (200, {})

    def _delete_policy(self, policy_id: str):
        with self._engine_lock:
            if self._engine is None:
                return 503, _error_body("internal_error", "double is closed")
            if policy_id not in self._policies:
                return 404, _error_body(
                    "resource_not_found",
                    f'storage_not_found_error: policy id "{policy_id}"',
                )
            policies = dict(self._policies)
            del policies[policy_id]
            failed = self._swap(policies, self._data)
        return failed or (200, {})

    def _put_data(self, segments: list[str], value):
        with self._engine_lock:
            if self._engine is None:
                return 503, _error_body("internal_error", "double is closed")
            if not segments:
                if not isinstance(value, dict):
                    return 400, _error_body("invalid_parameter", "root value must be object")
                data = copy.deepcopy(value)
            else:
                data = copy.deepcopy(self._data)
                node = data
                for i, seg in enumerate(segments[:-1]):
                    child = node.get(seg) if isinstance(node, dict) else None
                    if child is None and isinstance(node, dict):
                        child = node[seg] = {}
                    if not isinstance(child, dict):
                        where = "/" + "/".join(segments[: i + 1])
                        return 404, _error_body(
                            "resource_not_found",
                            f"storage_not_found_error: {where}: document does not exist",
                        )
                    node = child
                node[segments[-1]] = copy.deepcopy(value)
            failed = self._swap(self._policies, data)
        if failed is not None:
            status, body = failed
            return status, _error_body(
                "invalid_parameter",
                "write conflict: /" + "/".join(segments),
                body.get("errors"),
            )
        return 204, None

    def _evaluate(self, segments: list[str], input_value, has_input: bool):
        query = "result = " + _data_ref(segments)
        with self._engine_lock:
            if self._engine is None:
                raise _Dropped()
            try:
                rows = self._engine.eval_query(query, input_value if has_input else None)
            except OpaError as e:
                return 500, _error_body("internal_error", _MSG_EVALUATION, _ast_errors(e.message))
        if not rows or "result" not in rows[0]:
            return 200, {}
        return 200, {"result": rows[0]["result"]}

    # -- HTTP routing --------------------------------------------------------

    def _handle(self, method: str, path: str, query: dict, raw: bytes):
        if path == "/health":
            if method == "GET":
                return 200, {}
            return 405, b"405 method not allowed\n"

        if path == "/v1/policies" or path.startswith("/v1/policies/"):
            policy_id = urllib.parse.unquote(path[len("/v1/policies/") :])
            if method == "PUT":
                try:
                    source = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    return 400, _error_body("invalid_parameter", str(e))
                return self._put_policy(policy_id, source)
            if method == "DELETE":
                return self._delete_policy(policy_id)
            return 405, b"405 method not allowed\n"

        if path == "/v1/data" or path.startswith("/v1/data/"):
            segments = _split_path(path[len("/v1/data") :])
            if method == "PUT":
                try:
                    value = json.loads(raw.decode("utf-8"))
                except ValueError as e:
                    return 400, _error_body("invalid_parameter", f"body contains malformed JSON: {e}")
                return self._put_data(segments, value)
            if method in ("POST", "GET"):
                return self._decision(method, segments, query, raw)
            return 405, b"405 method not allowed\n"

        return 404, b"404 page not found\n"

    def _decision(self, method: str, segments: list[str], query: dict, raw: bytes):
        # Parse first: a malformed request is a 400 whatever the mode.
        has_input, input_value = False, None
        if method == "POST":
            if raw.strip():
                try:
                    doc = json.loads(raw.decode("utf-8"))
                except ValueError as e:
                    return 400, _error_body(
                        "invalid_parameter",
                        f"body contains malformed input document: {e}",
                    )
                if not isinstance(doc, dict):
                    return 400, _error_body(
                        "invalid_parameter",
                        'body contains malformed input document: expected an object with an "input" key',
                    )
                if "input" in doc:
                    has_input, input_value = True, doc["input"]
        elif "input" in query:
            try:
                input_value = json.loads(query["input"][-1])
                has_input = True
            except ValueError as e:
                return 400, _error_body("invalid_parameter", f"parameter contains malformed input document: {e}")

        mode = self._mode
        if mode == "error":
            return 500, _error_body("internal_error", "boom")
        if mode == "garbage":
            return 200, b"not json"
        if mode == "undefined":
            return 200, {}
        if mode == "hang":
            if self._stop.wait(self.hang_seconds):
                raise _Dropped()

        status, body = self._evaluate(segments, input_value, has_input)
        if status == 200 and _truthy_param(query, "provenance"):
            body["provenance"] = {
                "version": OPA_VERSION,
                "bundles": {"gateway": {"revision": self.revision}},
            }
        return status, body
