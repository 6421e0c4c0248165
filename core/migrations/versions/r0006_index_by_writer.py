"""SQLite: new items are indexed by their writer, a batch in one statement (core/store.py
`index_new_items`), so each tenant's per-row insert trigger goes. What the FTS5 tables hold is
unchanged; the update and delete triggers stay. Nothing changes on PostgreSQL.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from alembic import op

from core.store import drop_insert_triggers

revision = "0006"
down_revision: str | None = "0005"


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        drop_insert_triggers(bind)


def downgrade() -> None:
    raise NotImplementedError("0006 has no downgrade: restore the backup taken before the upgrade")
