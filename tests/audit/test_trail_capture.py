"""The audit trail as it is served, captured byte for byte: a fixed chain (the rows of real calls,
with fixed ids and instants, tests/snapshots/trail/rows.json) exported as CSV and JSONL, listed,
opened whole and reported on by subject must give exactly the committed files. The trail's types may
be reworked freely behind these answers; the answers themselves may not move (a changed byte is a
changed contract: regenerate on purpose, as the failure says, and say why in the commit).

rows.json holds the rows of an ingest, an allowed and a denied retrieve, the usage and feedback
reported on the first, an unrouted call and another tenant's calls, as the code of 3b76185 wrote them
(their trace ids and instants then replaced by fixed ones). How they are written (`_write`) may change
with the types; what is read back may not."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from audit.record import Trace
from tests.conftest import Gateway
from tests.snapshot import SNAPSHOTS, assert_snapshot

ROWS = SNAPSHOTS / "trail" / "rows.json"
UNTIL = "2024-01-03T00:00:00Z"  # the fixed rows, and none of the reads the auditor's requests below append
RETRIEVED = "tr_capture00000000000003"  # the allowed retrieve, reported on by the usage and feedback rows
SUBJECT = "ent_jane"  # named by that retrieve


def _write(gateway: Gateway, rows: list[dict[str, Any]]) -> None:
    """The rows onto their chains, in order, through the service's own writer."""
    writer = gateway.client.app.state.context.audit  # type: ignore[attr-defined]
    for row in rows:
        writer.write_sync(Trace(**{**row, "created_at": datetime.fromisoformat(row["created_at"])}))


@pytest.fixture(scope="module")
def trail(module_gateway: Gateway) -> Gateway:
    _write(module_gateway, json.loads(ROWS.read_text()))
    return module_gateway


def _read(gateway: Gateway, path: str, **params: str) -> bytes:
    auditor = gateway.key("auditor-acme", roles=("auditor",))
    response = gateway.client.get(path, params=params, headers=gateway.auth(auditor))
    assert response.status_code == 200, response.text
    return response.content


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_the_export_is_byte_for_byte_as_captured(trail: Gateway, fmt: str) -> None:
    assert_snapshot(f"trail/export.{fmt}", _read(trail, "/v1/audit/export", format=fmt, until=UNTIL))


def test_the_list_is_byte_for_byte_as_captured(trail: Gateway) -> None:
    assert_snapshot("trail/traces.json", _read(trail, "/v1/audit/traces", until=UNTIL))


def test_one_trace_whole_is_byte_for_byte_as_captured(trail: Gateway) -> None:
    assert_snapshot("trail/trace.json", _read(trail, f"/v1/audit/traces/{RETRIEVED}"))


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_the_subject_report_is_byte_for_byte_as_captured(trail: Gateway, fmt: str) -> None:
    assert_snapshot(f"trail/subject.{fmt}", _read(trail, f"/v1/audit/subjects/{SUBJECT}", format=fmt))


def test_the_captured_files_are_committed() -> None:
    names = {p.name for p in Path(SNAPSHOTS / "trail").iterdir()}
    assert {"rows.json", "export.csv", "export.jsonl", "traces.json", "trace.json", "subject.json", "subject.csv"} <= names
