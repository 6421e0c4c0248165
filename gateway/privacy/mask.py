"""Mask the relevant entries of one request with stored spans (analysing only what has none).

Runs before ranking and packing, so the budget counts the bytes that are actually returned. A
document section is masked piece by piece (spans are stored per piece) and joined again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import anyio.to_thread
from sqlalchemy.engine import Engine

from core.errors import MaskingUnavailable
from core.records import Fused, Record
from gateway.privacy.detect import Masker, Span
from gateway.privacy.store import Privacy, stored_spans
from gateway.writes.documents import join_section


@dataclass(slots=True)
class Masking:
    """One request's masking: its Masker, and every text's spans, by item id."""

    masker: Masker
    spans: dict[str, tuple[Span, ...]]
    originals: dict[str, str]
    analysed_now: int = 0
    report: dict[str, Any] = field(default_factory=dict)

    def text(self, entry: Fused, keep: frozenset[str]) -> str:
        """The entry's text with every type but `keep` replaced by placeholders."""
        if entry.pieces:
            return join_section([self.masker.mask(self.originals[p], self.spans.get(p, ()), keep) for p in entry.pieces])
        return self.masker.mask(self.originals[entry.record.id], self.spans.get(entry.record.id, ()), keep)

    def apply(self, entries: list[Fused], keep: frozenset[str]) -> list[Fused]:
        return [replace(e, record=replace(e.record, text=self.text(e, keep))) for e in entries]


async def prepare(store: Engine, privacy: Privacy, tenant: str, entries: list[Fused], pieces: tuple[Record, ...]) -> Masking:
    """Stored spans for every text the entries are made of; text without current spans is analysed
    now. Without a detector nothing can be masked, so the request fails closed."""
    detector = privacy.detector
    if detector is None:
        raise MaskingUnavailable(f"masking is required but {privacy.unavailable or 'no detector is loaded'}")
    piece_text = {p.id: p.text for p in pieces}
    originals: dict[str, str] = {}
    for entry in entries:
        if entry.pieces:
            originals.update({p: piece_text[p] for p in entry.pieces if p in piece_text})
        else:
            originals[entry.record.id] = entry.record.text
    spans = await anyio.to_thread.run_sync(stored_spans, store, tenant, originals, detector.version)
    missing = [i for i in originals if i not in spans]
    for item_id in missing:
        spans[item_id] = await anyio.to_thread.run_sync(detector.analyze, originals[item_id])
    return Masking(Masker(), spans, originals, analysed_now=len(missing))
