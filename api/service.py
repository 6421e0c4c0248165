"""What every route may answer: health, readiness, and the one shape of an error."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from api.wire import Wire


class Health(Wire):
    status: Literal["ok"]


class Readiness(Wire):
    OPTIONAL = frozenset({"checks", "admission", "background", "semantic", "lexical"})
    status: str
    checks: dict[str, str] = Field(default_factory=dict)
    admission: dict[str, Any] = Field(default_factory=dict)
    background: dict[str, int | None] = Field(
        default_factory=dict,
        description="Items waiting for each kind of background work (`embedding`, `pii analysis`), as last counted "
        "(null: not counted yet); work that waits is reported here and in `sources.semantic.lag`, never refused",
    )
    semantic: dict[str, Any] = Field(
        default_factory=dict,
        description="The model whose vectors the semantic index holds and searches (`model`, its id as stored with "
        "every vector, and `dims`; with the in-process index, `graphs_ready` and `graphs_building`: tenants whose "
        "HNSW graph is built, or building while exact search serves), or `unavailable` with the reason semantic "
        "search is off",
    )
    lexical: dict[str, Any] = Field(
        default_factory=dict,
        description="What ranks lexical search (`engine`: `tantivy`, `fts5` or `postgres`) and, for Tantivy, how many "
        "tenants' indexes this process has built (`tenants_ready`) and is building (`tenants_building`; their searches "
        "are answered by FTS5 meanwhile)",
    )


class ErrorDetail(Wire):
    OPTIONAL = frozenset({"reasons"})
    code: str
    message: str = Field(description="Names the field at fault; never a stored value")
    trace_id: str | None = Field(
        description="The audit row of the call (null for a failure before any handler ran, and on the unaudited OAuth "
        "metadata route)"
    )
    reasons: list[str] = Field(default_factory=list, description="Why the policy denied the call (`policy_denied` only)")


class Error(Wire):
    """Every error: `{"error": {"code", "message", "trace_id"}}`, its detail written out in place."""

    error: ErrorDetail

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler.resolve_ref_schema(handler(core_schema))
        schema["properties"]["error"] = dict(handler.resolve_ref_schema(schema["properties"]["error"]))
        return schema
