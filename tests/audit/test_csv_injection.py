"""CSV injection (OWASP): no cell of any CSV the gateway writes begins with a character that makes a
spreadsheet read a formula. Ids that may start with `@` or `-` are ingested through the API; values
the API would refuse (`=HYPERLINK(...)`, `+1`, a tab) are planted in the audit rows, as a hostile
database or an older release could have left them. Every CSV export is read back: the audit
export, the subject report over the API and from the audit pages."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

from sqlalchemy import select, update

from audit.chain import audit_trace
from core import store as db
from core.csv_cells import FORMULA_STARTS, cell, csv_line, joined
from tests.audit.test_compliance import get, seed
from tests.conftest import Gateway
from tests.gateway.fixtures import SALES_TASK, memory
from tests.gateway.http.test_audit_page import signed_in

HYPERLINK = '=HYPERLINK("http://x")'
HOSTILE = (HYPERLINK, "@SUM(1)", "-2+3", "+1", "\tx", "\r=1")
API_IDS = ("@sum", "-2")  # item ids the API takes (api/writes.py ID) that start with a formula character


def test_a_cell_is_neutralised_unless_it_is_a_number_by_construction() -> None:
    for text in (*HOSTILE, *API_IDS, "-5", "=", "@"):
        assert cell(text) == "'" + text
    for number in (-5, -2.5, Decimal("-1.5"), 0, 200, True):
        assert cell(number) == number  # written as the number it is, sign included
    assert cell(None) == "" and cell("mem_1") == "mem_1" and cell("'quoted") == "'quoted"
    assert joined(["mem_1", "@sum", "-2"]) == "mem_1;'@sum;'-2"
    (row,) = csv.reader(io.StringIO(csv_line(["=1+1", -3, None, "a,b"])))
    assert row == ["'=1+1", "-3", "", "a,b"]


def plant(gateway: Gateway) -> None:
    """The API's own hostile ids in a call about ent_dana; then, in every acme row, an actor, a task
    and a policy revision the API would refuse, and a returned item named like a formula."""
    gateway.ingest(
        "acme", [memory(i, f"zanzibar note {n}", entity="ent_dana", attached_to="ent_dana") for n, i in enumerate(API_IDS)]
    )
    alice = gateway.key("alice", groups=("sales",), clearance="confidential")
    answer = gateway.retrieve(alice, {"task": SALES_TASK, "query": "zanzibar note", "entities": [{"id": "ent_dana"}]})
    assert answer.status_code == 200, answer.text
    assert set(API_IDS) <= {i["id"] for i in answer.json()["items"]}, answer.text
    with db.writer(gateway.store).begin() as conn:
        rows = conn.execute(select(audit_trace.c.pk, audit_trace.c.lineage).where(audit_trace.c.tenant == "acme")).all()
        for n, (pk, lineage) in enumerate(rows):
            named = lineage.get("named_entities") or {}
            if "ent_dana" in named and lineage.get("packed"):
                lineage = {
                    **lineage,
                    "named_entities": {**named, "ent_dana": [*named["ent_dana"], HYPERLINK]},
                    "packed": [*lineage["packed"], HYPERLINK],
                }
            values = {"actor": HOSTILE[n % len(HOSTILE)], "task_type": "-2+3", "policy_revision": "+1", "lineage": lineage}
            conn.execute(update(audit_trace).where(audit_trace.c.pk == pk).values(**values))


def cells(text: str) -> list[list[str]]:
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert len(rows) > 1, text
    return rows


def assert_neutral(rows: list[list[str]], expected: set[str]) -> None:
    """No cell, nor any `;`-separated part of one, starts a formula; each planted value is there, quoted."""
    found: set[str] = set()
    for row in rows:
        for value in row:
            parts = value.split(";") if not value.startswith("{") else [value]  # the lineage JSON is one value
            for part in parts:
                assert not part.startswith(FORMULA_STARTS), (part, row)
                found.add(part)
    assert {"'" + v for v in expected} <= found, sorted(found)


def test_every_csv_export_neutralises_formula_cells(gateway: Gateway) -> None:
    seed(gateway)
    plant(gateway)
    exported = get(gateway, "/v1/audit/export", format="csv")
    assert exported.status_code == 200, exported.text
    export = cells(exported.text)
    assert_neutral(export, {*HOSTILE, "-2+3", "+1"})
    header = export[0]
    assert {r[header.index("status_code")] for r in export[1:]} <= {"200", "403"}  # numbers stay numbers

    subject = get(gateway, "/v1/audit/subjects/ent_dana", format="csv")
    assert subject.status_code == 200, subject.text
    report = cells(subject.text)
    assert_neutral(report, {*API_IDS, HYPERLINK, "-2+3"})
    returned = report[0].index("returned")
    assert any({"'@sum", "'-2", "'" + HYPERLINK} <= set(r[returned].split(";")) for r in report[1:]), report

    signed_in(gateway)
    page = gateway.client.get("/audit/subjects/ent_dana", params={"format": "csv"})
    assert page.status_code == 200, page.text
    assert cells(page.text) == report
