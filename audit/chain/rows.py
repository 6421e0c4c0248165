"""Tamper evidence: one hash chain of audit rows per tenant, appended safely by many writers, verified in order.

See docs/audit-chain.md.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import String, bindparam, delete, func, insert, select
from sqlalchemy.engine import Connection, Engine

from audit.integrity.keys import seal, sealed
from audit.integrity.merkle import Range, leaf_hash
from core.audit_facts import HOUR_S, facts_of, hour_of, tally_rows
from core.audit_tables import AuditAnchor, AuditFacet, AuditItem, AuditRollup, AuditTrace
from core.store import writer

audit_trace = AuditTrace.__table__  # type: ignore[attr-defined]
audit_item = AuditItem.__table__  # type: ignore[attr-defined]
audit_anchor = AuditAnchor.__table__  # type: ignore[attr-defined]
audit_facet = AuditFacet.__table__  # type: ignore[attr-defined]
audit_rollup = AuditRollup.__table__  # type: ignore[attr-defined]
GENESIS = "0" * 64
NO_TENANT = "-"
# Version 1 of the row hash left out the review columns derived from the lineage; rows written with
# it are still accepted at the start of a chain (before its first version 2 row), and their derived
# columns are checked against their lineage instead.
HASHED_V1 = (
    "trace_id",
    "created_at",
    "tenant",
    "actor",
    "endpoint",
    "status_code",
    "decision",
    "policy_engine",
    "policy_revision",
    "error_code",
    "lineage",
    "chain",
    "seq",
    "prev_hash",
)
HASHED = (*HASHED_V1, "task_type", "about")  # every column but the key, the hash itself and its seal
HASH_VERSION = 2


def chain_of(tenant: str | None) -> str:
    return tenant if tenant else NO_TENANT


def utc_instant(value: datetime) -> str:
    if value.tzinfo is None:  # SQLite hands back naive UTC
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec="microseconds")


def _digest(row: dict[str, Any], names: tuple[str, ...], version: int | None) -> str:
    content = {name: (utc_instant(row[name]) if name == "created_at" else row[name]) for name in names}
    if version is not None:
        content["hash_version"] = version
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def row_hash(row: dict[str, Any]) -> str:
    """SHA-256 of the row's canonical JSON: every column but `pk`, `row_hash` and `seal`, plus the
    hash version; sorted keys, no spaces, UTC instants."""
    return _digest(row, HASHED, HASH_VERSION)


def row_hash_v1(row: dict[str, Any]) -> str:
    return _digest(row, HASHED_V1, None)


@dataclass(frozen=True, slots=True)
class Derived:
    """What the review columns and the item index hold, as the row's (hashed) lineage says."""

    task_type: str | None
    about: str | None
    packed: tuple[str, ...]


def derived(lineage: Any) -> Derived:
    """Read from the stored lineage as it is (no model validation: verify reads every row)."""
    data = lineage if isinstance(lineage, dict) else {}
    request = data.get("request")
    task = request.get("task") if isinstance(request, dict) else None
    task_type = task.get("type") if isinstance(task, dict) else None
    about = data.get("about")
    packed = data.get("packed")
    return Derived(
        task_type=task_type if isinstance(task_type, str) else None,
        about=about if isinstance(about, str) else None,
        packed=tuple(dict.fromkeys(i for i in packed if isinstance(i, str))) if isinstance(packed, list) else (),
    )


@dataclass(frozen=True, slots=True)
class Appended:
    chain: str
    seq: int
    row_hash: str


# Built once: every call appends a row, and building the statements cost more than running them.
CHAIN_HEAD = (
    select(audit_trace.c.seq, audit_trace.c.row_hash)
    .where(audit_trace.c.chain == bindparam("chain"), audit_trace.c.seq.is_not(None))
    .order_by(audit_trace.c.seq.desc())
    .limit(1)
)
INSERT_ROW = insert(audit_trace).returning(audit_trace.c.pk)
CHAIN_LOCK_CLASS = 0x61756474  # "audt": the first key of every chain's append lock
CHAIN_LOCK = select(
    func.pg_advisory_xact_lock(
        CHAIN_LOCK_CLASS, func.hashtext(func.concat(func.current_schema(), "/", bindparam("chain", type_=String)))
    )
)


Rollup = Counter[tuple[str, int, str, str]]  # (chain, hour, measure, key) -> n, to add to audit_rollup


def add_to_rollup(conn: Connection, counts: Rollup) -> None:
    """Add the counts to the hourly rollup (an upsert per key, in the caller's transaction)."""
    if not counts:
        return
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as upsert
    else:
        from sqlalchemy.dialects.sqlite import insert as upsert  # type: ignore[assignment]
    statement = upsert(audit_rollup)
    statement = statement.on_conflict_do_update(
        index_elements=["chain", "hour", "measure", "key"], set_={"n": audit_rollup.c.n + statement.excluded.n}
    )
    rows = [{"chain": c, "hour": h, "measure": m, "key": k, "n": n} for (c, h, m, k), n in sorted(counts.items())]
    conn.execute(statement, rows)


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


def rederive(conn: Connection, chain: str) -> None:
    """The chain's facet index and rollup again from its rows as they are now: a repair after rows
    were rewritten on purpose (and what someone who rewrites rows must also do to pass verify)."""
    pks = select(audit_trace.c.pk).where(audit_trace.c.chain == chain)
    conn.execute(delete(audit_facet).where(audit_facet.c.trace_pk.in_(pks)))
    conn.execute(delete(audit_rollup).where(audit_rollup.c.chain == chain))
    counts: Rollup = Counter()
    for row in conn.execute(select(audit_trace).where(audit_trace.c.chain == chain)):
        m = row._mapping
        facts = facts_of(m)
        if facts.facets:
            conn.execute(insert(audit_facet), [{"trace_pk": m["pk"], "facet": f, "value": v} for f, v in sorted(facts.facets)])
        for measure, key, n in facts.tallies:
            counts[chain, facts.hour, measure, key] += n
    add_to_rollup(conn, counts)


def append(conn: Connection, values: dict[str, Any], seal_key: bytes | None = None, rollup: Rollup | None = None) -> Appended:
    """Insert one row at the head of its chain (inside the caller's write transaction); with a seal
    key the row carries its seal.

    On PostgreSQL a transaction-scoped advisory lock per chain makes appenders of one chain take
    turns, across processes and replicas, instead of racing for the head and retrying; on SQLite the
    write transaction (BEGIN IMMEDIATE) already does. The unique (chain, seq) index stays the guard.
    The lock takes the two-key form, whose key space no single-key advisory lock can reach (the
    background lease holds one of those for its whole session: a tenant named like its key must not
    wait on it forever), and names the schema, so stores sharing a database do not wait on each other."""
    chain = chain_of(values.get("tenant"))
    if conn.dialect.name == "postgresql":
        conn.execute(CHAIN_LOCK, {"chain": chain})
    head = conn.execute(CHAIN_HEAD, {"chain": chain}).first()
    facts = derived(values.get("lineage"))
    row = {
        **values,
        "chain": chain,
        "seq": (head.seq + 1) if head else 1,
        "prev_hash": head.row_hash if head else GENESIS,
        "task_type": facts.task_type,
        "about": facts.about,
    }
    digest = row_hash(row)
    pk = conn.execute(INSERT_ROW, {**row, "row_hash": digest, "seal": seal(seal_key, digest) if seal_key else None}).scalar_one()
    if facts.packed:
        conn.execute(insert(audit_item), [{"trace_pk": pk, "item_id": i} for i in facts.packed])
    counted = facts_of(row)
    if counted.facets:
        conn.execute(insert(audit_facet), [{"trace_pk": pk, "facet": f, "value": v} for f, v in sorted(counted.facets)])
    counts = rollup if rollup is not None else Counter()
    for measure, key, n in counted.tallies:
        counts[chain, counted.hour, measure, key] += n
    if rollup is None:
        add_to_rollup(conn, counts)
    return Appended(chain, row["seq"], digest)


@dataclass(frozen=True, slots=True)
class Break:
    chain: str
    seq: int | None
    trace_id: str | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"chain": self.chain, "seq": self.seq, "trace_id": self.trace_id, "reason": self.reason}


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


def row_hashes(conn: Connection, chain: str, first: int, last: int) -> list[str]:
    """The row hashes of positions first..last of a chain, in order (one narrow query)."""
    statement = (
        select(audit_trace.c.row_hash)
        .where(audit_trace.c.chain == chain, audit_trace.c.seq >= first, audit_trace.c.seq <= last)
        .order_by(audit_trace.c.seq)
    )
    return [h for (h,) in conn.execute(statement)]


def anchor_of(conn: Connection, chain: str) -> int:
    """A chain's oldest kept position (1 unless a prune removed what came before)."""
    found = conn.execute(select(audit_anchor.c.seq).where(audit_anchor.c.chain == chain)).scalar_one_or_none()
    return int(found) if found is not None else 1


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


def chains_in(conn: Connection) -> list[str]:
    return sorted(c for (c,) in conn.execute(select(audit_trace.c.chain).where(audit_trace.c.chain.is_not(None)).distinct()))


def unchained_rows(conn: Connection) -> int:
    """Rows from before chaining (no chain, no hash)."""
    return int(
        conn.execute(
            select(func.count()).select_from(audit_trace).where(audit_trace.c.chain.is_(None), audit_trace.c.row_hash.is_(None))
        ).scalar_one()
    )


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
