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
from typing import Any, TypeAlias

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from audit.record import Trace
from core.audit_tables import AuditAnchor, AuditFacet, AuditItem, AuditRollup, AuditTrace

audit_trace = AuditTrace.__table__  # type: ignore[attr-defined]
audit_item = AuditItem.__table__  # type: ignore[attr-defined]
audit_anchor = AuditAnchor.__table__  # type: ignore[attr-defined]
audit_facet = AuditFacet.__table__  # type: ignore[attr-defined]
audit_rollup = AuditRollup.__table__  # type: ignore[attr-defined]
GENESIS = "0" * 64
NO_TENANT = "-"


@dataclass(frozen=True, slots=True)
class StoredTrace(Trace):
    """One audit row, typed: every column of audit_trace (core.audit_tables) but its key `pk`, its
    shape written here and in the table only. Its first columns are what the call left
    (audit.record.Trace, whose fields they are); then its place in the tenant's chain, the review
    columns derived from its lineage, and its hash and seal. Append builds one and inserts it; every
    reader takes rows back as one (`of`): the review list and one trace, the export, the subject
    report, the evidence pack (whose row lines are its columns)."""

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

    @property
    def position(self) -> int:
        """Its position in its chain (a row from before chaining has none: not one to ask)."""
        if self.seq is None:
            raise ValueError(f"{self.trace_id}: a row from before chaining has no position")
        return self.seq

    def as_dict(self) -> dict[str, Any]:
        """The row's columns by name: the insert's values, and what core.audit_facts reads."""
        return {name: getattr(self, name) for name in COLUMNS}


COLUMNS = tuple(f.name for f in fields(StoredTrace))  # every stored column but `pk`, in the table's order
CALLED = tuple(f.name for f in fields(Trace))  # what a call gives; append adds the rest
HASHED = COLUMNS[: COLUMNS.index("row_hash")]  # every column but the key, the hash itself and its seal
# Version 1 of the row hash left out the review columns derived from the lineage; rows written with
# it are still accepted at the start of a chain (before its first version 2 row), and their derived
# columns are checked against their lineage instead.
HASHED_V1 = tuple(name for name in HASHED if name not in ("task_type", "about"))
HASH_VERSION = 2


def selection(*names: str) -> tuple[str, ...]:
    """A named selection of the row's columns, in the order given: declared once, by the reader it is
    for, and refused at import when a name is no column of StoredTrace."""
    unknown = [name for name in names if name not in COLUMNS]
    if unknown:
        raise ValueError(f"{unknown[0]}: not a column of the audit row")
    return names


def chain_of(tenant: str | None) -> str:
    return tenant if tenant else NO_TENANT


def utc_instant(value: datetime) -> str:
    if value.tzinfo is None:  # SQLite hands back naive UTC
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec="microseconds")


Row: TypeAlias = "StoredTrace | Mapping[str, Any]"  # a row typed, or its columns by name (read raw, a pack's line)


def hashed_content(row: Row, names: tuple[str, ...] = HASHED) -> dict[str, Any]:
    """The columns `names` of a row as its hash (and an evidence pack, a proof) writes them: instants in UTC."""
    if isinstance(row, Mapping):
        content = {name: row[name] for name in names}
    else:
        content = {name: getattr(row, name) for name in names}
    if "created_at" in content:
        content["created_at"] = utc_instant(content["created_at"])
    return content


def _digest(row: Row, names: tuple[str, ...], version: int | None) -> str:
    content = hashed_content(row, names)
    if version is not None:
        content["hash_version"] = version
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def row_hash(row: Row) -> str:
    """SHA-256 of the row's canonical JSON: every column but `pk`, `row_hash` and `seal`, plus the
    hash version; sorted keys, no spaces, UTC instants."""
    return _digest(row, HASHED, HASH_VERSION)


def row_hash_v1(row: Row) -> str:
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
