"""Each kind of call's record (audit.record.calls) leaves exactly the stored JSON the handlers'
assignments left before it: rows are hash-chained and signed, so not a key, a null or an order may
move. The expected rows below were captured from the code the records replaced."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from audit import record as room  # the record room's one entry point
from core.instants import utc_now
from gateway.http.openapi import OPERATIONS
from gateway.http.operation import REQUIRED_ROLE

SECRET_PATH = "/v1/nowhere?secret=1"
PATH = room.TraceBuilder("tr_x", "any", utc_now(), key=b"k" * 32).fingerprint(SECRET_PATH)  # as a handler keys it
IMPACT_REPORT: dict[str, Any] = {
    "candidate_revision": "r2",
    "replayed": 10,
    "flips": {"allow_to_deny": [{"count": 2}], "deny_to_allow": [{"count": 1}]},
    "items": {"newly_allowed": {"count": 1}, "newly_denied": {"count": 2}},
}

# fmt: off
CASES: list[tuple[str, room.CallRecord | tuple[room.CallRecord, ...], dict[str, Any]]] = [
    ("ingest", room.ItemsWritten(received=3, created=1, updated=1, unchanged=0, rejected=1),
     {'version': 2, 'ingest': {'received': 3, 'created': 1, 'updated': 1, 'unchanged': 0, 'rejected': 1}}),
    ("entity", room.EntityWritten(created=1, updated=0, rejected=0),
     {'version': 2, 'entity': {'created': 1, 'updated': 0, 'rejected': 0}}),
    ("document", room.DocumentWritten.of({"document": "d1", "sha256": "ab" * 32, "changed": True, "pieces": 3, "created": 2, "updated": 1, "unchanged": 0, "removed": 1, "rejected": []}),
     {'version': 2, 'document': {'document': 'd1', 'sha256': 'abababababababababababababababababababababababababababababababab', 'changed': True, 'pieces': 3, 'created': 2, 'updated': 1, 'unchanged': 0, 'removed': 1}}),
    ("entity_merge", room.EntityMerged(changed=True, entity="e1", into="e2"),
     {'version': 2, 'merge': {'changed': True, 'entity': 'e1', 'into': 'e2'}}),
    ("entity", room.EntityTombstoned(changed=True, hidden_items=4),
     {'version': 2, 'tombstone': {'changed': True, 'hidden_items': 4}}),
    ("keys_list", room.KeysListed(listed=2),
     {'version': 2, 'keys': {'listed': 2}}),
    ("keys_create", room.KeyCreated(created="0123456789abcdef"),
     {'version': 2, 'keys': {'created': '0123456789abcdef'}}),
    ("key_revoke", room.KeyRevoked(revoked="0123456789abcdef", changed=True, sessions_ended=1),
     {'version': 2, 'keys': {'revoked': '0123456789abcdef', 'changed': True, 'sessions_ended': 1}}),
    ("audit_list", room.AuditListed(listed=5),
     {'version': 2, 'audit_read': {'listed': 5}}),
    ("audit_trace", room.TraceRead(trace="tr_1"),
     {'version': 2, 'audit_read': {'trace': 'tr_1'}}),
    ("audit_export", room.AuditExported(format="jsonl"),
     {'version': 2, 'audit_export': {'format': 'jsonl'}}),
    ("audit_subject", room.AuditExported(format="csv", report="subject"),
     {'version': 2, 'audit_export': {'format': 'csv', 'report': 'subject'}}),
    ("audit_evidence", room.EvidenceExported.of(since="2026-01-01T00:00:00Z", until="2026-02-01T00:00:00Z", rows=12),
     {'version': 2, 'audit_export': {'format': 'evidence', 'since': '2026-01-01T00:00:00Z', 'until': '2026-02-01T00:00:00Z', 'rows': '12'}}),
    ("audit_verify", room.ChainVerified(ok=True, rows=7, checkpointed=None, not_yet_checkpointed=None),
     {'version': 2, 'audit_verify': {'ok': True, 'rows': 7, 'checkpointed': None, 'not_yet_checkpointed': None}}),
    ("audit_page_verify", room.ChainVerified(ok=False, rows=7, checkpointed=5, not_yet_checkpointed=2),
     {'version': 2, 'audit_verify': {'ok': False, 'rows': 7, 'checkpointed': 5, 'not_yet_checkpointed': 2}}),
    ("audit_sign_in", room.SessionOpened(key_id="0123456789abcdef", session="s_ref", expires_at="2026-01-01T00:30:00+00:00"),
     {'version': 2, 'audit_session': {'key_id': '0123456789abcdef', 'session': 's_ref', 'expires_at': '2026-01-01T00:30:00+00:00'}}),
    ("audit_sign_out", room.SessionEnded.of("s_ref"),
     {'version': 2, 'audit_session': {'ended': 'signed_out', 'session': 's_ref'}}),
    ("audit_sign_out", room.SessionEnded.of(None),
     {'version': 2, 'audit_session': {'ended': 'already'}}),
    ("usage", (room.ReportedOn(about="tr_1"), room.UsageReported(used=("a",), used_about=("e1",), not_returned_by_that_call=1)),
     {'version': 2, 'about': 'tr_1', 'used': ['a'], 'used_about': ['e1'], 'not_returned_by_that_call': 1}),
    ("usage", (room.ReportedOn(about="tr_1"), room.UsageReported(used=(), used_about=None, not_returned_by_that_call=0)),
     {'version': 2, 'about': 'tr_1', 'used': [], 'not_returned_by_that_call': 0}),
    ("usage", room.ReportedOn(about="tr_1"),
     {'version': 2, 'about': 'tr_1'}),
    ("feedback", (room.ReportedOn(about="tr_1"), room.FeedbackGiven(rating=4, comment=PATH)),
     {'version': 2, 'about': 'tr_1', 'feedback': {'rating': 4, 'comment': {'hmac': 'f6b822d41ddff571d35da8f01baee01b', 'length': 20}}}),
    ("feedback", (room.ReportedOn(about="tr_1"), room.FeedbackGiven(rating="up", comment=None)),
     {'version': 2, 'about': 'tr_1', 'feedback': {'rating': 'up', 'comment': None}}),
    ("policy_reload", room.PolicyReloaded(trigger="http", status="rejected", revision="r1", previous="r1", candidate="r2", errors=("x.rego:3: bad",), ms=12.5),
     {'version': 2, 'policy_reload': {'trigger': 'http', 'status': 'rejected', 'revision': 'r1', 'previous': 'r1', 'candidate': 'r2', 'errors': ['x.rego:3: bad'], 'ms': 12.5}}),
    ("policy_reload", room.PolicyReloaded(trigger="sighup", status="switched", revision="r2", previous="r1", candidate=None, errors=(), ms=1.0004),
     {'version': 2, 'policy_reload': {'trigger': 'sighup', 'status': 'switched', 'revision': 'r2', 'previous': 'r1', 'candidate': None, 'errors': [], 'ms': 1.0}}),
    ("policy_explain", room.PolicyExplained(actor="alice", task="qa", items=2, in_force="r1", candidate=None),
     {'version': 2, 'policy_explain': {'actor': 'alice', 'task': 'qa', 'items': 2, 'in_force': 'r1', 'candidate': None}}),
    ("policy_impact", room.PolicyImpactRun.of(IMPACT_REPORT),
     {'version': 2, 'policy_impact': {'candidate_revision': 'r2', 'replayed': 10, 'flips': 3, 'newly_allowed': 1, 'newly_denied': 2}}),
    ("unknown_route", room.Unrouted(method="GET", path=PATH),
     {'version': 2, 'route': {'method': 'GET', 'path': {'hmac': 'f6b822d41ddff571d35da8f01baee01b', 'length': 20}}}),
    ("mcp", room.Channel(channel="mcp"),
     {'version': 2, 'channel': 'mcp'}),
]
# fmt: on


def _stored(records: room.CallRecord | tuple[room.CallRecord, ...], endpoint: str = "any") -> dict[str, Any]:
    trace = room.TraceBuilder("tr_x", endpoint, utc_now(), key=b"k" * 32)
    for record in records if isinstance(records, tuple) else (records,):
        trace.record(record)
    return trace.freeze(200).lineage


@pytest.mark.parametrize(("endpoint", "records", "expected"), CASES)
def test_a_record_leaves_the_row_the_assignments_left(endpoint: str, records: Any, expected: dict[str, Any]) -> None:
    stored = _stored(records, endpoint)
    assert json.dumps(stored) == json.dumps(expected)  # the same keys, values, nulls and order
    assert json.dumps(_stored(records)) == json.dumps(expected)  # on a call of no kind of its own too
    read = room.read_lineage(endpoint, stored)
    assert type(read) is room.kind_of(endpoint)
    assert read.to_json() == stored


def test_each_record_is_its_part_in_its_kind() -> None:
    """A record stored under a key is the type of that key's field in every kind that has it, so a row
    read back holds the records its call left."""
    kinds: set[type[room.Lineage]] = {*room.KINDS.values(), room.Lineage}
    for kind in kinds:
        for name, info in kind.model_fields.items():
            for part in getattr(info.annotation, "__args__", (info.annotation,)):
                if isinstance(part, type) and issubclass(part, room.CallRecord) and hasattr(part, "key"):
                    assert part.key == name, (kind.__name__, name, part.__name__)


def test_every_traced_endpoint_has_its_kind() -> None:
    """The kind of a call says which decision its row carries: an endpoint served with no kind would
    write rows that decide `none`, whatever it reads or writes. Only GET /v1/policy has none of its own."""
    served = {op.serve.__name__.removesuffix("_route") for op in OPERATIONS.values() if hasattr(op.serve, REQUIRED_ROLE)}
    assert served - set(room.KINDS) == {"policy"}
    assert {"unknown_route", "method_not_allowed"} <= set(room.KINDS)  # the router's refusals (gateway.http.app)


@pytest.mark.parametrize(
    ("endpoint", "records", "began", "decision"),
    [
        ("ingest", (), False, "none"),  # refused before its handler ran (credential, role, admission)
        ("ingest", (), True, "write"),  # a write whose handler ran, even one that then failed with a 4xx
        ("keys_list", (), True, "read"),
        ("audit_page", (), True, "read"),
        ("policy_explain", (), True, "none"),
        ("mcp", (), True, "none"),
        ("usage", (), True, "none"),  # no such trace of the caller's: nothing was written
        ("usage", (room.ReportedOn(about="tr_1"),), True, "write"),
        ("retrieve", (), True, "none"),  # refused before the policy decided
        (
            "retrieve",
            (room.Decided(decision=room.DecisionRecord(allow=False, reasons=["r"], ms=1.0), constraints=None),),
            True,
            "deny",
        ),
        ("retrieve", (room.Decided(decision=room.DecisionRecord(allow=True, ms=1.0), constraints={}),), True, "allow"),
    ],
)
def test_the_kind_says_the_rows_decision(endpoint: str, records: tuple[room.CallRecord, ...], began: bool, decision: str) -> None:
    trace = room.TraceBuilder("tr_x", endpoint, utc_now())
    if began:
        trace.begin()
    for record in records:
        trace.record(record)
    assert trace.decision == trace.freeze(200).decision == decision


def test_a_failure_says_error_but_what_it_keeps() -> None:
    allowed = room.Decided(decision=room.DecisionRecord(allow=True, ms=1.0), constraints={})
    for endpoint, records, unless, decision in [
        ("retrieve", (allowed,), ("deny", "read", "write"), "error"),  # a 5xx after an allow
        ("ingest", (), ("deny", "read", "write"), "write"),  # a 5xx of a write keeps it
        ("audit_page", (), ("deny", "write"), "error"),  # a page's 5xx
        ("ingest", (), (), "error"),  # an unexpected failure
    ]:
        trace = room.TraceBuilder("tr_x", endpoint, utc_now())
        trace.begin()
        for record in records:
            trace.record(record)
        trace.failed(unless=unless)
        assert trace.freeze(500).decision == decision, endpoint


def test_no_path_text_enters_the_row() -> None:
    assert "nowhere" not in json.dumps(_stored(room.Unrouted(method="GET", path=PATH), "unknown_route"))


def test_admission_left_again_as_the_call_is_admitted_and_settled() -> None:
    trace = room.TraceBuilder("tr_x", "any", utc_now())
    admission = room.AdmissionRecord(cost=4)
    trace.record(admission)
    refused = trace.freeze(429).lineage
    assert json.dumps(refused) == json.dumps({"version": 2, "admission": {"cost": 4}})
    work = room.WorkRecord.model_validate({"cpu_ms": 3.0, "sql_steps": 10, "embedded_chars": 0, "analysed_bytes": 0})
    trace.record(admission.model_copy(update={"price": 6, "queued_ms": 1.5, "used": 2.25, "work": work, "gave_way_ms": 0.5}))
    assert admission.model_dump(exclude_unset=True) == {"cost": 4}  # what was left is never changed
    expected = {
        "version": 2,
        "admission": {
            "cost": 4,
            "price": 6,
            "queued_ms": 1.5,
            "used": 2.25,
            "work": {"cpu_ms": 3.0, "sql_steps": 10, "embedded_chars": 0, "analysed_bytes": 0},
            "gave_way_ms": 0.5,
        },
    }
    assert json.dumps(trace.freeze(200).lineage) == json.dumps(expected)


# Rows of older gateways, with keys no part knows, each read as its endpoint's kind.
OLDER: dict[str, dict[str, Any]] = {
    "keys_list": {"keys": {"listed": 2, "by": "an older gateway"}},
    "audit_export": {"audit_export": {"format": "jsonl", "note": 1}},
    "audit_sign_out": {"audit_session": {"ended": "already", "why": "gone"}},
    "policy_reload": {"policy_reload": {"trigger": "poll", "status": "switched", "revision": "r2", "previous": "r1", "took": 3}},
    "policy_explain": {"policy_explain": {"actor": "a", "extra": [1]}},
    "policy_impact": {"policy_impact": {"candidate_revision": "r2", "replayed": 0, "skipped": 4}},
    "unknown_route": {
        "admission": {"cost": 1, "queued": True, "work": {"cpu_ms": 1.0, "gpu_ms": 2.0}},
        "route": {"method": "GET", "path": {"hmac": "ab" * 16, "length": 3}, "query": None},
        "something_new": {"a": 1},
    },
}


@pytest.mark.parametrize("endpoint", OLDER)
def test_an_older_row_with_keys_no_part_knows_still_reads(endpoint: str) -> None:
    """Unknown keys of older rows are kept as they were, in the typed parts and at the top."""
    row = {"version": 2, **OLDER[endpoint]}
    lineage = room.read_lineage(endpoint, row)
    assert lineage.to_json() == row
    if isinstance(lineage, room.KeysListCall):
        assert lineage.keys is not None and lineage.keys.listed == 2
    if isinstance(lineage, room.UnroutedCall):
        assert lineage.admission is not None and lineage.admission.work is not None
        assert lineage.route is not None and lineage.route.path is not None and lineage.route.path.length == 3


def test_a_record_takes_every_field_and_no_other() -> None:
    """A record built in code is frozen and takes every field it declares, though it reads older rows
    without them: its stored part holds every key."""
    record = room.FeedbackGiven(rating=4, comment=None)
    with pytest.raises(ValidationError, match="frozen"):
        record.rating = 5  # type: ignore[misc]
    with pytest.raises(ValidationError, match="missing: hidden_items"):
        room.EntityTombstoned(changed=True)
    with pytest.raises(ValidationError, match="extra"):
        room.PolicyExplained(actor="a", task=None, items=0, in_force=None, candidate=None, reason="x")  # type: ignore[call-arg]
    assert room.read_lineage("policy_impact", {"version": 2, "policy_impact": {"replayed": 0}}).to_json() == {
        "version": 2,
        "policy_impact": {"replayed": 0},
    }
