"""The audit row: its tables, the columns its hash covers, the row hash and seal, and reading a chain's rows back.

See docs/audit-chain.md.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from core.audit_tables import AuditAnchor, AuditFacet, AuditItem, AuditRollup, AuditTrace

audit_trace = AuditTrace.__table__  # type: ignore[attr-defined]
audit_item = AuditItem.__table__  # type: ignore[attr-defined]
audit_anchor = AuditAnchor.__table__  # type: ignore[attr-defined]
audit_facet = AuditFacet.__table__  # type: ignore[attr-defined]
audit_rollup = AuditRollup.__table__  # type: ignore[attr-defined]
GENESIS = "0" * 64
NO_TENANT = "-"


@dataclass(frozen=True, slots=True)
class StoredTrace:
    """One audit row, typed: every column of audit_trace (core.audit_tables) but its key `pk`. Append
    builds one and inserts it; readers take rows back as one (`of`). Its fields are the row's column
    list, once: what the hash covers (HASHED), the evidence pack's row lines, the store's reads."""

    # What the call left (audit.record.trace.Trace).
    trace_id: str
    created_at: datetime
    tenant: str | None
    actor: str | None
    endpoint: str
    status_code: int
    decision: str
    policy_engine: str | None
    policy_revision: str | None
    error_code: str | None
    lineage: dict[str, Any]  # the stored form of a Lineage (audit.record.lineage)
    # Its place in the tenant's chain: position, and the hash of the row before.
    chain: str | None = None
    seq: int | None = None
    prev_hash: str | None = None
    # For review filters, derived from the lineage (`derived`).
    task_type: str | None = None
    about: str | None = None
    # The row's hash, and its seal (an HMAC of the hash under the seal key; None without a signing key).
    row_hash: str | None = None
    seal: str | None = None

    @classmethod
    def of(cls, row: Mapping[Any, Any]) -> StoredTrace:
        """A row read back (a result row's mapping, a pack's row line): its columns, nothing else."""
        return cls(**{name: row[name] for name in COLUMNS})

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in COLUMNS}


COLUMNS = tuple(f.name for f in fields(StoredTrace))  # every stored column but `pk`, in the table's order
CALLED = COLUMNS[: COLUMNS.index("chain")]  # what a call gives; append adds the rest
HASHED = COLUMNS[: COLUMNS.index("row_hash")]  # every column but the key, the hash itself and its seal
# Version 1 of the row hash left out the review columns derived from the lineage; rows written with
# it are still accepted at the start of a chain (before its first version 2 row), and their derived
# columns are checked against their lineage instead.
HASHED_V1 = tuple(name for name in HASHED if name not in ("task_type", "about"))
HASH_VERSION = 2


def chain_of(tenant: str | None) -> str:
    return tenant if tenant else NO_TENANT


def utc_instant(value: datetime) -> str:
    if value.tzinfo is None:  # SQLite hands back naive UTC
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec="microseconds")


def hashed_content(row: Mapping[str, Any], names: tuple[str, ...] = HASHED) -> dict[str, Any]:
    """The columns `names` of a row as its hash (and an evidence pack, a proof) writes them: instants in UTC."""
    return {name: (utc_instant(row[name]) if name == "created_at" else row[name]) for name in names}


def _digest(row: Mapping[str, Any], names: tuple[str, ...], version: int | None) -> str:
    content = hashed_content(row, names)
    if version is not None:
        content["hash_version"] = version
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def row_hash(row: Mapping[str, Any]) -> str:
    """SHA-256 of the row's canonical JSON: every column but `pk`, `row_hash` and `seal`, plus the
    hash version; sorted keys, no spaces, UTC instants."""
    return _digest(row, HASHED, HASH_VERSION)


def row_hash_v1(row: Mapping[str, Any]) -> str:
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


def seal(key: bytes, row_hash: str) -> str:
    """The row's seal: an HMAC of its hash under the seal key (audit.integrity.keys.seal_key)."""
    return hmac.new(key, row_hash.encode(), hashlib.sha256).hexdigest()


def sealed(key: bytes, row_hash: str | None, value: str | None) -> bool:
    return row_hash is not None and value is not None and hmac.compare_digest(seal(key, row_hash), value)


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


def chains_in(conn: Connection) -> list[str]:
    return sorted(c for (c,) in conn.execute(select(audit_trace.c.chain).where(audit_trace.c.chain.is_not(None)).distinct()))


def chain_heads(conn: Connection, chains: Iterable[str] | None = None) -> dict[str, int]:
    """The head position of every chain (one grouped query), or of the chains named (one index seek
    each, not a scan of each chain)."""
    if chains is None:
        statement = (
            select(audit_trace.c.chain, func.max(audit_trace.c.seq))
            .where(audit_trace.c.chain.is_not(None))
            .group_by(audit_trace.c.chain)
        )
        return {str(chain): int(head) for chain, head in conn.execute(statement)}
    return {
        chain: int(conn.execute(select(func.max(audit_trace.c.seq)).where(audit_trace.c.chain == chain)).scalar_one() or 0)
        for chain in chains
    }
