"""Tamper evidence: one hash chain of audit rows per tenant, appended safely by many writers, verified in order.

See docs/audit-chain.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.engine import Connection, Engine

from audit.lineage import read_lineage
from core.audit_tables import AuditAnchor, AuditItem, AuditTrace
from core.store import writer

audit_trace = AuditTrace.__table__  # type: ignore[attr-defined]
audit_item = AuditItem.__table__  # type: ignore[attr-defined]
audit_anchor = AuditAnchor.__table__  # type: ignore[attr-defined]
GENESIS = "0" * 64
NO_TENANT = "-"
HASHED = ("trace_id", "created_at", "tenant", "actor", "endpoint", "status_code", "decision", "policy_engine",
          "policy_revision", "error_code", "lineage", "chain", "seq", "prev_hash")


def chain_of(tenant: str | None) -> str:
    return tenant if tenant else NO_TENANT


def utc_instant(value: datetime) -> str:
    if value.tzinfo is None:  # SQLite hands back naive UTC
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec="microseconds")


def row_hash(row: dict[str, Any]) -> str:
    """SHA-256 of the row's canonical JSON: the hashed fields, sorted keys, no spaces, UTC instants."""
    content = {name: (utc_instant(row[name]) if name == "created_at" else row[name]) for name in HASHED}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def append(conn: Connection, values: dict[str, Any]) -> None:
    """Insert one row at the head of its chain (inside the caller's write transaction).

    On PostgreSQL a transaction-scoped advisory lock per chain makes appenders of one chain take
    turns, across processes and replicas, instead of racing for the head and retrying; on SQLite the
    write transaction (BEGIN IMMEDIATE) already does. The unique (chain, seq) index stays the guard."""
    chain = chain_of(values.get("tenant"))
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(chain, 0))))
    head = conn.execute(
        select(audit_trace.c.seq, audit_trace.c.row_hash)
        .where(audit_trace.c.chain == chain, audit_trace.c.seq.is_not(None))
        .order_by(audit_trace.c.seq.desc())
        .limit(1)
    ).first()
    row = {**values, "chain": chain, "seq": (head.seq + 1) if head else 1, "prev_hash": head.row_hash if head else GENESIS}
    lineage = read_lineage(values.get("lineage"))
    derived = {"task_type": lineage.task_type, "about": lineage.about}
    pk = conn.execute(insert(audit_trace).values(**row, **derived, row_hash=row_hash(row)).returning(audit_trace.c.pk)).scalar_one()
    packed = list(dict.fromkeys(lineage.packed or ()))
    if packed:
        conn.execute(insert(audit_item), [{"trace_pk": pk, "item_id": i} for i in packed])


@dataclass(frozen=True, slots=True)
class Break:
    chain: str
    seq: int | None
    trace_id: str | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"chain": self.chain, "seq": self.seq, "trace_id": self.trace_id, "reason": self.reason}


def _rows(conn: Connection, chain: str) -> Generator[Any, None, None]:
    """The chain in order, streamed (a server-side cursor on PostgreSQL), closed even when the
    caller stops at a broken link."""
    statement = select(audit_trace).where(audit_trace.c.chain == chain).order_by(audit_trace.c.seq)
    result = conn.execution_options(stream_results=True, yield_per=1000).execute(statement)
    try:
        yield from result
    finally:
        result.close()


def verify_chain(conn: Connection, chain: str) -> tuple[int, Break | None]:
    """Rows checked, and the first broken link of one chain (or None). A pruned chain is checked
    from its anchor: the oldest kept position and the hash it must link to."""
    anchor = conn.execute(select(audit_anchor).where(audit_anchor.c.chain == chain)).first()
    start = (anchor.prev_hash, anchor.seq) if anchor else (GENESIS, 1)
    rows = _rows(conn, chain)
    try:
        return _walk(rows, chain, *start)
    finally:
        rows.close()


def _walk(rows: Iterator[Any], chain: str, expected_prev: str, expected_seq: int) -> tuple[int, Break | None]:
    checked = 0
    for row in rows:
        m = dict(row._mapping)
        checked += 1
        if m["seq"] != expected_seq:
            what = "a row is missing before this one" if m["seq"] > expected_seq else "rows are out of order"
            return checked, Break(chain, m["seq"], m["trace_id"], f"expected position {expected_seq}: {what}")
        if m["prev_hash"] != expected_prev:
            return checked, Break(chain, m["seq"], m["trace_id"], "does not link to the row before it")
        if m["row_hash"] != row_hash(m):
            return checked, Break(chain, m["seq"], m["trace_id"], "content does not match its hash (edited)")
        expected_prev, expected_seq = m["row_hash"], expected_seq + 1
    return checked, None


def verify(engine: Engine, tenant: str | None = None) -> dict[str, Any]:
    """Check one tenant's chain, or every chain; `ok` is false at the first broken link of any."""
    with engine.connect() as conn:
        if tenant is not None:
            chains = [tenant]
        else:
            chains = [c for (c,) in conn.execute(select(audit_trace.c.chain).where(audit_trace.c.chain.is_not(None)).distinct())]
        unchained = conn.execute(select(func.count()).select_from(audit_trace).where(audit_trace.c.chain.is_(None))).scalar_one()
        report: dict[str, Any] = {"ok": True, "chains": {}, "first_broken": None}
        for chain in sorted(chains):
            checked, broken = verify_chain(conn, chain)
            report["chains"][chain] = {"rows": checked, "ok": broken is None}
            if broken is not None and report["first_broken"] is None:
                report["ok"], report["first_broken"] = False, broken.as_dict()
    if tenant is None:
        report["rows_before_chaining"] = int(unchained)
    return report


def prune(engine: Engine, before: datetime) -> dict[str, int]:
    """Remove rows recorded before `before`, chain by chain, keeping each chain verifiable: the
    oldest kept row becomes the chain's anchor (its position and the hash it links to). A chain is
    only cut below a row that stays, so its newest row is never removed."""
    removed: dict[str, int] = {}
    with writer(engine).begin() as conn:
        chains = [c for (c,) in conn.execute(select(audit_trace.c.chain).where(audit_trace.c.chain.is_not(None)).distinct())]
        for chain in chains:
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
            doomed = select(audit_trace.c.pk).where(audit_trace.c.chain == chain, audit_trace.c.seq < keep.seq)
            conn.execute(delete(audit_item).where(audit_item.c.trace_pk.in_(doomed)))
            count = conn.execute(delete(audit_trace).where(audit_trace.c.chain == chain, audit_trace.c.seq < keep.seq)).rowcount
            if count:
                conn.execute(delete(audit_anchor).where(audit_anchor.c.chain == chain))
                conn.execute(insert(audit_anchor).values(chain=chain, seq=keep.seq, prev_hash=keep.prev_hash,
                                                         pruned_at=datetime.now(timezone.utc)))
                removed[chain] = int(count)
    return removed
