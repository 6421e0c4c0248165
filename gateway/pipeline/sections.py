"""Documents come back as the sections that answer: a hit is read whole, once per section."""

from __future__ import annotations

from dataclasses import replace

from core.records import Fused, Record
from gateway.writes.documents import join_section


def section_keys(records: list[Record]) -> tuple[tuple[str, str], ...]:
    keys = {(r.document, r.section) for r in records if r.kind == "document" and r.document and r.section}
    return tuple(sorted(keys))


def read_whole(fused: list[Fused], pieces: tuple[Record, ...], allowed_ids: frozenset[str]) -> tuple[list[Fused], list[str]]:
    """Each document hit becomes its whole section (only the pieces the policy allowed, in order);
    a second hit in a section already returned is dropped. Returns the list and the merged ids."""
    by_key: dict[tuple[str | None, str | None], list[Record]] = {}
    for piece in pieces:
        if piece.id in allowed_ids:
            by_key.setdefault((piece.document, piece.section), []).append(piece)
    seen: set[tuple[str | None, str | None]] = set()
    whole: list[Fused] = []
    merged: list[str] = []
    for entry in fused:
        record = entry.record
        key = (record.document, record.section)
        if record.kind != "document" or key not in by_key:
            whole.append(entry)
            continue
        if key in seen:
            merged.append(record.id)
            continue
        seen.add(key)
        parts = sorted(by_key[key], key=lambda p: p.id)
        text = join_section([p.text for p in parts])
        # A one-piece section is usually its own hit, text and all: copying the record is then waste.
        whole_record = record if text == record.text else replace(record, text=text)
        whole.append(replace(entry, record=whole_record, pieces=tuple(p.id for p in parts)))
    return whole, merged
