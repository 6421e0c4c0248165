"""The audit trace table. Holds shapes, hashes and ids, never query or item text."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Column, Index
from sqlmodel import Field, SQLModel


class AuditTrace(SQLModel, table=True):
    __tablename__ = "audit_trace"
    __table_args__ = (
        Index("ix_audit_tenant_created", "tenant", "created_at"),
        Index("ux_audit_chain_seq", "chain", "seq", unique=True),
        Index("ix_audit_chain_created", "chain", "created_at"),
    )

    pk: int | None = Field(default=None, primary_key=True)
    trace_id: str = Field(max_length=64, unique=True)
    created_at: datetime
    tenant: str | None = Field(default=None, max_length=200)
    actor: str | None = Field(default=None, max_length=300)
    endpoint: str = Field(max_length=100)
    status_code: int
    decision: str = Field(max_length=20)
    policy_engine: str | None = None
    policy_revision: str | None = None
    error_code: str | None = None
    lineage: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    # Tamper evidence (audit.chain): position in the tenant's chain, the previous row's hash, this row's.
    chain: str | None = Field(default=None, max_length=200)
    seq: int | None = None
    prev_hash: str | None = Field(default=None, max_length=64)
    row_hash: str | None = Field(default=None, max_length=64)
    # HMAC of row_hash under a key derived from the audit signing key (audit.integrity.keys): proof that the
    # gateway wrote the row, checked before a checkpoint signs it. None without a signing key.
    seal: str | None = Field(default=None, max_length=64)
    # For review filters (derived from the hashed lineage): the task type, and the trace a usage or
    # feedback row is about.
    task_type: str | None = Field(default=None, max_length=200)
    about: str | None = Field(default=None, max_length=64, index=True)


class AuditItem(SQLModel, table=True):
    """The ids a call returned (packed), one row each: "which calls ever returned item X?"."""

    __tablename__ = "audit_item"
    __table_args__ = (Index("ix_audit_item_item", "item_id", "trace_pk"),)

    trace_pk: int = Field(foreign_key="audit_trace.pk", primary_key=True, ondelete="CASCADE")
    item_id: str = Field(primary_key=True, max_length=200)


class AuditFacet(SQLModel, table=True):
    """What a call is about, one row each (core.audit_facts): a denial reason, a sensitivity or a
    masked or revealed type it returned, an entity and the stage an item about it reached
    (`subject:returned`, ...), a chain check's result. Derived from the row's lineage in its append
    transaction and checked against it by verify, so the filters and the subject report it drives
    are read from an index, never a scan, and still trust only the hashed row."""

    __tablename__ = "audit_facet"
    __table_args__ = (Index("ix_audit_facet_value", "facet", "value", "trace_pk"),)

    trace_pk: int = Field(foreign_key="audit_trace.pk", primary_key=True, ondelete="CASCADE")
    facet: str = Field(primary_key=True, max_length=40)
    value: str = Field(primary_key=True, max_length=400)


class AuditRollup(SQLModel, table=True):
    """The compliance overview's hourly counts per chain (core.audit_facts): kept in step by each
    append's own transaction, rebuilt for the hours a prune touched, and recomputed from the rows by
    verify, which names any count that differs."""

    __tablename__ = "audit_rollup"

    chain: str = Field(primary_key=True, max_length=200)
    hour: int = Field(primary_key=True)  # hours since the epoch, UTC
    measure: str = Field(primary_key=True, max_length=40)
    key: str = Field(primary_key=True, max_length=400)
    n: int


class AuditSecret(SQLModel, table=True):
    """The audit key shared by every process and replica on this store, created once (unless
    GATEWAY_AUDIT_KEY provides one)."""

    __tablename__ = "audit_secret"

    name: str = Field(primary_key=True, max_length=50)
    value: str = Field(max_length=200)


class AuditAnchor(SQLModel, table=True):
    """Where a pruned chain now starts: its oldest kept position and the hash that row links to."""

    __tablename__ = "audit_anchor"

    chain: str = Field(primary_key=True, max_length=200)
    seq: int
    prev_hash: str = Field(max_length=64)
    pruned_at: datetime


class AuditSession(SQLModel, table=True):
    """A signed-in session of the audit page (gateway/http/audit_pages/session.py). Not an audit row:
    no part of the hash chain; deleted at sign-out, and once dead at a later sign-in. `id` is the
    HMAC of the cookie's random token under the session key, never the token, so reading this table
    gives no usable cookie; `mac` binds the key id and the creation time to that id under the same
    key, so writing it without the key can neither mint a session nor move one to another key or
    make it younger. `expires_at` is not bound: a session also ends GATEWAY_AUDIT_SESSION_MINUTES
    after `created_at`, whatever it says."""

    __tablename__ = "audit_session"

    id: str = Field(primary_key=True, max_length=64)
    key_id: str = Field(max_length=64)
    created_at: datetime = Field(index=True)
    expires_at: datetime = Field(index=True)
    mac: str = Field(max_length=64)
