"""One typed audit row (audit.chain.StoredTrace): its fields are the table's columns, once; what a
call leaves (audit.record.Trace) is their first part; the hash covers what it always covered."""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime, timezone

import pytest

from audit.chain import CALLED, COLUMNS, HASHED, HASHED_V1, StoredTrace, row_hash, selection
from audit.record import Trace
from audit.review import EXPORT_COLUMNS
from core.audit_tables import AuditTrace


def test_the_stored_row_is_the_table_but_its_key() -> None:
    table = [c.name for c in AuditTrace.__table__.columns]  # type: ignore[attr-defined]
    assert sorted(table) == sorted(("pk", *COLUMNS))
    assert COLUMNS == (*HASHED, "row_hash", "seal")
    assert set(HASHED) - set(HASHED_V1) == {"task_type", "about"}
    assert set(EXPORT_COLUMNS) <= set(COLUMNS)


def test_a_call_leaves_the_first_columns() -> None:
    """The row is what the call left and more: the call's fields are the row's first columns, written
    once (in Trace), and the export is a selection of the row's columns, refused when one is not."""
    assert issubclass(StoredTrace, Trace)
    assert tuple(f.name for f in fields(Trace)) == CALLED == COLUMNS[: len(CALLED)]
    assert selection(*EXPORT_COLUMNS) == EXPORT_COLUMNS
    with pytest.raises(ValueError, match="task: not a column"):
        selection("trace_id", "task")


def test_a_row_read_back_hashes_as_written() -> None:
    row = StoredTrace(
        trace_id="tr_1",
        created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
        tenant="acme",
        actor="alice",
        endpoint="retrieve",
        status_code=200,
        decision="allow",
        policy_engine="embedded",
        policy_revision="r1",
        error_code=None,
        lineage={"version": 2},
        chain="acme",
        seq=1,
        prev_hash="0" * 64,
    )
    assert StoredTrace.of({**row.as_dict(), "pk": 7}) == row  # read back with its key, which is no column of it
    # The hash as every chain was written with it (computed before StoredTrace): a change here breaks them all.
    assert row_hash(row.as_dict()) == row_hash(row) == "1224d59a57877c96779a479d05a10ab621248b8762de30f06c7bc25827b73a02"
