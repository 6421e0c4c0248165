"""Resolve entities: identifiers normalised, then looked up inside the constraints."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from connectors.base import Constraints, ExactConnector, Identifier, Record
from gateway.request import EntityRef


def normalise_email(value: str) -> str:
    return value.strip().lower()


def normalise_phone(value: str) -> str:
    return re.sub(r"\D", "", value)


def normalise_website(value: str) -> str:
    """Host of a URL, lower-cased, without a leading www."""
    value = value.strip().lower()
    host = urlsplit(value if "://" in value else f"//{value}").hostname or ""
    return host.removeprefix("www.")


def identifier_for(ref: EntityRef) -> Identifier:
    if ref.id is not None:
        return Identifier("id", ref.id.strip())
    if ref.email is not None:
        return Identifier("email", normalise_email(ref.email))
    if ref.phone is not None:
        return Identifier("phone", normalise_phone(ref.phone))
    return Identifier("domain", normalise_website(ref.website or ""))


@dataclass(frozen=True, slots=True)
class ResolvedEntity:
    record: Record
    resolved_from: Identifier


async def resolve(
    connector: ExactConnector, constraints: Constraints, refs: list[EntityRef]
) -> tuple[ResolvedEntity, ...]:
    """Entities the constraints admit, one per identifier that matched; the rest vanish silently."""
    identifiers = tuple(identifier_for(ref) for ref in refs)
    identifiers = tuple(i for i in identifiers if i.value)
    records = await connector.lookup(constraints, identifiers)
    resolved: dict[str, ResolvedEntity] = {}
    for identifier in identifiers:
        for record in records:
            if record.id not in resolved and _matches(record, identifier):
                resolved[record.id] = ResolvedEntity(record, identifier)
    return tuple(resolved.values())


def _matches(record: Record, identifier: Identifier) -> bool:
    if identifier.kind == "id":
        return record.id == identifier.value
    return bool(getattr(record, identifier.kind) == identifier.value)
