"""Appending to the hash chains, safely by many writers, with the facet index and the hourly rollup
kept in step in the append's own transaction.

See docs/audit-chain.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from sqlalchemy import String, bindparam, delete, func, insert, select
from sqlalchemy.engine import Connection

from audit.chain.rows import (
    CALLED,
    GENESIS,
    StoredTrace,
    audit_facet,
    audit_item,
    audit_rollup,
    audit_trace,
    chain_of,
    derived,
    row_hash,
    seal,
)
from audit.record import Trace
from core.audit_facts import facts_of


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
INSERT_ITEMS = insert(audit_item)
INSERT_FACETS = insert(audit_facet)
CHAIN_LOCK_CLASS = 0x61756474  # "audt": the first key of every chain's append lock
CHAIN_LOCK = select(
    func.pg_advisory_xact_lock(
        CHAIN_LOCK_CLASS, func.hashtext(func.concat(func.current_schema(), "/", bindparam("chain", type_=String)))
    )
)


Rollup = Counter[tuple[str, int, str, str]]  # (chain, hour, measure, key) -> n, to add to audit_rollup


@cache
def _rollup_upsert(dialect: str) -> Any:
    """The rollup's upsert for one dialect, built once (every append runs it)."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as upsert
    else:
        from sqlalchemy.dialects.sqlite import insert as upsert  # type: ignore[assignment]
    statement = upsert(audit_rollup)
    return statement.on_conflict_do_update(
        index_elements=["chain", "hour", "measure", "key"], set_={"n": audit_rollup.c.n + statement.excluded.n}
    )


def add_to_rollup(conn: Connection, counts: Rollup) -> None:
    """Add the counts to the hourly rollup (an upsert per key, in the caller's transaction)."""
    if not counts:
        return
    statement = _rollup_upsert(conn.dialect.name)
    rows = [{"chain": c, "hour": h, "measure": m, "key": k, "n": n} for (c, h, m, k), n in sorted(counts.items())]
    conn.execute(statement, rows)


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


def append(
    conn: Connection, call: Trace | Mapping[str, Any], seal_key: bytes | None = None, rollup: Rollup | None = None
) -> Appended:
    """Insert the row of one call (its trace, or its columns as a mapping) at the head of its chain
    (inside the caller's write transaction), as a StoredTrace; with a seal key the row carries its seal.

    On PostgreSQL a transaction-scoped advisory lock per chain makes appenders of one chain take
    turns, across processes and replicas, instead of racing for the head and retrying; on SQLite the
    write transaction (BEGIN IMMEDIATE) already does. The unique (chain, seq) index stays the guard.
    The lock takes the two-key form, whose key space no single-key advisory lock can reach (the
    background lease holds one of those for its whole session: a tenant named like its key must not
    wait on it forever), and names the schema, so stores sharing a database do not wait on each other."""
    called = call if isinstance(call, Trace) else Trace(**{name: call[name] for name in CALLED})
    chain = chain_of(called.tenant)
    if conn.dialect.name == "postgresql":
        conn.execute(CHAIN_LOCK, {"chain": chain})
    head = conn.execute(CHAIN_HEAD, {"chain": chain}).first()
    facts = derived(called.lineage)
    seq = int(head.seq) + 1 if head else 1
    placed = StoredTrace(
        **{name: getattr(called, name) for name in CALLED},
        chain=chain,
        seq=seq,
        prev_hash=head.row_hash if head else GENESIS,
        task_type=facts.task_type,
        about=facts.about,
    )
    digest = row_hash(placed)
    row = replace(placed, row_hash=digest, seal=seal(seal_key, digest) if seal_key else None)
    columns = row.as_dict()
    pk = conn.execute(INSERT_ROW, columns).scalar_one()
    if facts.packed:
        conn.execute(INSERT_ITEMS, [{"trace_pk": pk, "item_id": i} for i in facts.packed])
    counted = facts_of(columns)
    if counted.facets:
        conn.execute(INSERT_FACETS, [{"trace_pk": pk, "facet": f, "value": v} for f, v in sorted(counted.facets)])
    counts = rollup if rollup is not None else Counter()
    for measure, key, n in counted.tallies:
        counts[chain, counted.hour, measure, key] += n
    if rollup is None:
        add_to_rollup(conn, counts)
    return Appended(chain, seq, digest)
