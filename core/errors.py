"""The gateway's one error tree.

    GatewayError
     ├── BadRequest            400  malformed input (names the field)
     │    └── SchemaError      422  well-formed JSON of the wrong shape
     ├── Unauthenticated       401  no credential or a bad one
     ├── Forbidden             403  the credential lacks a role for this endpoint
     ├── PolicyDenied          403  the policy said no
     ├── NotFound              404
     ├── MethodNotAllowed      405  a known path, another method
     ├── Conflict              409  the request contradicts stored state (a merge cycle, a busy cursor)
     ├── PayloadTooLarge       413
     ├── RateLimited           429  past an actor's or a tenant's admission limit (Retry-After)
     ├── PolicyUnavailable     503  no decision: never an allow, never a deny
     ├── StoreUnavailable      503
     ├── AuditWriteError       503  no record, no answer
     ├── MaskingUnavailable    503  the policy requires masking and nothing can detect personal data
     ├── DeadlineExceeded      504  a long operation (an impact replay) ran past its total deadline
     ├── ConnectorError            one source failed; the answer degrades
     └── ConfigurationError        bad settings or policies at start-up

Messages never carry stored values. gateway.http.errors maps them to HTTP, in that one place.
"""

from __future__ import annotations


class GatewayError(Exception):
    status = 500
    code = "internal_error"

    def __init__(self, message: str, *, reasons: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reasons = reasons or []

    @property
    def headers(self) -> dict[str, str]:
        """HTTP headers the answer must carry (Retry-After on a 429)."""
        return {}


class BadRequest(GatewayError):
    status = 400
    code = "bad_request"


class SchemaError(BadRequest):
    status = 422
    code = "invalid_request"


class Unauthenticated(GatewayError):
    status = 401
    code = "unauthenticated"


class Forbidden(GatewayError):
    status = 403
    code = "forbidden"


class PolicyDenied(GatewayError):
    status = 403
    code = "policy_denied"


class NotFound(GatewayError):
    status = 404
    code = "not_found"


class MethodNotAllowed(GatewayError):
    status = 405
    code = "method_not_allowed"


class Conflict(GatewayError):
    status = 409
    code = "conflict"


class PayloadTooLarge(GatewayError):
    status = 413
    code = "payload_too_large"


class RequestTimeout(GatewayError):
    """The body did not arrive in time (GATEWAY_BODY_TIMEOUT_MS): a caller's slow socket holds nothing."""

    status = 408
    code = "request_timeout"


class RateLimited(GatewayError):
    status = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class PolicyUnavailable(GatewayError):
    status = 503
    code = "policy_unavailable"


class StoreUnavailable(GatewayError):
    status = 503
    code = "store_unavailable"


class AuditWriteError(GatewayError):
    status = 503
    code = "audit_unavailable"


class MaskingUnavailable(GatewayError):
    status = 503
    code = "masking_unavailable"


class DeadlineExceeded(GatewayError):
    status = 504
    code = "deadline_exceeded"


class ConnectorError(GatewayError):
    status = 502
    code = "connector_error"


class ConfigurationError(GatewayError):
    code = "configuration_error"


def where(error: BaseException) -> str:
    """An exception's type and innermost file:line, for logs: never its message, which may quote values."""
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    place = f" at {frame.tb_frame.f_code.co_filename}:{frame.tb_lineno}" if frame is not None else ""
    return f"{type(error).__name__}{place}"
