"""The change log on PostgreSQL too, so the per-process Tantivy indexes serve lexical search there
(connectors/sql/text_index.py). Each log row carries the id of the transaction that wrote it
(`xid`, `pg_current_xact_id()` as a bigint: a 64-bit id that never wraps): a sequence hands out `seq` at insert time, but transactions commit
in any order, so a reader that only followed `seq` could pass a row whose transaction commits
later and never see it. A reader follows the transactions instead: every row of a transaction
older than its snapshot's oldest running one (`pg_snapshot_xmin`) is settled, and rows at or past
that horizon are read again until they are (core/store.py `POSTGRES_CHANGE_TRIGGERS` log updates
of the indexed columns and deletions; writers log the rows they insert). Nothing changes on SQLite,
whose writers commit one at a time.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from alembic import op

from core.store import POSTGRES_CHANGE_TRIGGERS

revision = "0008"
down_revision: str | None = "0007"


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    bind.exec_driver_sql(
        "ALTER TABLE item_change ADD COLUMN IF NOT EXISTS xid bigint NOT NULL DEFAULT (pg_current_xact_id()::text::bigint)"
    )
    bind.exec_driver_sql("CREATE INDEX IF NOT EXISTS ix_item_change_tenant_xid ON item_change (tenant, xid)")
    for statement in POSTGRES_CHANGE_TRIGGERS:
        bind.exec_driver_sql(statement)


def downgrade() -> None:
    raise NotImplementedError("0008 has no downgrade: restore the backup taken before the upgrade")
