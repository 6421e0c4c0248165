"""uvicorn's HTTP/1.1 protocol (h11) with a deadline for a request's headers.

uvicorn bounds the idle time between keep-alive requests, but nothing bounds how long a request's
headers take to arrive: a client trickling a header a byte at a time holds its connection (and the
memory behind it) for as long as it likes. Here each connection's next request must have all its
headers within `header_timeout_s` (GATEWAY_HEADER_TIMEOUT_MS) of the connection opening or of the
previous answer ending; past it the connection is closed, and nothing of it reached the app. The
body has its own deadline, read before any seat is taken (gateway/http/traced.py `read_body`).
`gateway serve` names this class to uvicorn (`http=`), and gateway/http/server.py sets the deadline
from the settings in each worker process.
"""

from __future__ import annotations

import asyncio
import logging
from asyncio import TimerHandle
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("gateway.http")


class HeaderDeadlineProtocol(H11Protocol):
    header_timeout_s: float = 10.0  # set from GATEWAY_HEADER_TIMEOUT_MS by gateway/http/server.py
    closed_late = 0  # connections closed for headers that came too slowly, in this process

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._headers_due: TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a request's headers all arrived: it is the app's now
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the next request on this connection has the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._headers_due = self.loop.call_later(self.header_timeout_s, self._late)

    def _disarm(self) -> None:
        if self._headers_due is not None:
            self._headers_due.cancel()
            self._headers_due = None

    def _late(self) -> None:
        self._headers_due = None
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            type(self).closed_late += 1
            log.info("closed a connection whose request headers did not arrive within %g s", self.header_timeout_s)
            self.transport.close()
