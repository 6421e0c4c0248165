"""Servers the tests start on loopback (a collector, a registry, a model endpoint): their request
handler's base, which keeps the test output clean of the server's request log, and the server
itself on a free port, serving from a thread until closed."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


class QuietHandler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        return None


class Loopback:
    """`handler` served on a free loopback port from a daemon thread (each request on a daemon
    thread of its own) until close(); `url` is the server's address with `path` after it."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], path: str = "") -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def __enter__(self) -> Loopback:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
