"""One module per schema revision; Alembic loads them by path (the revision is in the module)."""
