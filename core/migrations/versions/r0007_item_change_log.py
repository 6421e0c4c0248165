"""The change log of items' indexed columns (core.tables.ItemChange), which the per-process Tantivy
indexes of lexical search follow (connectors/sql/text_index.py). Empty at the start: an index is
built from `item` itself and follows the log from the position it was built at. On SQLite, triggers
log updates of the indexed columns and deletions (core/store.py `CHANGE_TRIGGERS`); writers log the
rows they insert. Nothing reads the log on PostgreSQL, whose full-text index is the server's.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from core.store import CHANGE_TRIGGERS

revision = "0007"
down_revision: str | None = "0006"


def upgrade() -> None:
    op.create_table(
        "item_change",
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("item_pk", sa.Integer(), nullable=False),
        sa.Column("tenant", sa.String(200), nullable=False),
        sa.PrimaryKeyConstraint("seq"),
        if_not_exists=True,
    )
    op.create_index("ix_item_change_tenant_seq", "item_change", ["tenant", "seq"], if_not_exists=True)
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        for statement in CHANGE_TRIGGERS:
            bind.exec_driver_sql(statement)


def downgrade() -> None:
    raise NotImplementedError("0007 has no downgrade: restore the backup taken before the upgrade")
