"""An index of each actor's live cursors, newest first, for the per-actor cap on them.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision: str | None = "0001"


def upgrade() -> None:
    op.create_index("ix_retrieve_cursor_actor", "retrieve_cursor", ["tenant", "principal", "created_at"], if_not_exists=True)


def downgrade() -> None:
    op.drop_index("ix_retrieve_cursor_actor", table_name="retrieve_cursor", if_exists=True)
