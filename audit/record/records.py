"""What every record a call leaves is: a frozen value that sets its own parts of the call's lineage.

A record is either one part, stored under its `key` (`Part`: `ItemsWritten` is the `ingest` part),
or several parts at the lineage's top, one per field (`Parts`: `Budgeted` sets `packed`,
`dropped_for_budget`, ...). Its fields are the stored keys, so each fact has one name, from the
handler that records it to the reviewer that reads it.

Built in code (by a handler or a stage) a record takes every field it declares but those it names
`omittable`, and no other: its part holds every key, as the stored rows always have. Read from a
stored row (validated with the `STORED` context, as `Lineage.read` does) it takes what the row holds:
the fields' defaults are for older rows, and keys no field knows are kept as they were.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Final, Self

from pydantic import ValidationInfo, model_validator

from audit.record.parts import LineagePart

STORED: Final[Mapping[str, bool]] = {"stored": True}  # the validation context of a row read back


class CallRecord(LineagePart):
    """A record of a call: frozen; the lineage parts it sets are `parts()`."""

    omittable: ClassVar[frozenset[str]] = frozenset()  # fields a record built in code may leave out

    @model_validator(mode="after")
    def _as_built(self, info: ValidationInfo) -> Self:
        if isinstance(info.context, Mapping) and info.context.get("stored"):
            return self  # a stored row: what it holds
        name = type(self).__name__
        missing = sorted(set(type(self).model_fields) - self.model_fields_set - self.omittable)
        if missing:
            raise ValueError(f"{name} takes every field of its part; missing: {', '.join(missing)}")
        if self.model_extra:
            raise ValueError(f"{name} takes no extra field: {', '.join(sorted(self.model_extra))}")
        return self

    def parts(self) -> Mapping[str, object]:
        """The lineage parts this record sets, by key."""
        raise NotImplementedError


class Part(CallRecord):
    """A record that is one part of the lineage, stored under `key` as the fields it was given."""

    key: ClassVar[str]

    def parts(self) -> Mapping[str, object]:
        return {self.key: self}


class Parts(CallRecord):
    """A record of several parts at the lineage's top: each field is one (None: absent)."""

    def parts(self) -> Mapping[str, object]:
        return {name: getattr(self, name) for name in type(self).model_fields}
