"""GET /v1/audit/evidence: the caller's tenant's evidence pack of a period as one zip, for auditors
only, that verifies offline (`gateway audit verify-pack`) and holds no item or query text."""

from __future__ import annotations

import io
import json
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from gateway.cli import main
from gateway.http.routes.evidence import EVIDENCE_COST
from tests.audit.test_audit_checkpoints import TENANT, Signed, signed  # noqa: F401 - the fixture
from tests.gateway.fixtures import SALES_TASK, memory

__all__ = ["signed"]

ITEM_TEXT = "okapiwidget renewal margin zqxitemsecretzqx"
QUERY_TEXT = "okapiwidget zqxquerysecretzqx"


def period(hours: float = 1) -> dict[str, str]:
    """The last `hours`, ending now: a period that has ended, so its pack can show its end."""
    now = datetime.now(timezone.utc)
    return {"since": (now - timedelta(hours=hours)).isoformat(), "until": now.isoformat()}


def evidence(signed: Signed, params: dict[str, str], tenant: str = TENANT, roles: tuple[str, ...] = ("auditor",)) -> Any:
    key = signed.gateway.key(f"auditor-{tenant}-{'-'.join(roles)}", tenant=tenant, roles=roles)
    return signed.gateway.client.get("/v1/audit/evidence", params=params, headers=signed.gateway.auth(key))


def unpack(content: bytes, into: Path) -> Path:
    with zipfile.ZipFile(io.BytesIO(content)) as archive:
        archive.extractall(into)
    return into


def verify_pack(pack: Path, key: Path) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(main, ["audit", "verify-pack", str(pack), "--public-key", str(key)])
    return result.exit_code, json.loads(result.stdout)


def trace_ids(pack: Path) -> set[str]:
    names = ("rows_before.jsonl", "rows.jsonl", "rows_after.jsonl")
    return {json.loads(line)["trace_id"] for name in names for line in (pack / name).read_text().splitlines()}


def test_an_auditor_gets_the_pack_of_its_own_tenant_only(signed: Signed, tmp_path: Path) -> None:
    response = evidence(signed, period())
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/zip"
    acme = unpack(response.content, tmp_path / "acme")
    code, report = verify_pack(acme, signed.keys["public"])
    assert code == 0, report["problems"]
    assert report["tenant"] == TENANT and report["rows"]["in_period"] == 12 and report["tied"] == 12
    # The call is audited as any read, admitted at the pack's cost.
    row = signed.gateway.trace(response.headers["x-trace-id"])
    assert row["endpoint"] == "audit_evidence" and row["lineage"]["admission"]["cost"] == EVIDENCE_COST
    assert row["lineage"]["audit_export"]["format"] == "evidence"

    other = evidence(signed, period(), tenant="globex")
    assert other.status_code == 200, other.text
    globex = unpack(other.content, tmp_path / "globex")
    code, report = verify_pack(globex, signed.keys["public"])
    assert code == 0 and report["tenant"] == "globex" and report["rows"]["in_period"] == 3, report["problems"]
    mine = trace_ids(acme)
    assert mine and trace_ids(globex) and not mine & trace_ids(globex)
    everything = b"".join(p.read_bytes() for p in globex.rglob("*") if p.is_file())
    assert not [t for t in mine if t.encode() in everything]
    assert b'"tenant": "acme"' not in everything and b'"chain": "acme"' not in everything


def test_only_an_auditor_with_a_readable_period(signed: Signed) -> None:
    assert evidence(signed, period(), roles=("agent",)).status_code == 403
    for name in ("since", "until"):
        bad = {**period(), name: "2026-11-30T00:00:00"}  # no offset
        response = evidence(signed, bad)
        assert response.status_code == 400 and response.json()["error"]["message"].startswith(f"{name}:"), response.text
        missing = {k: v for k, v in period().items() if k != name}
        response = evidence(signed, missing)
        assert response.status_code == 400 and response.json()["error"]["message"].startswith(f"{name}:"), response.text
    backwards = {"since": period()["until"], "until": period()["since"]}
    assert evidence(signed, backwards).json()["error"]["message"].startswith("until:")
    assert evidence(signed, {**period(), "tenant": "globex"}).json()["error"]["message"].startswith("tenant:")


def test_an_empty_period_is_a_valid_empty_pack(signed: Signed, tmp_path: Path) -> None:
    now = datetime.now(timezone.utc)
    response = evidence(
        signed, {"since": (now - timedelta(days=30)).isoformat(), "until": (now - timedelta(days=29)).isoformat()}
    )
    assert response.status_code == 200, response.text
    pack = unpack(response.content, tmp_path / "pack")
    assert (pack / "rows.jsonl").read_text() == ""
    code, report = verify_pack(pack, signed.keys["public"])
    assert code == 0 and report["rows"]["in_period"] == 0, report["problems"]


def test_no_item_or_query_text_is_in_the_pack(signed: Signed, tmp_path: Path) -> None:
    signed.gateway.ingest(TENANT, [memory("mem_planted", ITEM_TEXT)])
    alice = signed.gateway.key("alice", groups=("sales",), clearance="confidential")
    answer = signed.gateway.retrieve(alice, {"task": SALES_TASK, "query": QUERY_TEXT})
    assert answer.status_code == 200 and "mem_planted" in answer.text and "zqxitemsecretzqx" in answer.text
    signed.checkpointer.checkpoint(every_chain=True)
    response = evidence(signed, period())
    assert response.status_code == 200, response.text
    pack = unpack(response.content, tmp_path / "pack")
    code, report = verify_pack(pack, signed.keys["public"])
    assert code == 0, report["problems"]
    files = {p: p.read_bytes() for p in pack.rglob("*") if p.is_file()}
    assert b"mem_planted" in files[pack / "rows.jsonl"]  # the call that returned the item is in the pack, by id
    for word in (b"zqxitemsecretzqx", b"zqxquerysecretzqx", b"okapiwidget"):
        assert [p.name for p, content in files.items() if word in content] == [], word


def test_an_edited_rollup_is_a_409_not_a_pack_that_disagrees_with_its_rows(signed: Signed) -> None:
    from sqlalchemy import update

    from audit.chain import audit_rollup, chain_of
    from core import store as db

    signed.write(2, age=timedelta(hours=3))
    with db.writer(signed.gateway.store).begin() as conn:
        conn.execute(update(audit_rollup).where(audit_rollup.c.chain == chain_of(TENANT)).values(n=audit_rollup.c.n + 3))
    response = evidence(signed, period(hours=24))
    assert response.status_code == 409, response.text
    assert "rollup does not agree with the period's rows" in response.json()["error"]["message"]
