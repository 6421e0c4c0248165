"""The compliance overview's hourly rollup and the facet index of audit rows (core.audit_facts), an
index of each chain by time, and both filled from the rows already written.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from collections import Counter

import sqlalchemy as sa
from alembic import op

from core.audit_facts import facts_of

revision = "0004"
down_revision: str | None = "0003"

BATCH = 2000


def upgrade() -> None:
    op.create_table(
        "audit_facet",
        sa.Column("trace_pk", sa.Integer(), nullable=False),
        sa.Column("facet", sa.String(40), nullable=False),
        sa.Column("value", sa.String(400), nullable=False),
        sa.ForeignKeyConstraint(["trace_pk"], ["audit_trace.pk"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("trace_pk", "facet", "value"),
        if_not_exists=True,
    )
    op.create_index("ix_audit_facet_value", "audit_facet", ["facet", "value", "trace_pk"], if_not_exists=True)
    op.create_table(
        "audit_rollup",
        sa.Column("chain", sa.String(200), nullable=False),
        sa.Column("hour", sa.Integer(), nullable=False),
        sa.Column("measure", sa.String(40), nullable=False),
        sa.Column("key", sa.String(400), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("chain", "hour", "measure", "key"),
        if_not_exists=True,
    )
    op.create_index("ix_audit_chain_created", "audit_trace", ["chain", "created_at"], if_not_exists=True)
    _fill(op.get_bind())


def _fill(bind: sa.engine.Connection) -> None:
    """Facets and rollup of every chained row (a fresh store has none: nothing to read)."""
    trace = sa.table(
        "audit_trace",
        *(sa.column(name) for name in ("pk", "chain", "endpoint", "status_code", "decision", "actor", "task_type")),
        sa.column("policy_revision"),
        sa.column("created_at", sa.DateTime(timezone=True)),
        sa.column("lineage", sa.JSON()),
    )
    facet = sa.table("audit_facet", sa.column("trace_pk"), sa.column("facet"), sa.column("value"))
    rollup = sa.table(
        "audit_rollup", sa.column("chain"), sa.column("hour"), sa.column("measure"), sa.column("key"), sa.column("n")
    )
    counts: Counter[tuple[str, int, str, str]] = Counter()
    last = 0
    while True:
        rows = bind.execute(
            sa.select(trace).where(trace.c.chain.is_not(None), trace.c.pk > last).order_by(trace.c.pk).limit(BATCH)
        ).all()
        if not rows:
            break
        facets = []
        for row in rows:
            m = row._mapping
            facts = facts_of(m)
            facets += [{"trace_pk": m["pk"], "facet": f, "value": v} for f, v in sorted(facts.facets)]
            for measure, key, n in facts.tallies:
                counts[m["chain"], facts.hour, measure, key] += n
        if facets:
            bind.execute(sa.insert(facet), facets)
        last = rows[-1]._mapping["pk"]
    if counts:
        bind.execute(
            sa.insert(rollup),
            [{"chain": c, "hour": h, "measure": m, "key": k, "n": n} for (c, h, m, k), n in sorted(counts.items())],
        )


def downgrade() -> None:
    op.drop_index("ix_audit_chain_created", table_name="audit_trace", if_exists=True)
    op.drop_table("audit_rollup", if_exists=True)
    op.drop_index("ix_audit_facet_value", table_name="audit_facet", if_exists=True)
    op.drop_table("audit_facet", if_exists=True)
