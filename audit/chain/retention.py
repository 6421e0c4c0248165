"""Pruning a chain: rows before a time removed, the chain kept verifiable from its new anchor."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import delete, func, insert, select
from sqlalchemy.engine import Connection, Engine

from audit.chain.rows import audit_anchor, audit_facet, audit_item, audit_rollup, audit_trace, chains_in
from audit.chain.writes import add_to_rollup
from core.audit_facts import HOUR_S, hour_of, tally_rows
from core.store import writer


def rebuild_rollup(conn: Connection, chain: str, first_hour: int, last_hour: int) -> None:
    """The chain's rollup for these hours again, from the rows it holds now (after a prune)."""
    conn.execute(
        delete(audit_rollup).where(
            audit_rollup.c.chain == chain, audit_rollup.c.hour >= first_hour, audit_rollup.c.hour <= last_hour
        )
    )
    start = datetime.fromtimestamp(first_hour * HOUR_S, timezone.utc)
    end = datetime.fromtimestamp((last_hour + 1) * HOUR_S, timezone.utc)
    rows = conn.execute(
        select(audit_trace).where(audit_trace.c.chain == chain, audit_trace.c.created_at >= start, audit_trace.c.created_at < end)
    )
    add_to_rollup(conn, Counter({(chain, *key): n for key, n in tally_rows(r._mapping for r in rows).items()}))


@dataclass(frozen=True, slots=True)
class Pruned:
    """What prune removed from one chain, and where the chain now starts: its oldest kept position
    and the hash that row links to (the head of what was removed)."""

    removed: int
    oldest: int
    prev_hash: str


def prune(
    engine: Engine,
    before: datetime,
    chains: list[str] | None = None,
    before_cut: Callable[[Connection, str, int], None] | None = None,
) -> dict[str, Pruned]:
    """Remove rows recorded before `before`, chain by chain (every chain, or those named), keeping
    each chain verifiable: the oldest kept row becomes the chain's anchor (its position and the hash
    it links to). A chain is only cut below a row that stays, so its newest row is never removed.
    `before_cut(conn, chain, oldest kept position)` runs just before a chain's rows go (the
    checkpointer keeps the Merkle range of what is removed)."""
    removed: dict[str, Pruned] = {}
    with writer(engine).begin() as conn:
        for chain in chains_in(conn) if chains is None else chains:
            keep = conn.execute(
                select(audit_trace.c.seq, audit_trace.c.prev_hash)
                .where(audit_trace.c.chain == chain, audit_trace.c.created_at >= before)
                .order_by(audit_trace.c.seq)
                .limit(1)
            ).first()
            if keep is None:  # everything is old: keep the newest row as the anchor of what comes next
                keep = conn.execute(
                    select(audit_trace.c.seq, audit_trace.c.prev_hash)
                    .where(audit_trace.c.chain == chain)
                    .order_by(audit_trace.c.seq.desc())
                    .limit(1)
                ).first()
            if keep is None:
                continue
            if (
                before_cut is not None
                and conn.execute(
                    select(func.count())
                    .select_from(audit_trace)
                    .where(audit_trace.c.chain == chain, audit_trace.c.seq < keep.seq)
                ).scalar_one()
            ):
                before_cut(conn, chain, keep.seq)
            doomed = select(audit_trace.c.pk).where(audit_trace.c.chain == chain, audit_trace.c.seq < keep.seq)
            span = conn.execute(
                select(func.min(audit_trace.c.created_at), func.max(audit_trace.c.created_at)).where(
                    audit_trace.c.chain == chain, audit_trace.c.seq < keep.seq
                )
            ).first()
            conn.execute(delete(audit_item).where(audit_item.c.trace_pk.in_(doomed)))
            conn.execute(delete(audit_facet).where(audit_facet.c.trace_pk.in_(doomed)))
            count = conn.execute(delete(audit_trace).where(audit_trace.c.chain == chain, audit_trace.c.seq < keep.seq)).rowcount
            if count:
                if span is not None and span[0] is not None:
                    rebuild_rollup(conn, chain, hour_of(span[0]), hour_of(span[1]))
                conn.execute(delete(audit_anchor).where(audit_anchor.c.chain == chain))
                conn.execute(
                    insert(audit_anchor).values(
                        chain=chain, seq=keep.seq, prev_hash=keep.prev_hash, pruned_at=datetime.now(timezone.utc)
                    )
                )
                removed[chain] = Pruned(int(count), keep.seq, keep.prev_hash)
    return removed
