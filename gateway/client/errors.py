"""What the client raises: the gateway's error answers as types, each carrying its trace id.

    GatewayClientError
     ├── GatewayUnreachable        no answer at all: connection refused or reset, timed out
     ├── UnexpectedAnswer          an answer outside the contract (not JSON, not the documented shape)
     └── ApiError                  the gateway answered with an error: status, code, message, trace_id
          ├── BadRequest           400, 422  malformed input; the message names the field
          ├── Unauthenticated      401       no, bad, revoked or expired credential
          ├── Forbidden            403       the key lacks the role, or the policy said no (`reasons`)
          ├── NotFound             404       unknown, or not yours: the gateway never says which
          ├── Conflict             409
          ├── PayloadTooLarge      413
          ├── RateLimited          429       past an admission queue bound or quota; `retry_after` in s
          ├── Unavailable          503       no policy, store, audit or masking; `retry_after` if sent
          └── ServerError          other 5xx (a bare `internal_error`)

The client retries RateLimited and Unavailable itself (a bounded number of times) before it raises
them. No message ever carries the credential: the gateway never echoes it, and the client never
puts it in anything but the Authorization header.
"""

from __future__ import annotations


class GatewayClientError(Exception):
    """Anything the client raises."""


class GatewayUnreachable(GatewayClientError):
    """No answer came back (the cause is chained)."""


class UnexpectedAnswer(GatewayClientError):
    """An answer the client cannot read as the contract describes it."""

    def __init__(self, message: str, *, status: int, trace_id: str | None) -> None:
        super().__init__(message)
        self.status = status
        self.trace_id = trace_id


class ApiError(GatewayClientError):
    """An error answer: `{"error": {"code", "message", "trace_id"}}`, with its HTTP status."""

    def __init__(self, status: int, code: str, message: str, trace_id: str | None, *, reasons: tuple[str, ...] = ()) -> None:
        super().__init__(f"{status} {code}: {message}" + (f" (trace {trace_id})" if trace_id else ""))
        self.status = status
        self.code = code
        self.message = message
        self.trace_id = trace_id
        self.reasons = reasons


class BadRequest(ApiError):
    """400 `bad_request` or 422 `invalid_request`."""


class Unauthenticated(ApiError):
    """401."""


class Forbidden(ApiError):
    """403 `forbidden` (the key lacks the endpoint's role) or `policy_denied` (`reasons` says why)."""


class NotFound(ApiError):
    """404."""


class Conflict(ApiError):
    """409."""


class PayloadTooLarge(ApiError):
    """413."""


class Retryable(ApiError):
    """An answer worth asking again, after `retry_after` seconds when the gateway said (else None)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        trace_id: str | None,
        *,
        reasons: tuple[str, ...] = (),
        retry_after: float | None = None,
    ) -> None:
        super().__init__(status, code, message, trace_id, reasons=reasons)
        self.retry_after = retry_after


class RateLimited(Retryable):
    """429 `rate_limited`."""


class Unavailable(Retryable):
    """503: `policy_unavailable`, `store_unavailable`, `audit_unavailable`, `masking_unavailable`."""


class ServerError(ApiError):
    """Any other 5xx."""


BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    422: BadRequest,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    429: RateLimited,
    503: Unavailable,
}


def error_class(status: int) -> type[ApiError]:
    """The type for an error status; one the contract does not name is an ApiError (4xx) or ServerError."""
    return BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
