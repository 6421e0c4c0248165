"""SQLModel tables for everything retrievable, plus API keys.

Every retrievable record (entity, property, memory, document section, edge) is a row of
`item` carrying the governance envelope. Principals and scopes are also kept as rows of
`item_principal` and `item_scope` so connectors can push the policy's constraints into
an indexed SQL `WHERE` on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, Index, LargeBinary, UniqueConstraint
from sqlalchemy.orm import declared_attr
from sqlmodel import Field, SQLModel

KINDS = ("entity", "property", "memory", "document", "edge")
SENSITIVITIES = ("public", "internal", "confidential", "restricted")
AUTHORITIES = ("approved", "reviewed", "unreviewed", "speculative")
STATUSES = ("active", "superseded", "disputed", "retracted", "pending_deletion")


class Item(SQLModel, table=True):
    __tablename__ = "item"
    __table_args__ = (
        UniqueConstraint("tenant", "id", name="uq_item_tenant_id"),
        Index("ix_item_tenant_entity", "tenant", "entity"),
        Index("ix_item_tenant_kind", "tenant", "kind"),
    )

    pk: int | None = Field(default=None, primary_key=True)
    tenant: str = Field(max_length=200)
    id: str = Field(max_length=200)
    kind: str = Field(max_length=20)
    text: str = ""
    name: str | None = None
    value: Any = Field(default=None, sa_column=Column(JSON))
    entity: str | None = None
    section: str | None = None
    document: str | None = None
    entity_type: str | None = None
    email: str | None = Field(default=None, index=True)
    domain: str | None = Field(default=None, index=True)
    phone: str | None = Field(default=None, index=True)
    profile: str | None = Field(default=None, index=True)  # a person-profile URL, normalised
    merged_into: str | None = None  # the surviving entity after a merge
    relation: str | None = None
    edge_from: str | None = None
    edge_to: str | None = None
    confidence: float | None = None
    weight: float | None = None
    tags: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    acl: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    sensitivity: str = "internal"
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    scope: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    scoped: bool = False
    authority: str = "unreviewed"
    status: str = "active"
    slot: str | None = None
    attached_to: str | None = None
    source_system: str | None = None
    source_uri: str | None = None
    recorded_at: datetime | None = None
    content_hash: str = ""
    updated_at: datetime | None = None


class ItemValues(SQLModel):
    """A multi-valued envelope field of an item, one row per value (its principals, scopes, tags),
    gone with the item; each table adds its value column, and has the (value, item) lookup index
    `ix_<table>_lookup` declared here once."""

    item_pk: int = Field(foreign_key="item.pk", primary_key=True, ondelete="CASCADE")

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Index]:
        (value,) = (name for name in cls.model_fields if name != "item_pk")
        return (Index(f"ix_{cls.__tablename__}_lookup", value, "item_pk"),)


class ItemPrincipal(ItemValues, table=True):
    __tablename__ = "item_principal"
    principal: str = Field(primary_key=True, max_length=300)


class ItemScope(ItemValues, table=True):
    __tablename__ = "item_scope"
    scope: str = Field(primary_key=True, max_length=200)


class ItemTag(ItemValues, table=True):
    __tablename__ = "item_tag"
    tag: str = Field(primary_key=True, max_length=200)


class ItemVector(SQLModel, table=True):
    """An item's embedding, with the model that made it and the content it was made from."""

    __tablename__ = "item_vector"
    __table_args__ = (Index("ix_item_vector_model_seq", "model", "seq"),)

    item_pk: int = Field(foreign_key="item.pk", primary_key=True, ondelete="CASCADE")
    model: str = Field(max_length=200)
    dims: int
    vector: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    content_hash: str = Field(max_length=64)
    seq: int = Field(default=0, sa_column=Column(BigInteger, nullable=False))


class ItemPii(SQLModel, table=True):
    """Personal data found in an item's text at ingest: spans `[type, start, end, score]`, with the
    analyzer configuration and the content they were found in (re-analysed when either changes)."""

    __tablename__ = "item_pii"

    item_pk: int = Field(foreign_key="item.pk", primary_key=True, ondelete="CASCADE")
    version: str = Field(max_length=100)
    content_hash: str = Field(max_length=64)
    spans: list[Any] = Field(sa_column=Column(JSON, nullable=False))


class ItemChange(SQLModel, table=True):
    """The log of changes to items' indexed columns (text and what decides visibility), in order:
    a row per item inserted (by its writer, in the same transaction), per update of an indexed column
    and per deletion (by triggers). Indexes kept outside the store (the per-process Tantivy indexes,
    connectors/sql/text_index.py) read it past their last entry to stay in step. On PostgreSQL each
    row also names its transaction (`xid`, migration 0008, not a model field: it is the server's
    default), which readers follow instead of `seq` there."""

    __tablename__ = "item_change"
    __table_args__ = (Index("ix_item_change_tenant_seq", "tenant", "seq"),)  # each tenant's index follows its own log

    seq: int | None = Field(default=None, primary_key=True)
    item_pk: int
    tenant: str = Field(max_length=200)


class WorkClaim(SQLModel, table=True):
    """An item a background worker took for one kind of work (`embedding`, `pii`): no other worker
    takes it until the claim is released (its result stored) or `expires` (epoch seconds) passes,
    so workers in any number of processes share the backlog without doing an item twice, and a
    worker that died holding a claim strands its items only until then (gateway/writes/claims.py)."""

    __tablename__ = "work_claim"

    item_pk: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    kind: str = Field(primary_key=True, max_length=16)
    owner: str = Field(max_length=100)
    expires: float


class SourceDocument(SQLModel, table=True):
    """A Markdown document as last pushed: its hash decides whether a re-push changes anything."""

    __tablename__ = "source_document"
    __table_args__ = (UniqueConstraint("tenant", "id", name="uq_source_document_tenant_id"),)

    pk: int | None = Field(default=None, primary_key=True)
    tenant: str = Field(max_length=200)
    id: str = Field(max_length=200)
    sha256: str = Field(max_length=64)
    pieces: int
    updated_at: datetime


class EntityTombstone(SQLModel, table=True):
    """An entity pending deletion. Every item that names it (entity, attached_to, edge ends) is
    hidden by the shared pushdown from the moment this row commits."""

    __tablename__ = "entity_tombstone"

    tenant: str = Field(primary_key=True, max_length=200)
    entity_id: str = Field(primary_key=True, max_length=200)
    deleted_at: datetime


class RetrieveCursor(SQLModel, table=True):
    """What an expand call continues: the ranked ids not yet returned, scoped to one actor.

    Only the SHA-256 of the cursor token is stored. `version` makes concurrent expands of one
    cursor take turns (optimistic update), so no item is ever returned twice."""

    __tablename__ = "retrieve_cursor"
    # An actor's live cursors, newest first: the cap drops the oldest (gateway/pipeline/cursors.py).
    __table_args__ = (Index("ix_retrieve_cursor_actor", "tenant", "principal", "created_at"),)

    token_hash: str = Field(primary_key=True, max_length=64)
    tenant: str = Field(max_length=200)
    principal: str = Field(max_length=300)
    request: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    remaining: list[str] = Field(sa_column=Column(JSON, nullable=False))
    returned: list[str] = Field(sa_column=Column(JSON, nullable=False))
    version: int = 0
    created_at: datetime
    last_used_at: datetime = Field(index=True)


class ApiKey(SQLModel, table=True):
    __tablename__ = "api_key"

    key_id: str = Field(primary_key=True, max_length=64)
    secret_hash: str = Field(max_length=128)
    tenant: str = Field(max_length=200)
    principal: str = Field(max_length=300)
    roles: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    groups: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    clearance: str = "internal"
    created_at: datetime
    revoked_at: datetime | None = None
