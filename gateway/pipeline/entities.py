"""Resolve entities: normalise identifiers, look them up inside the constraints, follow merges to
the survivor, turn entities pending deletion into bare tombstones, and add aliases.

Every lookup runs inside the policy's constraints; what they hide simply does not resolve, so a
response never says whether a forbidden entity exists.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from audit.record import EntitiesRecord
from connectors.base import ExactConnector
from core import identifiers
from core.constraints import ItemFilter
from core.errors import ConnectorError
from core.records import Identifier, Record
from core.request import EntityRef

MAX_MERGE_HOPS = 10
MAX_ALIASES = 20
TOMBSTONE = "pending_deletion"


def identifier_for(ref: EntityRef) -> Identifier:
    if ref.id is not None:
        return Identifier("id", ref.id.strip())
    if ref.email is not None:
        return Identifier("email", identifiers.email(ref.email))
    if ref.phone is not None:
        return Identifier("phone", identifiers.phone(ref.phone))
    return identifiers.website(ref.website or "")


@dataclass(frozen=True, slots=True)
class ResolvedEntity:
    record: Record  # the survivor (or the tombstone)
    resolved_from: Identifier
    merged_from: tuple[str, ...] = ()  # ids followed, or found merged, into the survivor
    aliases: tuple[str, ...] = ()

    @property
    def tombstone(self) -> bool:
        return self.record.status == TOMBSTONE


@dataclass(frozen=True, slots=True)
class Resolution:
    entities: tuple[ResolvedEntity, ...] = ()
    alias_error: str | None = None  # the alias lookup failed; the call went on without aliases

    @property
    def live(self) -> tuple[ResolvedEntity, ...]:
        return tuple(e for e in self.entities if not e.tombstone)

    @property
    def subjects(self) -> tuple[str, ...]:
        """The entities the request is about: live survivors and what was merged into them."""
        ids: dict[str, None] = {}
        for entity in self.live:
            ids[entity.record.id] = None
            ids.update(dict.fromkeys(entity.merged_from))
        return tuple(ids)

    def records(self) -> list[Record]:
        return [e.record for e in self.entities]

    def report(self) -> EntitiesRecord:
        """The trail's counts: live entities, tombstones, aliases, and the alias lookup's error."""
        return EntitiesRecord(
            resolved=len(self.live),
            tombstones=len(self.entities) - len(self.live),
            aliases=sum(len(e.aliases) for e in self.live),
            alias_error=self.alias_error,
        )

    def keep(self, allowed: frozenset[str]) -> "Resolution":
        """Only what the policy confirmed; aliases and merged ids it denied vanish with the rest."""
        kept = tuple(
            replace(
                e,
                merged_from=tuple(i for i in e.merged_from if i in allowed),
                aliases=tuple(i for i in e.aliases if i in allowed),
            )
            for e in self.entities
            if e.record.id in allowed
        )
        return Resolution(kept, self.alias_error)


async def resolve(connector: ExactConnector, where: ItemFilter, refs: list[EntityRef]) -> tuple[Resolution, list[Record]]:
    """The resolution, and every entity record it read (for the policy to verify in one batch)."""
    lookup = replace(where, statuses=where.entity_statuses or where.statuses)
    wanted = tuple(i for i in (identifier_for(ref) for ref in refs) if i.value)
    found = await connector.lookup(lookup, wanted)
    by_id = {r.id: r for r in found}
    read: dict[str, Record] = dict(by_id)
    entities: dict[str, ResolvedEntity] = {}
    for identifier in wanted:
        for record in sorted((r for r in found if _matches(r, identifier)), key=lambda r: r.id):
            survivor, chain = await _follow_merges(connector, lookup, record, read)
            if survivor is not None and survivor.id not in entities:
                entities[survivor.id] = ResolvedEntity(survivor, identifier, merged_from=chain)
    resolution = Resolution(tuple(entities.values()))
    if not resolution.live:
        return resolution, list(read.values())
    try:
        resolution = await _expand(connector, where, resolution, read)
    except ConnectorError as exc:  # the call goes on without aliases, and says so
        resolution = Resolution(resolution.entities, alias_error=exc.message)
    return resolution, list(read.values())


async def _follow_merges(
    connector: ExactConnector, where: ItemFilter, record: Record, read: dict[str, Record]
) -> tuple[Record | None, tuple[str, ...]]:
    """Follow merged_into to the survivor. A target the constraints hide ends in nothing; a cycle
    ends at its smallest id, so every member of a cycle resolves to the same record."""
    chain: list[Record] = [record]
    current = record
    for _ in range(MAX_MERGE_HOPS):
        target = current.merged_into
        if target is None:
            break
        if target in {r.id for r in chain}:
            cycle = chain[[r.id for r in chain].index(target) :]
            current = min(cycle, key=lambda r: r.id)
            break
        if target not in read:
            for found in await connector.lookup(where, (Identifier("id", target),)):
                read[found.id] = found
        if target not in read:
            return None, ()
        current = read[target]
        chain.append(current)
    else:
        return None, ()  # longer than any honest merge history: refuse to guess
    return current, tuple(r.id for r in chain if r.id != current.id)


async def _expand(connector: ExactConnector, where: ItemFilter, resolution: Resolution, read: dict[str, Record]) -> Resolution:
    """Records merged into a survivor join its subjects; live entities sharing its company domain
    join as aliases, at most 20 in all."""
    survivors = tuple(e.record.id for e in resolution.live)
    root = {survivor: survivor for survivor in survivors}  # merged id -> the survivor it folds into
    frontier = survivors
    for _ in range(MAX_MERGE_HOPS):
        merged = [r for r in await connector.merged_into(where, frontier) if r.id not in root]
        if not merged:
            break
        for record in merged:
            read[record.id] = record
            root[record.id] = root[record.merged_into or ""]
        frontier = tuple(r.id for r in merged)
    domains = tuple(dict.fromkeys(d for e in resolution.live if (d := _company_domain(e.record))))
    taken = tuple(root) + tuple(i for e in resolution.live for i in e.merged_from)
    sharing = await connector.sharing_domain(where, domains, taken, MAX_ALIASES) if domains else ()
    read.update({r.id: r for r in sharing})
    entities = []
    for entity in resolution.entities:
        if entity.tombstone:
            entities.append(entity)
            continue
        folded = tuple(i for i, r in root.items() if r == entity.record.id and i != r and i not in entity.merged_from)
        domain = _company_domain(entity.record)
        aliases = tuple(r.id for r in sharing if domain and r.domain == domain)[:MAX_ALIASES]
        entities.append(replace(entity, merged_from=entity.merged_from + folded, aliases=aliases))
    return Resolution(tuple(entities))


def _company_domain(record: Record) -> str | None:
    if record.domain:
        return record.domain
    return identifiers.domain_of_email(record.email) if record.email else None


def _matches(record: Record, identifier: Identifier) -> bool:
    if identifier.kind == "id":
        return record.id == identifier.value
    return bool(getattr(record, identifier.kind) == identifier.value)
