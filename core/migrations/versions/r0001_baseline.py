"""Baseline: the schema as it stood when migrations began, made from nothing or reached from a store
written before migrations existed.

A store with no `alembic_version` table is either empty or was made by `open_store` before this
revision, which created tables with `create_all` and then added, on every open, the columns and
indexes of later releases, PostgreSQL's generated `tsv` column and its full-text index, and on
SQLite moved an old shared FTS5 table to per-tenant ones. This revision does each of those once,
idempotently: it creates the tables and indexes that are missing, adds the missing columns, and
brings full text to its current form; then Alembic stamps the store.

The tables are frozen here as they were (not imported from the models), so later model changes
need a revision of their own; tests/core/test_migrations.py fails when models and migrations part.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import logging

import sqlalchemy as sa
from alembic import op
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from core.store import ensure_tenant_index

revision = "0001"
down_revision: str | None = None
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None

log = logging.getLogger("gateway.store")

metadata = sa.MetaData()

sa.Table(
    "api_key",
    metadata,
    sa.Column("key_id", sa.String(64), nullable=False),
    sa.Column("secret_hash", sa.String(128), nullable=False),
    sa.Column("tenant", sa.String(200), nullable=False),
    sa.Column("principal", sa.String(300), nullable=False),
    sa.Column("roles", sa.JSON(), nullable=False),
    sa.Column("groups", sa.JSON(), nullable=False),
    sa.Column("clearance", sa.String(), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint("key_id"),
)
sa.Table(
    "audit_anchor",
    metadata,
    sa.Column("chain", sa.String(200), nullable=False),
    sa.Column("seq", sa.Integer(), nullable=False),
    sa.Column("prev_hash", sa.String(64), nullable=False),
    sa.Column("pruned_at", sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint("chain"),
)
sa.Table(
    "audit_secret",
    metadata,
    sa.Column("name", sa.String(50), nullable=False),
    sa.Column("value", sa.String(200), nullable=False),
    sa.PrimaryKeyConstraint("name"),
)
sa.Table(
    "audit_session",
    metadata,
    sa.Column("id", sa.String(64), nullable=False),
    sa.Column("key_id", sa.String(64), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("mac", sa.String(64), nullable=False),
    sa.PrimaryKeyConstraint("id"),
    sa.Index("ix_audit_session_created_at", "created_at"),
    sa.Index("ix_audit_session_expires_at", "expires_at"),
)
sa.Table(
    "audit_trace",
    metadata,
    sa.Column("pk", sa.Integer(), nullable=False),
    sa.Column("trace_id", sa.String(64), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("tenant", sa.String(200), nullable=True),
    sa.Column("actor", sa.String(300), nullable=True),
    sa.Column("endpoint", sa.String(100), nullable=False),
    sa.Column("status_code", sa.Integer(), nullable=False),
    sa.Column("decision", sa.String(20), nullable=False),
    sa.Column("policy_engine", sa.String(), nullable=True),
    sa.Column("policy_revision", sa.String(), nullable=True),
    sa.Column("error_code", sa.String(), nullable=True),
    sa.Column("lineage", sa.JSON(), nullable=False),
    sa.Column("chain", sa.String(200), nullable=True),
    sa.Column("seq", sa.Integer(), nullable=True),
    sa.Column("prev_hash", sa.String(64), nullable=True),
    sa.Column("row_hash", sa.String(64), nullable=True),
    sa.Column("seal", sa.String(64), nullable=True),
    sa.Column("task_type", sa.String(200), nullable=True),
    sa.Column("about", sa.String(64), nullable=True),
    sa.PrimaryKeyConstraint("pk"),
    sa.UniqueConstraint("trace_id"),
    sa.Index("ix_audit_tenant_created", "tenant", "created_at"),
    sa.Index("ix_audit_trace_about", "about"),
    sa.Index("ux_audit_chain_seq", "chain", "seq", unique=True),
)
sa.Table(
    "entity_tombstone",
    metadata,
    sa.Column("tenant", sa.String(200), nullable=False),
    sa.Column("entity_id", sa.String(200), nullable=False),
    sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint("tenant", "entity_id"),
)
sa.Table(
    "item",
    metadata,
    sa.Column("pk", sa.Integer(), nullable=False),
    sa.Column("tenant", sa.String(200), nullable=False),
    sa.Column("id", sa.String(200), nullable=False),
    sa.Column("kind", sa.String(20), nullable=False),
    sa.Column("text", sa.String(), nullable=False),
    sa.Column("name", sa.String(), nullable=True),
    sa.Column("value", sa.JSON(), nullable=True),
    sa.Column("entity", sa.String(), nullable=True),
    sa.Column("section", sa.String(), nullable=True),
    sa.Column("document", sa.String(), nullable=True),
    sa.Column("entity_type", sa.String(), nullable=True),
    sa.Column("email", sa.String(), nullable=True),
    sa.Column("domain", sa.String(), nullable=True),
    sa.Column("phone", sa.String(), nullable=True),
    sa.Column("profile", sa.String(), nullable=True),
    sa.Column("merged_into", sa.String(), nullable=True),
    sa.Column("relation", sa.String(), nullable=True),
    sa.Column("edge_from", sa.String(), nullable=True),
    sa.Column("edge_to", sa.String(), nullable=True),
    sa.Column("confidence", sa.Float(), nullable=True),
    sa.Column("weight", sa.Float(), nullable=True),
    sa.Column("tags", sa.JSON(), nullable=False),
    sa.Column("acl", sa.JSON(), nullable=False),
    sa.Column("sensitivity", sa.String(), nullable=False),
    sa.Column("valid_from", sa.DateTime(timezone=True), nullable=True),
    sa.Column("valid_to", sa.DateTime(timezone=True), nullable=True),
    sa.Column("scope", sa.JSON(), nullable=False),
    sa.Column("scoped", sa.Boolean(), nullable=False),
    sa.Column("authority", sa.String(), nullable=False),
    sa.Column("status", sa.String(), nullable=False),
    sa.Column("slot", sa.String(), nullable=True),
    sa.Column("attached_to", sa.String(), nullable=True),
    sa.Column("source_system", sa.String(), nullable=True),
    sa.Column("source_uri", sa.String(), nullable=True),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=True),
    sa.Column("content_hash", sa.String(), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint("pk"),
    sa.UniqueConstraint("tenant", "id", name="uq_item_tenant_id"),
    sa.Index("ix_item_domain", "domain"),
    sa.Index("ix_item_email", "email"),
    sa.Index("ix_item_phone", "phone"),
    sa.Index("ix_item_profile", "profile"),
    sa.Index("ix_item_tenant_entity", "tenant", "entity"),
    sa.Index("ix_item_tenant_kind", "tenant", "kind"),
    # Not declared on the models (open_store added them by hand before migrations).
    sa.Index("ix_item_tenant_document_section", "tenant", "document", "section"),
    sa.Index("ix_item_tenant_edge_from", "tenant", "edge_from"),
    sa.Index("ix_item_tenant_merged_into", "tenant", "merged_into"),
)
sa.Table(
    "retrieve_cursor",
    metadata,
    sa.Column("token_hash", sa.String(64), nullable=False),
    sa.Column("tenant", sa.String(200), nullable=False),
    sa.Column("principal", sa.String(300), nullable=False),
    sa.Column("request", sa.JSON(), nullable=False),
    sa.Column("remaining", sa.JSON(), nullable=False),
    sa.Column("returned", sa.JSON(), nullable=False),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint("token_hash"),
    sa.Index("ix_retrieve_cursor_last_used_at", "last_used_at"),
)
sa.Table(
    "source_document",
    metadata,
    sa.Column("pk", sa.Integer(), nullable=False),
    sa.Column("tenant", sa.String(200), nullable=False),
    sa.Column("id", sa.String(200), nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("pieces", sa.Integer(), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint("pk"),
    sa.UniqueConstraint("tenant", "id", name="uq_source_document_tenant_id"),
)
sa.Table(
    "audit_item",
    metadata,
    sa.Column("trace_pk", sa.Integer(), nullable=False),
    sa.Column("item_id", sa.String(200), nullable=False),
    sa.ForeignKeyConstraint(["trace_pk"], ["audit_trace.pk"], ondelete="CASCADE"),
    sa.PrimaryKeyConstraint("trace_pk", "item_id"),
    sa.Index("ix_audit_item_item", "item_id", "trace_pk"),
)
sa.Table(
    "item_pii",
    metadata,
    sa.Column("item_pk", sa.Integer(), nullable=False),
    sa.Column("version", sa.String(100), nullable=False),
    sa.Column("content_hash", sa.String(64), nullable=False),
    sa.Column("spans", sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(["item_pk"], ["item.pk"], ondelete="CASCADE"),
    sa.PrimaryKeyConstraint("item_pk"),
)
sa.Table(
    "item_principal",
    metadata,
    sa.Column("item_pk", sa.Integer(), nullable=False),
    sa.Column("principal", sa.String(300), nullable=False),
    sa.ForeignKeyConstraint(["item_pk"], ["item.pk"], ondelete="CASCADE"),
    sa.PrimaryKeyConstraint("item_pk", "principal"),
    sa.Index("ix_item_principal_lookup", "principal", "item_pk"),
)
sa.Table(
    "item_scope",
    metadata,
    sa.Column("item_pk", sa.Integer(), nullable=False),
    sa.Column("scope", sa.String(200), nullable=False),
    sa.ForeignKeyConstraint(["item_pk"], ["item.pk"], ondelete="CASCADE"),
    sa.PrimaryKeyConstraint("item_pk", "scope"),
    sa.Index("ix_item_scope_lookup", "scope", "item_pk"),
)
sa.Table(
    "item_tag",
    metadata,
    sa.Column("item_pk", sa.Integer(), nullable=False),
    sa.Column("tag", sa.String(200), nullable=False),
    sa.ForeignKeyConstraint(["item_pk"], ["item.pk"], ondelete="CASCADE"),
    sa.PrimaryKeyConstraint("item_pk", "tag"),
    sa.Index("ix_item_tag_lookup", "tag", "item_pk"),
)
sa.Table(
    "item_vector",
    metadata,
    sa.Column("item_pk", sa.Integer(), nullable=False),
    sa.Column("model", sa.String(200), nullable=False),
    sa.Column("dims", sa.Integer(), nullable=False),
    sa.Column("vector", sa.LargeBinary(), nullable=False),
    sa.Column("content_hash", sa.String(64), nullable=False),
    sa.Column("seq", sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(["item_pk"], ["item.pk"], ondelete="CASCADE"),
    sa.PrimaryKeyConstraint("item_pk"),
    sa.Index("ix_item_vector_model_seq", "model", "seq"),
)

# The one FTS5 table every tenant shared before per-tenant tables, and its triggers (SQLite).
SHARED_FTS = ("item_fts", ("item_fts_insert", "item_fts_delete", "item_fts_update"))

POSTGRES_TSV = (
    "ALTER TABLE item ADD COLUMN IF NOT EXISTS tsv tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english', coalesce(text, ''))) STORED"
)
# With btree_gin the full-text index leads with the tenant, so a search reads only the caller
# tenant's part of each word's posting list (and its rows): another tenant's volume costs nothing.
# fastupdate off: no pending list of fresh (other tenants') rows that every search would scan.
# The index without the tenant, from earlier stores, goes.
POSTGRES_TENANT_FTS = (
    "CREATE INDEX IF NOT EXISTS ix_item_tenant_tsv ON item USING gin (tenant, tsv) WITH (fastupdate = off)",
    "DROP INDEX IF EXISTS ix_item_tsv",
)
# Only where btree_gin cannot be had: full text on an index without the tenant.
POSTGRES_SHARED_FTS = ("CREATE INDEX IF NOT EXISTS ix_item_tsv ON item USING gin (tsv)",)
BTREE_GIN = (
    "CREATE EXTENSION IF NOT EXISTS btree_gin SCHEMA public",  # outlives any one schema of a shared database
    "CREATE EXTENSION IF NOT EXISTS btree_gin",
)


def upgrade() -> None:
    bind = op.get_bind()
    existing = set(sa.inspect(bind).get_table_names())
    metadata.create_all(bind, checkfirst=True)  # all of them on an empty store; else those it lacks
    for table in metadata.sorted_tables:
        if table.name in existing:
            _add_missing_columns(bind, table)
            for index in table.indexes:
                index.create(bind, checkfirst=True)
    if bind.dialect.name == "sqlite":
        _sqlite_full_text(bind)
    else:
        _postgres_full_text(bind)


def downgrade() -> None:
    raise NotImplementedError("the baseline has no downgrade: restore the backup taken before the upgrade")


def _add_missing_columns(bind: Connection, table: sa.Table) -> None:
    """Columns added by later releases before migrations (all nullable), as `open_store` added them."""
    present = {column["name"] for column in sa.inspect(bind).get_columns(table.name)}
    for column in table.columns:
        if column.name not in present:
            op.add_column(table.name, sa.Column(column.name, column.type, nullable=True))


def _sqlite_full_text(bind: Connection) -> None:
    """One FTS5 table per tenant: drop the shared table of older stores (if any), and give every
    tenant already in `item` its table and triggers (`ensure_tenant_index` does nothing for a
    tenant that has them). Tenants that write later get theirs on their first write."""
    shared, triggers = SHARED_FTS
    for trigger in triggers:
        bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS {trigger}")
    bind.exec_driver_sql(f"DROP TABLE IF EXISTS {shared}")
    for (tenant,) in bind.exec_driver_sql("SELECT DISTINCT tenant FROM item").all():
        ensure_tenant_index(bind, tenant)


def _postgres_full_text(bind: Connection) -> None:
    """The generated `tsv` column and its GIN index, tenant-leading when btree_gin can be had."""
    bind.exec_driver_sql(POSTGRES_TSV)
    statements = POSTGRES_TENANT_FTS if _btree_gin(bind) else POSTGRES_SHARED_FTS
    for statement in statements:
        bind.exec_driver_sql(statement)


def _btree_gin(bind: Connection) -> bool:
    if bind.exec_driver_sql("SELECT 1 FROM pg_extension WHERE extname = 'btree_gin'").first() is not None:
        return True
    for statement in BTREE_GIN:
        try:
            with bind.begin_nested():  # a failed CREATE EXTENSION must not abort the migration
                bind.exec_driver_sql(statement)
            return True
        except SQLAlchemyError:
            continue
    log.warning("store: extension btree_gin unavailable; full text uses a GIN index without the tenant leading")
    return False
