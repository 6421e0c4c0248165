"""Rank current state: tiers of comparable relevance, then authority, validity, scope and recency.

See docs/ranking.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

from core.records import Fused, Record

TIER_RATIO = 0.85
AUTHORITY = {"approved": 0, "reviewed": 1, "unreviewed": 2, "speculative": 3}
STANDING = {"active": 0, "disputed": 1, "superseded": 2}
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

Label = Literal["current", "superseded", "historical", "disputed"]


@dataclass(frozen=True, slots=True)
class Ranked:
    entry: Fused
    label: Label
    current: bool  # the item holds the current value (of its slot, or on its own)
    tier: int

    @property
    def record(self) -> Record:
        return self.entry.record


@dataclass(frozen=True, slots=True)
class Ranking:
    shown: tuple[Ranked, ...]
    hidden: tuple[Ranked, ...]  # history the caller did not ask for


def rank(fused: list[Fused], *, at: datetime, scopes: tuple[str, ...], include_history: bool) -> Ranking:
    tiers = _tiers(fused)

    def standing(record: Record) -> tuple[int, int, int, float]:
        return (_authority(record), _validity(record, at), _scope(record, scopes), -_recency(record))

    order = sorted(range(len(fused)), key=lambda i: (tiers[i], *standing(fused[i].record), i))
    slots: dict[str, list[int]] = {}
    for i in order:
        slot = fused[i].record.slot
        if slot:
            slots.setdefault(slot, []).append(i)
    winners: dict[str, int | None] = {}
    for slot, members in slots.items():
        contenders = [i for i in members if _can_be_current(fused[i].record, at)]
        winners[slot] = min(contenders, key=lambda i: (standing(fused[i].record), i)) if contenders else None

    shown: list[Ranked] = []
    hidden: list[Ranked] = []
    placed: set[int] = set()
    for i in order:
        if i in placed:
            continue
        slot = fused[i].record.slot
        group = [i] if not slot else _slot_group(slots[slot], winners[slot], fused, standing)
        for j in group:
            placed.add(j)
            ranked = _label(fused[j], tiers[j], winners.get(slot) if slot else j, fused, at)
            (shown if ranked.current or include_history else hidden).append(ranked)
    return Ranking(tuple(shown), tuple(hidden))


def _tiers(fused: list[Fused]) -> list[int]:
    """Tier of each entry: walking down by evidence strength, a new tier starts where the strength
    falls below TIER_RATIO of the strongest entry of the current tier."""
    tiers = [0] * len(fused)
    tier, head = 0, None
    for i in sorted(range(len(fused)), key=lambda i: (-fused[i].strength, i)):
        strength = fused[i].strength
        if head is None:
            head = strength
        elif strength < head * TIER_RATIO:
            tier, head = tier + 1, strength
        tiers[i] = tier
    return tiers


def _slot_group(members: list[int], winner: int | None, fused: list[Fused], standing: object) -> list[int]:
    """The winner first, then the rest of the slot, current-state order."""
    rest = sorted((i for i in members if i != winner), key=lambda i: (standing(fused[i].record), i))  # type: ignore[operator]
    return ([winner] if winner is not None else []) + rest


def _label(entry: Fused, tier: int, winner: int | None, fused: list[Fused], at: datetime) -> Ranked:
    record = entry.record
    if winner is not None and fused[winner] is entry:
        return Ranked(entry, "disputed" if record.status == "disputed" else "current", True, tier)
    if _ended(record, at):
        return Ranked(entry, "historical", False, tier)
    if record.status == "disputed":
        return Ranked(entry, "disputed", False, tier)
    if record.status == "superseded" or winner is None:
        return Ranked(entry, "superseded", False, tier)
    # An active version that lost its slot: older than the winner, it was replaced; newer, it
    # contests the winner without the authority to replace it.
    newer = _recency(record) > _recency(fused[winner].record)
    return Ranked(entry, "disputed" if newer else "superseded", False, tier)


def _can_be_current(record: Record, at: datetime) -> bool:
    return record.status in ("active", "disputed") and not _ended(record, at)


def _ended(record: Record, at: datetime) -> bool:
    return record.valid_to is not None and record.valid_to <= at


def _authority(record: Record) -> int:
    return AUTHORITY.get(record.authority, len(AUTHORITY))


def _validity(record: Record, at: datetime) -> int:
    return len(STANDING) if _ended(record, at) else STANDING.get(record.status, len(STANDING))


def _scope(record: Record, scopes: tuple[str, ...]) -> int:
    if not record.scope:
        return 1
    return 0 if any(s in scopes for s in record.scope) else 2


def _recency(record: Record) -> float:
    instant = record.recorded_at or record.valid_from or EPOCH
    return instant.timestamp()
