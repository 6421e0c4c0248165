"""What connectors read and return: stored items with their envelope, candidates, source results."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from core.instants import rfc3339

SourceStatus = Literal["ok", "empty", "error", "timeout", "skipped"]


class SkipReason(StrEnum):
    """Why a source did not run; the value is the `detail` a caller reads."""

    NOT_REQUESTED = "not requested"
    NO_GRAPH_CONNECTOR = "no graph connector in this deployment"
    NO_SEMANTIC_CONNECTOR = "no semantic connector"
    SEMANTIC_UNAVAILABLE = "semantic search is unavailable"  # the detail names the configuration's reason
    NO_WORDS_TO_EMBED = "query has no words to embed"
    NO_WORDS_TO_SEARCH = "query has no words to search"
    DEPTH_FAST = "depth fast runs no embedding"
    NO_QUERY_VECTOR = "no query vector"
    NOTHING_TO_LOOK_UP = "no resolved entity, no ids to fetch and no tags to filter by"
    NO_START = "no resolved entity to start from"
    NO_RELATION = "the policy allows no relation for this task"
    NO_EDGES = "edges are not allowed for this task"
    EXPAND_CONTINUES_CURSOR = "expand continues a cursor"


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
            "edge_from": self.edge_from,
            "edge_to": self.edge_to,
        }

    def linked_entities(self) -> tuple[str, ...]:
        """The entities this item names: what it is about, attached to, or the ends of an edge."""
        return tuple(dict.fromkeys(e for e in (self.entity, self.attached_to, self.edge_from, self.edge_to) if e))


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
    skip: SkipReason | None = None  # why a skipped source did not run
    model: str | None = None  # semantic: the embedding model of the query vector and the index
    query_vector: tuple[float, ...] | None = None  # semantic: for the rerank; never leaves the process

    @classmethod
    def skipped(cls, connector: str, reason: SkipReason, detail: str | None = None) -> SourceResult:
        return cls(connector, "skipped", detail=detail or reason.value, skip=reason)


@dataclass(frozen=True, slots=True)
class Identifier:
    """A normalised entity identifier: kind is id, email, phone, profile or domain."""

    kind: str
    value: str


@dataclass(frozen=True, slots=True)
class Fused:
    """One item after fusion: its record, fused score, the sources that found it, its section pieces."""

    record: Record
    score: float
    found_by: tuple[str, ...]
    pieces: tuple[str, ...] = ()  # for a document hit: the ids of the pieces its section was read from
    strength: float = 1.0
