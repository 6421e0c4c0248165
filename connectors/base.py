"""The connector contract: one protocol per connector kind, frozen values in and out.

Every connector receives the policy's `Constraints` and must apply them inside its own
query, before anything is ranked or counted. Caller filters (`RecallQuery.tags`) are ANDed
with the constraints, never substituted for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from connectors.instants import rfc3339

SourceStatus = Literal["ok", "empty", "error", "timeout", "skipped"]


@dataclass(frozen=True, slots=True)
class Constraints:
    """The hard filters of one decision, plus the subjects the request is about."""

    tenant: str
    principals: tuple[str, ...]
    sensitivities: tuple[str, ...]
    valid_at: datetime
    scopes: tuple[str, ...]
    kinds: tuple[str, ...]
    statuses: tuple[str, ...]
    graph_relations: tuple[str, ...] = ()
    graph_max_depth: int = 1
    graph_fanout: int = 10
    entity_statuses: tuple[str, ...] = ()  # statuses an entity lookup may see (tombstones included)
    history: bool = False  # also items whose validity ended before valid_at (asked for, and allowed)
    pii_mask: bool = True  # returned items are masked (filters no item)
    pii_reveal: tuple[str, ...] = ()  # personal-data types this actor may see in clear
    subjects: tuple[str, ...] = ()
    policy_result: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def with_subjects(self, subjects: tuple[str, ...]) -> "Constraints":
        return replace(self, subjects=subjects)


@dataclass(frozen=True, slots=True)
class Record:
    """One stored item with its governance envelope, as a connector read it."""

    id: str
    kind: str
    tenant: str
    text: str
    acl: tuple[str, ...]
    sensitivity: str
    scope: tuple[str, ...]
    authority: str
    status: str
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    recorded_at: datetime | None = None
    entity: str | None = None
    section: str | None = None
    document: str | None = None
    name: str | None = None
    slot: str | None = None
    attached_to: str | None = None
    source_system: str | None = None
    source_uri: str | None = None
    entity_type: str | None = None
    email: str | None = None
    domain: str | None = None
    phone: str | None = None
    profile: str | None = None
    merged_into: str | None = None
    relation: str | None = None
    edge_from: str | None = None
    edge_to: str | None = None
    confidence: float | None = None
    weight: float | None = None
    tags: tuple[str, ...] = ()

    def envelope(self) -> dict[str, Any]:
        """The envelope as the policy reads it (no text)."""
        return {
            "id": self.id,
            "kind": self.kind,
            "tenant": self.tenant,
            "acl": list(self.acl),
            "sensitivity": self.sensitivity,
            "scope": list(self.scope),
            "authority": self.authority,
            "status": self.status,
            "valid_from": rfc3339(self.valid_from),
            "valid_to": rfc3339(self.valid_to),
            "slot": self.slot,
            "attached_to": self.attached_to,
            "entity": self.entity,
        }


@dataclass(frozen=True, slots=True)
class Candidate:
    record: Record
    connector: str
    rank: int
    score: float


@dataclass(frozen=True, slots=True)
class RecallQuery:
    text: str | None = None
    tags: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()
    limit: int = 50
    vector: tuple[float, ...] | None = None  # the query embedded by the gateway (semantic connectors)
    model: str | None = None  # id of the model that made `vector`; an index of another model refuses


@dataclass(frozen=True, slots=True)
class SourceResult:
    connector: str
    status: SourceStatus
    candidates: tuple[Candidate, ...] = ()
    ms: float = 0.0
    detail: str | None = None
    lag: int | None = None  # semantic: items not yet embedded
    embed_ms: float | None = None  # semantic: time spent embedding the query


@dataclass(frozen=True, slots=True)
class Identifier:
    """A normalised entity identifier: kind is id, email, phone, profile or domain."""

    kind: str
    value: str


@runtime_checkable
class ExactConnector(Protocol):
    name: str

    async def lookup(self, constraints: Constraints, identifiers: tuple[Identifier, ...]) -> tuple[Record, ...]:
        """Entities matching the identifiers, inside the constraints."""
        ...

    async def merged_into(self, constraints: Constraints, survivors: tuple[str, ...]) -> tuple[Record, ...]:
        """Entities merged into any of the survivors, inside the constraints."""
        ...

    async def sharing_domain(
        self, constraints: Constraints, domains: tuple[str, ...], exclude: tuple[str, ...], limit: int
    ) -> tuple[Record, ...]:
        """Other live, unmerged entities with one of the company domains, inside the constraints."""
        ...

    async def search(self, constraints: Constraints, query: RecallQuery) -> SourceResult:
        """Items named by query.ids, else properties and memories of the subjects, else items
        carrying all of query.tags; inside the constraints."""
        ...

    async def sections(self, constraints: Constraints, keys: tuple[tuple[str, str], ...]) -> tuple[Record, ...]:
        """Every piece of the given (document, section) pairs the constraints admit, in order."""
        ...


@runtime_checkable
class LexicalConnector(Protocol):
    name: str

    async def search(self, constraints: Constraints, query: RecallQuery) -> SourceResult:
        """Full-text matches for query.text, ranked, inside the constraints."""
        ...


@runtime_checkable
class SemanticConnector(Protocol):
    name: str

    async def search(self, constraints: Constraints, query: RecallQuery) -> SourceResult:
        """Nearest neighbours of query.vector among the items the constraints admit, best first.

        Candidate.score is the cosine similarity. Every constraint must be applied inside the
        backend's search; one it cannot apply makes the connector refuse (ConnectorError), never
        drop the filter.
        """
        ...


@runtime_checkable
class GraphConnector(Protocol):
    name: str

    async def search(self, constraints: Constraints, query: RecallQuery) -> SourceResult:
        """Edges reachable from constraints.subjects, inside the constraints.

        Only active edges of constraints.graph_relations, valid at constraints.valid_at, at most
        constraints.graph_max_depth hops and constraints.graph_fanout edges out of any one node,
        and never into or through an entity the constraints do not admit. Best first: confidence,
        then weight.
        """
        ...
