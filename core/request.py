"""The retrieve request as it arrives over HTTP, validated into a frozen model."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from core.errors import BadRequest, SchemaError
from core.instants import parse_rfc3339
from core.validation import describe_validation_error, has_nul

Mode = Literal["brief", "scout", "fetch", "filter", "expand"]
ItemKind = Literal["property", "memory", "document", "edge"]
NAME = r"^[A-Za-z0-9_.:-]{1,100}$"

# Fields a caller might send to choose who it is; authorisation only ever reads the credential.
IDENTITY_FIELDS = ("tenant", "actor", "as_actor", "principal", "user")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Task(Strict):
    type: str = Field(pattern=NAME)
    scope: str | None = Field(default=None, pattern=NAME)


class EntityRef(Strict):
    id: str | None = Field(default=None, min_length=1, max_length=200)
    email: str | None = Field(default=None, min_length=3, max_length=320)
    website: str | None = Field(default=None, min_length=3, max_length=2000)
    phone: str | None = Field(default=None, min_length=3, max_length=50)

    @model_validator(mode="after")
    def exactly_one(self) -> "EntityRef":
        given = [name for name in ("id", "email", "website", "phone") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("each entity names exactly one of id, email, website, phone")
        return self


class Sources(Strict):
    exact: bool | None = None
    graph: bool | None = None
    lexical: bool | None = None
    semantic: bool | None = None


class GraphRequest(Strict):
    max_depth: int | None = Field(default=None, ge=1, le=3)
    relations: list[str] | None = Field(default=None, max_length=50)


MAX_TAGS = 20
MAX_TAG_CHARS = 200  # a stored tag is at most 200 characters: a longer one can match nothing


class Filters(Strict):
    tags: list[str] = Field(default_factory=list, max_length=MAX_TAGS)


class Budget(Strict):
    bytes: int = Field(ge=1, le=200_000)


class RetrieveRequest(Strict):
    task: Task
    query: str | None = Field(default=None, max_length=4000)
    entities: list[EntityRef] = Field(default_factory=list, max_length=20)
    as_of: str | None = None
    mode: Mode | None = None
    kinds: list[ItemKind] | None = None
    sources: Sources = Sources()
    graph: GraphRequest = GraphRequest()
    filters: Filters | None = None
    fetch: list[str] | None = Field(default=None, max_length=20)
    cursor: str | None = None
    depth: Literal["fast", "standard", "deep"] = "standard"
    budget: Budget | None = None
    limit: int = Field(default=50, ge=1, le=200)
    synthesize: bool = False
    include_historical: bool = False

    @field_validator("as_of")
    @classmethod
    def as_of_is_rfc3339(cls, value: str | None) -> str | None:
        if value is not None:
            parse_rfc3339(value)
        return value

    @property
    def as_of_instant(self) -> datetime | None:
        return parse_rfc3339(self.as_of) if self.as_of else None

    @property
    def effective_mode(self) -> Mode:
        """The mode asked for, or the one the request's shape implies."""
        if self.mode:
            return self.mode
        if self.fetch:
            return "fetch"
        if self.filters:
            return "filter"
        if self.cursor:
            return "expand"
        return "scout"


def parse_retrieve(body: Any) -> RetrieveRequest:
    if not isinstance(body, dict):
        raise BadRequest("body: expected a JSON object")
    if has_nul(body):
        raise BadRequest("body: strings must not contain the NUL character")
    for name in IDENTITY_FIELDS:
        if name in body:
            raise BadRequest(f"{name}: the tenant and actor come from the credential and cannot be set in the body")
    check_tags(body.get("filters"))
    try:
        return RetrieveRequest.model_validate(body)
    except ValidationError as exc:
        raise SchemaError(describe_validation_error(exc)) from exc


def check_tags(filters: Any) -> None:
    """Caller tags are bounded before anything else reads them (the trail keeps only their fingerprints)."""
    tags = filters.get("tags") if isinstance(filters, dict) else None
    if not isinstance(tags, list):
        return  # the schema names what is wrong with it
    if len(tags) > MAX_TAGS:
        raise BadRequest(f"filters.tags: at most {MAX_TAGS} tags")
    if any(isinstance(tag, str) and len(tag) > MAX_TAG_CHARS for tag in tags):
        raise BadRequest(f"filters.tags: a tag has at most {MAX_TAG_CHARS} characters")
