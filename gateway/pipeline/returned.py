"""What a call returned, for the trail's compliance figures: its items counted by sensitivity, how
many carried a placeholder, the types the policy revealed, and the entities the items it read name.
Counted from envelopes and placeholders, never from text (audit.facts reads these)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable

from api.retrieve import RetrieveResponse
from audit.record import Returned, ReturnedRecord, TraceBuilder
from core.records import Record
from gateway.pipeline.budget import Packed
from gateway.privacy.mask import Masking


def named_entities(records: Iterable[Record]) -> dict[str, list[str]]:
    """Entity id -> the ids of the items that name it (an entity item names itself)."""
    named: dict[str, list[str]] = {}
    for record in records:
        ends = (record.id,) if record.kind == "entity" else ()
        for entity in dict.fromkeys((*ends, *record.linked_entities())):
            if record.id not in named.setdefault(entity, []):
                named[entity].append(record.id)
    return named


def note_returned(
    trace: TraceBuilder,
    read: Iterable[Record],
    packed: Packed,
    masking: Masking | None,
    body: RetrieveResponse,
) -> None:
    """Record on the trace what the body returns and the entities of what the call read."""
    masked, revealed = 0, set()
    if masking is not None:
        for item in body.items:
            wire = json.dumps(item.wire(), ensure_ascii=False)
            masked += masking.masker.carries_placeholder(wire)
            revealed |= masking.masker.revealed_in(wire)
    sensitivity = dict(Counter(r.record.sensitivity for r in packed.items))
    named = named_entities([*read, *(r.record for r in packed.items)])
    returned = ReturnedRecord(sensitivity=sensitivity, masked_items=masked, revealed=sorted(revealed))
    trace.record(Returned(returned=returned, named_entities=named))
