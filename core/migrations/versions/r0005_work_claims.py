"""The claims of background workers (core.tables.WorkClaim): which worker took which item for which
kind of work, until when. Empty at the start: nothing was claimed before.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision: str | None = "0004"


def upgrade() -> None:
    op.create_table(
        "work_claim",
        sa.Column("item_pk", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("expires", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("item_pk", "kind"),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_table("work_claim")
