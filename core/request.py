"""The retrieve request as it arrives over HTTP, validated into a frozen model."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from api.retrieve import MAX_TAG_CHARS as MAX_TAG_CHARS  # the request models are the contract's (api/retrieve.py)
from api.retrieve import MAX_TAGS as MAX_TAGS
from api.retrieve import NAME as NAME
from api.retrieve import Budget as Budget
from api.retrieve import EntityRef as EntityRef
from api.retrieve import Filters as Filters
from api.retrieve import GraphRequest as GraphRequest
from api.retrieve import ItemKind as ItemKind
from api.retrieve import Mode as Mode
from api.retrieve import RetrieveRequest as RetrieveRequest
from api.retrieve import Sources as Sources
from api.retrieve import Task as Task
from api.wire import Strict as Strict
from core.errors import BadRequest, SchemaError
from core.validation import describe_validation_error, has_nul

# Fields a caller might send to choose who it is; authorisation only ever reads the credential.
IDENTITY_FIELDS = ("tenant", "actor", "as_actor", "principal", "user")


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
