"""Servers the tests start on loopback (a collector, a registry, a model endpoint): their request
handler's base, which keeps the test output clean of the server's request log."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any


class QuietHandler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        return None
