"""The hard limits of one policy decision, split by who reads them.

Connectors see only an `ItemFilter` (and the graph walk its `GraphLimits`); masking reads the
`Disclosure`. A field added to one can never silently change how another is translated.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime


@dataclass(frozen=True, slots=True)
class ItemFilter:
    """What every connector must apply inside its own query: the items this decision admits."""

    tenant: str
    principals: tuple[str, ...]
    sensitivities: tuple[str, ...]
    valid_at: datetime
    scopes: tuple[str, ...]
    kinds: tuple[str, ...]
    statuses: tuple[str, ...]
    entity_statuses: tuple[str, ...] = ()  # statuses an entity lookup may see (tombstones included)
    history: bool = False  # also items whose validity ended before valid_at (asked for, and allowed)
    subjects: tuple[str, ...] = ()  # the entities the call is about: items attached to others stay out

    def with_subjects(self, subjects: tuple[str, ...]) -> ItemFilter:
        return replace(self, subjects=subjects)


@dataclass(frozen=True, slots=True)
class GraphLimits:
    """How far the graph walk may go: relations, hops, and edges out of any one node."""

    relations: tuple[str, ...] = ()
    max_depth: int = 1
    fanout: int = 10


@dataclass(frozen=True, slots=True)
class Disclosure:
    """What happens to personal data in what is returned: masked, and which types are shown in clear."""

    mask: bool = True
    reveal: tuple[str, ...] = ()
