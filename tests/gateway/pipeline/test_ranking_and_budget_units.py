"""The ranking and packing rules as pure functions, on hand-built entries (no store, no HTTP)."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from typing import Any

from core.records import Fused, Record
from gateway.pipeline.budget import pack
from gateway.pipeline.ranking import rank
from gateway.settings import BUDGET_SOURCES, parse_split

NOW = datetime(2026, 11, 30, tzinfo=timezone.utc)


def entry(item_id: str, *, strength: float = 1.0, kind: str = "memory", text: str = "x", **fields: Any) -> Fused:
    record = Record(
        id=item_id,
        kind=kind,
        tenant="t",
        text=text,
        acl=("*",),
        sensitivity="internal",
        scope=fields.pop("scope", ()),
        authority=fields.pop("authority", "unreviewed"),
        status=fields.pop("status", "active"),
        **fields,
    )
    return Fused(record, strength, ("lexical",), strength=strength)


def ids(entries: Any) -> list[str]:
    return [e.record.id for e in entries]


def test_inside_a_tier_authority_wins_across_tiers_strength_wins() -> None:
    fused = [
        entry("strong_speculative", strength=1.0, authority="speculative"),
        entry("close_approved", strength=0.9, authority="approved"),
        entry("weak_approved", strength=0.5, authority="approved"),
    ]
    assert ids(rank(fused, at=NOW, scopes=(), include_history=False).shown) == [
        "close_approved",
        "strong_speculative",
        "weak_approved",
    ]


def test_recency_breaks_ties_only_after_authority_validity_and_scope() -> None:
    old, new = datetime(2025, 1, 1, tzinfo=timezone.utc), datetime(2026, 1, 1, tzinfo=timezone.utc)
    fused = [
        entry("new_unscoped", recorded_at=new),
        entry("old_scoped", recorded_at=old, scope=("sales",)),
        entry("new_disputed", recorded_at=new, status="disputed", scope=("sales",)),
        entry("new_scoped", recorded_at=new, scope=("sales",)),
    ]
    assert ids(rank(fused, at=NOW, scopes=("sales",), include_history=False).shown) == [
        "new_scoped",
        "old_scoped",
        "new_unscoped",
        "new_disputed",
    ]


def test_each_slot_has_at_most_one_current_item_whatever_the_order() -> None:
    rng = random.Random(7)
    authorities = ("approved", "reviewed", "unreviewed", "speculative")
    for _ in range(200):
        fused = [
            entry(
                f"i{i}",
                strength=rng.random(),
                authority=rng.choice(authorities),
                slot=rng.choice(("s1", "s2", None)),
                status=rng.choice(("active", "active", "superseded", "disputed")),
                recorded_at=datetime(2020 + rng.randint(0, 6), 1, 1, tzinfo=timezone.utc),
            )
            for i in range(rng.randint(1, 12))
        ]
        ranking = rank(fused, at=NOW, scopes=(), include_history=True)
        assert sorted(ids(ranking.shown)) == sorted(ids(fused))  # nothing lost, nothing twice
        for slot in ("s1", "s2"):
            members = [r for r in ranking.shown if r.record.slot == slot]
            winners = [r for r in members if r.current]
            assert len(winners) <= 1
            if winners:
                assert members[0] is winners[0]  # the winner leads its slot
                assert winners[0].record.status != "superseded"
        hidden = rank(fused, at=NOW, scopes=(), include_history=False)
        assert all(r.current for r in hidden.shown) and not any(r.current for r in hidden.hidden)


def test_pack_never_exceeds_the_budget_or_cuts_an_item_and_accounts_for_every_item() -> None:
    rng = random.Random(11)
    shares = parse_split("memory=35,document=30,external=20,property=10,graph=5")
    kinds = ("memory", "document", "property", "edge")
    for _ in range(300):
        fused = [entry(f"i{i}", kind=rng.choice(kinds), text="y" * rng.randint(1, 900)) for i in range(rng.randint(0, 30))]
        ranked = rank(fused, at=NOW, scopes=(), include_history=True).shown
        limit = rng.randint(1, 6000)
        packed = pack(ranked, limit, shares)
        assert packed.used_bytes == sum(len(r.record.text) for r in packed.items) <= limit
        assert len(packed.items) + len(packed.leftover) == len(ranked)
        assert sum(s["dropped"] for s in packed.per_source.values()) == len(packed.leftover)
        present = {("graph" if r.record.kind == "edge" else r.record.kind) for r in ranked}
        assert all(packed.per_source[s]["share_bytes"] == 0 for s in BUDGET_SOURCES if s not in present)
        assert sum(s["share_bytes"] for s in packed.per_source.values()) <= limit
        # Nothing left over would still have fitted in what remains.
        assert all(len(r.record.text) > limit - packed.used_bytes for r in packed.leftover)
