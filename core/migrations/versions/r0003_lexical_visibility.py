"""SQLite: every tenant's FTS5 table again, contentless and with the `vis` column of what decides an
item's visibility (core/store.py `visibility_tokens`), so a lexical search never scores a row its
caller's filter excludes. Nothing changes on PostgreSQL.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

from core.store import drop_tenant_indexes, ensure_tenant_index

revision = "0003"
down_revision: str | None = "0002"


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    drop_tenant_indexes(bind)
    for (tenant,) in bind.exec_driver_sql("SELECT DISTINCT tenant FROM item").all():
        ensure_tenant_index(bind, tenant)


def downgrade() -> None:
    raise NotImplementedError("0003 has no downgrade: restore the backup taken before the upgrade")
