"""The store's schema migrations (Alembic): `env.py` and one module per revision in `versions/`.

They are run through `core.migrate` (no alembic.ini), on a connection it opens, locks and hands in."""
