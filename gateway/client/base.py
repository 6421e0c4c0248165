"""BaseClient: what GatewayClient and AsyncGatewayClient share, as httpx's BaseClient is to its
Client and AsyncClient: the address, the credential, the retry rule, each request and the reading of
each answer. The two shells add only how they send and how they wait."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx

import gateway.client.calls as calls
from gateway.client.calls import Retry
from gateway.client.errors import GatewayUnreachable, Retryable

T = TypeVar("T")
H = TypeVar("H", httpx.Client, httpx.AsyncClient)


@dataclass(frozen=True, slots=True)
class Again:
    """A send to make again after `seconds`."""

    seconds: float


class BaseClient(Generic[H]):
    """One credential's view of one gateway. `token` is an API key or a JWT; it goes in the
    Authorization header and nowhere else (not in a repr, an error or a log line).

    A 429 is always sent again, after the gateway's Retry-After: admission refuses a call before it
    runs anything. A 503 is sent again only by calls that are safe to repeat: reads, and writes
    that are idempotent by id (ingest, documents, entities, edges); not an expand (its cursor may
    have advanced) nor a usage or feedback report (each is an audit row). At most `max_attempts`
    sends, no single wait longer than `max_wait` seconds; then the typed error is raised.

    `http`: an httpx client of your own (connection reuse, proxies, tests), httpx.Client for
    GatewayClient and httpx.AsyncClient for AsyncGatewayClient; it is left open on close."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        max_attempts: int = 3,
        max_wait: float = 30.0,
        http: H | None = None,
    ) -> None:
        self._base_url = calls.checked_base_url(base_url)
        self._token = calls.checked_token(token)
        self._retry = Retry(max_attempts=max_attempts, max_wait=max_wait)
        self._owned = http is None
        self._http: H = http or self._new_http(timeout)

    def _new_http(self, timeout: float) -> H:
        """The httpx client this client owns (and closes) when it was given none."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._base_url!r})"

    def _request(self, call: calls.Call[Any]) -> tuple[str, str, dict[str, Any]]:
        """Method, URL and httpx keyword arguments for one send of `call`."""
        return calls.request_of(call, self._base_url, self._token)

    def _outcome(self, call: calls.Call[T], attempt: int, response: httpx.Response | httpx.TransportError) -> T | Again:
        """What one send of `call` (attempt `attempt`, 1-based) came to: its answer, or the seconds
        to wait before sending it again; its typed error raised when it is not to be sent again."""
        if isinstance(response, httpx.TransportError):
            raise GatewayUnreachable(f"{call.method} {call.path}: no answer ({type(response).__name__})") from response
        try:
            return calls.answer(call, response)
        except Retryable as error:
            wait = self._retry.wait(error, attempt, call)
            if wait is None:
                raise
            return Again(wait)
