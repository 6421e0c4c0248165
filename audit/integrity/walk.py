"""Walking a chain in order: each link, hash, seal, derived column and index row checked, and the
rollup held against the counts of a whole walk.

See docs/audit-chain.md.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from api.audit import BrokenLink
from audit.chain import (
    GENESIS,
    audit_anchor,
    audit_facet,
    audit_item,
    audit_rollup,
    audit_trace,
    chain_of,
    derived,
    row_hash,
    row_hash_v1,
    sealed,
)
from audit.integrity.merkle import Range, leaf_hash
from core.audit_facts import HOUR_S, facts_of


@dataclass(frozen=True, slots=True)
class Break:
    chain: str
    seq: int | None
    trace_id: str | None
    reason: str

    def link(self) -> BrokenLink:
        """The break as a report names it (api.audit.BrokenLink)."""
        return BrokenLink(chain=self.chain, seq=self.seq, trace_id=self.trace_id, reason=self.reason)


@dataclass(slots=True)
class Walk:
    """One chain walked in order: where it starts and ends, the hashes at the positions asked for,
    and its first broken link. `unsealed` is the first row that should carry a seal and does not
    (only looked for with a seal key)."""

    chain: str
    first: int = 1
    start_hash: str = GENESIS  # the hash the first row links to (GENESIS, or the anchor's)
    rows: int = 0
    head: int = 0
    head_hash: str = GENESIS
    hashes: dict[int, str] = field(default_factory=dict)
    broken: Break | None = None
    unsealed: Break | None = None
    before_unsealed: tuple[int, str] = (0, GENESIS)  # the position and hash just before `unsealed`
    leaves: list[str] | None = None  # the row hashes walked, in order (when asked for: `collect`)
    roots: dict[int, str] = field(default_factory=dict)  # the Merkle root at the positions asked for (with `tree`)
    # The overview counts of the rows walked, (hour, measure, key) -> n: set on a walk of the whole
    # chain (no `after`), for verify to hold the rollup against.
    tally: Counter[tuple[int, str, str]] | None = None


def walk_chain(
    conn: Connection,
    chain: str,
    want: frozenset[int] = frozenset(),
    seal_key: bytes | None = None,
    sealed_after: int | None = None,
    after: tuple[int, str] | None = None,
    collect: bool = False,
    tree: Range | None = None,
) -> Walk:
    """Walk a chain in order, streamed (a server-side cursor on PostgreSQL), checking each link,
    hash, derived column and the item index rows of each call. A pruned chain starts at its anchor;
    `after` = (position, hash) walks only the rows past a known position. Rows past `sealed_after`
    must carry a valid seal (rows before the chain's first sealed row are exempt when it is None).
    `collect`: keep the row hashes (`Walk.leaves`). `tree`: the Merkle tree of the positions before
    the first walked (audit.integrity.merkle), extended row by row, its root kept at the `want` positions."""
    if after is not None:
        walk = Walk(chain, first=after[0] + 1, start_hash=after[1], head=after[0], head_hash=after[1])
    else:
        anchor = conn.execute(select(audit_anchor).where(audit_anchor.c.chain == chain)).first()
        first, start = (anchor.seq, anchor.prev_hash) if anchor else (1, GENESIS)
        walk = Walk(chain, first=first, start_hash=start, head=first - 1, head_hash=start)
    if collect:
        walk.leaves = []
    if after is None:
        walk.tally = Counter()
    if tree is not None and tree.size != walk.first - 1:
        tree = None  # not the tree of what comes before this walk: no roots
    statement = (
        select(audit_trace).where(audit_trace.c.chain == chain, audit_trace.c.seq >= walk.first).order_by(audit_trace.c.seq)
    )
    result = conn.execution_options(stream_results=True, yield_per=WALK_BATCH).execute(statement)
    legacy, seen_seal = after is None, False  # hash version 1 is accepted until the chain's first version 2 row
    try:
        for batch in result.partitions(WALK_BATCH):
            rows = [dict(r._mapping) for r in batch]
            index = _index_of(conn, [m["pk"] for m in rows])
            facets = _facets_of(conn, [m["pk"] for m in rows])
            for m in rows:
                walk.rows += 1
                problem, legacy = _check(m, walk, legacy, index.get(m["pk"], set()))
                if problem is None:
                    problem = _check_facts(m, facets.get(m["pk"], set()), walk.tally)
                if problem is not None:
                    walk.broken = Break(chain, m["seq"], m["trace_id"], problem)
                    return walk
                seen_seal = seen_seal or m["seal"] is not None
                if seal_key is not None and walk.unsealed is None and not sealed(seal_key, m["row_hash"], m["seal"]):
                    must = seen_seal if sealed_after is None else m["seq"] > sealed_after
                    if must:
                        walk.unsealed = Break(chain, m["seq"], m["trace_id"], UNSEALED)
                        walk.before_unsealed = (walk.head, walk.head_hash)
                walk.head, walk.head_hash = m["seq"], m["row_hash"]
                if walk.leaves is not None:
                    walk.leaves.append(m["row_hash"])
                if tree is not None:
                    tree.append(leaf_hash(m["row_hash"]))
                if m["seq"] in want:
                    walk.hashes[m["seq"]] = m["row_hash"]
                    if tree is not None:
                        walk.roots[m["seq"]] = tree.root().hex()
    finally:
        result.close()
    return walk


def walk_links(conn: Connection, chain: str, after: tuple[int, str], seal_key: bytes, collect: bool = False) -> Walk:
    """The checkpointer's walk past its last signed position: positions, links and seals only, from
    a narrow query. A row's content is bound to its hash by verify, at any time; what a checkpoint
    needs is that the gateway made each hash (its seal) and that they link. Stops at the first row
    that is out of place, does not link, or is not sealed."""
    walk = Walk(chain, first=after[0] + 1, start_hash=after[1], head=after[0], head_hash=after[1], leaves=[] if collect else None)
    statement = (
        select(audit_trace.c.seq, audit_trace.c.trace_id, audit_trace.c.prev_hash, audit_trace.c.row_hash, audit_trace.c.seal)
        .where(audit_trace.c.chain == chain, audit_trace.c.seq > after[0])
        .order_by(audit_trace.c.seq)
    )
    for row in conn.execute(statement):
        expected = walk.head + 1
        if row.seq != expected or row.prev_hash != walk.head_hash:
            reason = (
                "does not link to the row before it"
                if row.seq == expected
                else f"expected position {expected}: a row is missing or out of order"
            )
            walk.broken = Break(chain, row.seq, row.trace_id, reason)
            return walk
        if not sealed(seal_key, row.row_hash, row.seal):
            walk.unsealed = Break(chain, row.seq, row.trace_id, UNSEALED)
            walk.before_unsealed = (walk.head, walk.head_hash)
            return walk
        walk.rows += 1
        walk.head, walk.head_hash = row.seq, row.row_hash
        if walk.leaves is not None:
            walk.leaves.append(row.row_hash)
    return walk


WALK_BATCH = 1000
UNSEALED = "carries no valid seal: the gateway did not write this row (forged, or written without the signing key)"


def _index_of(conn: Connection, pks: list[int]) -> dict[int, set[str]]:
    """The item index rows of these calls, in one query per batch."""
    index: dict[int, set[str]] = {}
    if pks:
        for pk, item in conn.execute(select(audit_item.c.trace_pk, audit_item.c.item_id).where(audit_item.c.trace_pk.in_(pks))):
            index.setdefault(pk, set()).add(item)
    return index


def _facets_of(conn: Connection, pks: list[int]) -> dict[int, set[tuple[str, str]]]:
    """The facet index rows of these calls, in one query per batch."""
    found: dict[int, set[tuple[str, str]]] = {}
    if pks:
        statement = select(audit_facet.c.trace_pk, audit_facet.c.facet, audit_facet.c.value).where(
            audit_facet.c.trace_pk.in_(pks)
        )
        for pk, facet, value in conn.execute(statement):
            found.setdefault(pk, set()).add((facet, value))
    return found


def _check_facts(m: dict[str, Any], indexed: set[tuple[str, str]], tally: Counter[tuple[int, str, str]] | None) -> str | None:
    """The row's facet index rows against its lineage; its overview counts go into `tally`."""
    facts = facts_of(m)
    if indexed != facts.facets:
        extra, missing = sorted(indexed - facts.facets), sorted(facts.facets - indexed)
        what = f"lists {extra[0]!r}, which this call's lineage does not hold" if extra else f"lacks {missing[0]!r}"
        return f"the facet index {what} (index edited)"
    if tally is not None:
        for measure, key, n in facts.tallies:
            tally[facts.hour, measure, key] += n
    return None


def rollup_break(conn: Connection, walk: Walk) -> Break | None:
    """The chain's stored rollup against the counts of a whole walk: the first count that differs."""
    if walk.tally is None or walk.broken is not None:
        return None
    stored: Counter[tuple[int, str, str]] = Counter()
    statement = select(audit_rollup.c.hour, audit_rollup.c.measure, audit_rollup.c.key, audit_rollup.c.n).where(
        audit_rollup.c.chain == walk.chain
    )
    for hour, measure, key, n in conn.execute(statement):
        if n:
            stored[hour, measure, key] += n
    if stored == walk.tally:
        return None
    hour, measure, key = min(set(stored) ^ set(walk.tally) or {k for k in stored if stored[k] != walk.tally[k]})
    at = datetime.fromtimestamp(hour * HOUR_S, timezone.utc).isoformat()
    return Break(
        walk.chain,
        None,
        None,
        f"the overview rollup for the hour of {at} counts {stored[hour, measure, key]} for {measure} {key!r}, "
        f"the rows {walk.tally[hour, measure, key]} (rollup edited)",
    )


def _check(m: dict[str, Any], walk: Walk, legacy: bool, indexed: set[str]) -> tuple[str | None, bool]:
    """The first thing wrong with one row, given the walk so far, and whether version 1 hashes are
    still accepted after it."""
    expected = walk.head + 1
    if m["seq"] != expected:
        return f"expected position {expected}: " + (
            "a row is missing before this one" if m["seq"] > expected else "rows are out of order"
        ), legacy
    if m["prev_hash"] != walk.head_hash:
        return "does not link to the row before it", legacy
    version_1 = False
    if m["row_hash"] != row_hash(m):
        version_1 = legacy and m["row_hash"] == row_hash_v1(m)
        if not version_1:
            return "content does not match its hash (edited)", legacy
    else:
        legacy = False
    facts = derived(m["lineage"])
    columns = (m["task_type"], m["about"])
    # A version 1 row may predate the review columns (both empty); any value they hold must be right.
    if columns != (facts.task_type, facts.about) and not (version_1 and columns == (None, None)):
        return "task_type or about does not match the row's lineage (edited)", legacy
    if indexed != set(facts.packed):
        extra, missing = sorted(indexed - set(facts.packed)), sorted(set(facts.packed) - indexed)
        what = (
            f"lists {extra[0]!r}, which this call never returned" if extra else f"lacks {missing[0]!r}, which this call returned"
        )
        return f"the item index {what} (index edited)", legacy
    return None, legacy


def moved_out_of_chains(conn: Connection, tenant: str | None) -> Break | None:
    """A row that was chained (it has a hash) but no longer names its chain: its `chain` was emptied."""
    statement = select(audit_trace.c.tenant, audit_trace.c.seq, audit_trace.c.trace_id).where(
        audit_trace.c.chain.is_(None), audit_trace.c.row_hash.is_not(None)
    )
    if tenant is not None:
        statement = statement.where(audit_trace.c.tenant == tenant)
    row = conn.execute(statement.limit(1)).first()
    if row is None:
        return None
    return Break(chain_of(row.tenant), row.seq, row.trace_id, "a chained row no longer names its chain (chain emptied)")


def unchained_rows(conn: Connection) -> int:
    """Rows from before chaining (no chain, no hash)."""
    return int(
        conn.execute(
            select(func.count()).select_from(audit_trace).where(audit_trace.c.chain.is_(None), audit_trace.c.row_hash.is_(None))
        ).scalar_one()
    )
