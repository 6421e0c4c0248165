"""Pack one budget in UTF-8 bytes; an item is never cut mid-way."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.fuse import Fused


@dataclass(frozen=True, slots=True)
class Packed:
    items: tuple[Fused, ...]
    limit_bytes: int
    used_bytes: int
    per_source: dict[str, dict[str, int]] = field(default_factory=dict)
    dropped_ids: tuple[str, ...] = ()


def pack(ranked: list[Fused], limit_bytes: int) -> Packed:
    kept: list[Fused] = []
    used = 0
    per_source: dict[str, dict[str, int]] = {}
    dropped: list[str] = []
    for entry in ranked:
        size = len(entry.record.text.encode("utf-8"))
        stats = per_source.setdefault(entry.record.kind, {"used_bytes": 0, "dropped": 0})
        if used + size > limit_bytes:
            stats["dropped"] += 1
            dropped.append(entry.record.id)
            continue
        used += size
        stats["used_bytes"] += size
        kept.append(entry)
    return Packed(tuple(kept), limit_bytes, used, per_source, tuple(dropped))
