"""The two kinds of body, and the marks an answer's fields carry.

A request body (`Strict`) refuses unknown fields and coerces nothing. An answer (`Wire`) is frozen
and open: it keeps fields a newer gateway adds (`model_extra`), so an older client reads a newer
answer. `Wire.wire()` is what goes on the wire: the fields the service set, by their wire names;
a field it left unset (an edge's `from` on a memory) is not sent. Its schema lists every field as
required but those named in `OPTIONAL`.

`clear()` and `personal()` mark a field of an answer that masking reads (`gateway.privacy.mask`):
every string of an item or entity is masked unless its field is marked clear (an id, an
enumeration, an instant, or a text masked before it was packed). A field added later is masked
until someone marks it; `tests/api` fails on a field of a masked answer that carries no mark. The
mark is in the schema too, as `x-personal-data`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer

from api.instants import parse_rfc3339, rfc3339

PERSONAL_DATA = "x-personal-data"


class Strict(BaseModel):
    """A request body: unknown fields are refused (422), nothing is coerced."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _optional_fields(schema: dict[str, Any], model: type[Any]) -> None:
    optional: frozenset[str] = getattr(model, "OPTIONAL", frozenset())
    required = [name for name in schema.get("required", []) if name not in optional]
    if required:
        schema["required"] = required
    else:
        schema.pop("required", None)
    schema.pop("additionalProperties", None)  # open, as every answer is; said once in the document's description


class Wire(BaseModel):
    """An answer: frozen, open to fields added later, sent as the fields its builder set."""

    model_config = ConfigDict(
        extra="allow",
        frozen=True,
        populate_by_name=True,
        json_schema_serialization_defaults_required=True,
        json_schema_extra=_optional_fields,
    )
    OPTIONAL: ClassVar[frozenset[str]] = frozenset()  # fields an answer may leave out (by wire name)

    def wire(self) -> dict[str, Any]:
        body: dict[str, Any] = self.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return body


def _instant(value: Any) -> Any:
    return parse_rfc3339(value) if isinstance(value, str) else value


# An instant: RFC 3339 on the wire (`...Z`, microseconds when there are some), a datetime in Python.
Instant = Annotated[
    datetime,
    BeforeValidator(_instant),
    PlainSerializer(rfc3339, return_type=str, when_used="json"),
    Field(json_schema_extra={"format": "date-time"}),
]


def clear(**field: Any) -> Any:
    """A field whose values are never personal data: ids, enumerations, instants, counts."""
    return Field(**field, json_schema_extra={PERSONAL_DATA: False})


def personal(**field: Any) -> Any:
    """A field whose strings may name a person: masked when the policy masks."""
    return Field(**field, json_schema_extra={PERSONAL_DATA: True})


def _mark(info: Any) -> bool | None:
    extra = info.json_schema_extra
    return extra.get(PERSONAL_DATA) if isinstance(extra, dict) else None


def clear_fields(model: type[BaseModel]) -> frozenset[str]:
    """The wire names of the fields of `model` marked clear: masking leaves their values as they are."""
    return frozenset(info.alias or name for name, info in model.model_fields.items() if _mark(info) is False)


def unmarked_fields(model: type[BaseModel]) -> list[str]:
    """Fields of `model` that carry neither mark (a masked answer must have none)."""
    return [info.alias or name for name, info in model.model_fields.items() if _mark(info) is None]
