"""Alembic's entry point: run the pending revisions on the connection `core.migrate` hands in.

That connection is already inside a transaction that holds the migration lock (SQLite's write lock,
PostgreSQL's advisory lock), so the revisions and the version stamp commit together or not at all."""

from __future__ import annotations

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None or context.is_offline_mode():
    raise RuntimeError("the store's migrations run through `gateway migrate` (core.migrate), on a live connection")

# SQLite and PostgreSQL both roll DDL back with the transaction: a failing revision leaves the
# store at the revision it had.
context.configure(connection=connection, target_metadata=None, transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations()
