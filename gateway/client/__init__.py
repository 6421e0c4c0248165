"""A typed Python client of the gateway's HTTP API, blocking (GatewayClient) and async
(AsyncGatewayClient), on httpx. It imports nothing of the service: install the package, point it at
a gateway, and call.

    from gateway.client import GatewayClient

    with GatewayClient("http://127.0.0.1:8080", token=key) as gateway:
        answer = gateway.retrieve({"type": "account_followup", "scope": "sales"}, "pricing discount")
"""

from gateway.client.aio import AsyncGatewayClient
from gateway.client.errors import (
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    GatewayClientError,
    GatewayUnreachable,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    Retryable,
    ServerError,
    Unauthenticated,
    Unavailable,
    UnexpectedAnswer,
)
from gateway.client.models import (
    Budget,
    Decision,
    DeletionResult,
    DocumentReport,
    Entity,
    FeedbackReport,
    IngestReport,
    Item,
    MergeResult,
    Rejection,
    RetrieveResult,
    Source,
    SourceStatus,
    Task,
    Trace,
    TracePage,
    TraceSummary,
    UsageReport,
    VerifyReport,
)
from gateway.client.sync import GatewayClient

__all__ = [
    "ApiError",
    "AsyncGatewayClient",
    "BadRequest",
    "Budget",
    "Conflict",
    "Decision",
    "DeletionResult",
    "DocumentReport",
    "Entity",
    "FeedbackReport",
    "Forbidden",
    "GatewayClient",
    "GatewayClientError",
    "GatewayUnreachable",
    "IngestReport",
    "Item",
    "MergeResult",
    "NotFound",
    "PayloadTooLarge",
    "RateLimited",
    "Rejection",
    "RetrieveResult",
    "Retryable",
    "ServerError",
    "Source",
    "SourceStatus",
    "Task",
    "Trace",
    "TracePage",
    "TraceSummary",
    "Unauthenticated",
    "Unavailable",
    "UnexpectedAnswer",
    "UsageReport",
    "VerifyReport",
]
