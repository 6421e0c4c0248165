"""The connector contract: one protocol per connector kind, frozen values in and out.

Every connector applies the policy's filter inside its own query, before anything is ranked or
counted. Caller filters (`RecallQuery.tags`) are ANDed with it, never substituted for it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from core.constraints import GraphLimits, ItemFilter
from core.records import Identifier, RecallQuery, Record, SourceResult


@runtime_checkable
class ExactConnector(Protocol):
    name: str

    async def lookup(self, where: ItemFilter, identifiers: tuple[Identifier, ...]) -> tuple[Record, ...]:
        """Entities matching the identifiers, inside the filter."""
        ...

    async def merged_into(self, where: ItemFilter, survivors: tuple[str, ...]) -> tuple[Record, ...]:
        """Entities merged into any of the survivors, inside the filter."""
        ...

    async def sharing_domain(
        self, where: ItemFilter, domains: tuple[str, ...], exclude: tuple[str, ...], limit: int
    ) -> tuple[Record, ...]:
        """Other live, unmerged entities with one of the company domains, inside the filter."""
        ...

    async def search(self, where: ItemFilter, query: RecallQuery) -> SourceResult:
        """Items named by query.ids, else properties and memories of the subjects, else items
        carrying all of query.tags; inside the filter."""
        ...

    async def linked(self, tenant: str, ids: tuple[str, ...]) -> tuple[Record, ...]:
        """The tenant's entities with these ids, whatever the filter: only for the item policy to
        judge an item's links (an edge shows only when both ends may be seen); never returned."""
        ...

    async def sections(
        self, where: ItemFilter, keys: tuple[tuple[str, str], ...], known: tuple[Record, ...] = ()
    ) -> tuple[Record, ...]:
        """Every piece of the given (document, section) pairs the filter admits, in order; a piece
        among the `known` records just read (the candidates) may be returned as that record."""
        ...


@runtime_checkable
class LexicalConnector(Protocol):
    name: str

    async def search(self, where: ItemFilter, query: RecallQuery) -> SourceResult:
        """Full-text matches for query.text, ranked, inside the filter."""
        ...


@runtime_checkable
class SemanticConnector(Protocol):
    name: str

    async def search(self, where: ItemFilter, query: RecallQuery) -> SourceResult:
        """Nearest neighbours of query.vector among the items the filter admits, best first.

        Candidate.score is the cosine similarity. Every constraint must be applied inside the
        backend's search; one it cannot apply makes the connector refuse (ConnectorError), never
        drop the filter.
        """
        ...


@runtime_checkable
class GraphConnector(Protocol):
    name: str

    async def search(self, where: ItemFilter, limits: GraphLimits, query: RecallQuery) -> SourceResult:
        """Edges reachable from where.subjects, inside the filter.

        Only active edges of limits.relations, valid at where.valid_at, at most limits.max_depth
        hops and limits.fanout edges out of any one node, and never into or through an entity
        the filter does not admit. Best first: confidence,
        then weight.
        """
        ...
