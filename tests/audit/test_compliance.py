"""The compliance overview and the subject report over the API: the figures are the trail's own
counts (checked against the trace list they link to), the report follows merges, both stay in the
auditor's tenant, refuse non-auditors, and hold no item text or personal value; the rollup and the
facet index they read are held to the rows by verify."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from sqlalchemy import insert, update

from audit.chain import audit_facet, audit_rollup, audit_trace
from audit.review import item_table
from core import store as db
from tests.conftest import Gateway
from tests.gateway.fixtures import SALES_TASK, memory

SECRET_QUERY = "zanzibar pricing for the merger"
SECRET_TEXT = "quetzalcoatl"  # in every item's text: must never reach a page or an answer
EMAIL = "dana.scully@fbi.example"


RESEARCH = {"type": "research"}
COMPLIANCE = {"type": "compliance_review", "scope": "sales"}


def seed(gateway: Gateway) -> dict[str, Any]:
    """Alice asks about Dana and about her older record (merged into Dana afterwards) and reads a
    research guide with an email in it (masked); a privacy-cleared reader has the email revealed;
    a compliance reviewer reads a restricted note; one call is denied; another tenant calls too."""
    gateway.ingest(
        "acme",
        [
            {"id": "ent_dana", "kind": "entity", "entity_type": "contact", "name": "Dana", "acl": ["*"]},
            {"id": "ent_dana_old", "kind": "entity", "entity_type": "contact", "name": "D. Scully", "acl": ["*"]},
            memory("mem_dana", f"{SECRET_TEXT} zanzibar note", entity="ent_dana", attached_to="ent_dana"),
            memory("mem_dana_old", f"{SECRET_TEXT} zanzibar older note", entity="ent_dana_old", attached_to="ent_dana_old"),
            memory("mem_restricted", f"{SECRET_TEXT} zanzibar restricted pricing", sensitivity="restricted"),
            {
                "id": "doc_guide",
                "kind": "document",
                "text": f"{SECRET_TEXT} refund escalation guide: write to {EMAIL}.",
                "acl": ["*"],
                "scope": ["research"],
            },
        ],
    )
    gateway.ingest("globex", [{"id": "ent_dana", "kind": "entity", "entity_type": "contact", "name": "Dana G", "acl": ["*"]}])
    gateway.ingest("globex", [memory("mem_g", f"{SECRET_TEXT} zanzibar globex note", entity="ent_dana", attached_to="ent_dana")])
    alice = gateway.key("alice", groups=("sales",), clearance="confidential")
    cleared = gateway.key("carol", groups=("privacy-cleared",), clearance="confidential")
    boss = gateway.key("boss", groups=("compliance",), clearance="restricted")

    def call(key: str, body: dict[str, Any]) -> str:
        answer = gateway.retrieve(key, body)
        assert answer.status_code == 200, answer.text
        return str(answer.json()["trace_id"])

    calls = {
        "dana": call(alice, {"task": SALES_TASK, "query": SECRET_QUERY, "entities": [{"id": "ent_dana"}]}),
        "dana_old": call(alice, {"task": SALES_TASK, "query": SECRET_QUERY, "entities": [{"id": "ent_dana_old"}]}),
        "masked": call(alice, {"task": RESEARCH, "query": "refund escalation guide"}),
        "revealed": call(cleared, {"task": RESEARCH, "query": "refund escalation guide"}),
        "restricted": call(boss, {"task": COMPLIANCE, "query": "zanzibar restricted pricing"}),
    }
    assert gateway.retrieve(alice, {"task": {"type": "no_such_task"}, "query": "x"}).status_code == 403
    merged = gateway.client.post(
        "/v1/entities/ent_dana_old/merge",
        json={"into": "ent_dana"},
        headers=gateway.auth(gateway.key("writer", roles=("ingest",))),
    )
    assert merged.status_code == 200, merged.text
    used = gateway.client.post(f"/v1/traces/{calls['dana']}/usage", json={"used": ["mem_dana"]}, headers=gateway.auth(alice))
    assert used.status_code == 200, used.text
    mallory = gateway.key("mallory", tenant="globex", groups=("sales",), clearance="confidential")
    assert (
        gateway.retrieve(mallory, {"task": SALES_TASK, "query": SECRET_QUERY, "entities": [{"id": "ent_dana"}]}).status_code
        == 200
    )
    return {"alice": alice, "calls": calls}


def auditor(gateway: Gateway, tenant: str = "acme") -> dict[str, str]:
    return gateway.auth(gateway.key(f"auditor-{tenant}", tenant=tenant, roles=("auditor",)))


def get(gateway: Gateway, path: str, tenant: str = "acme", **params: Any) -> Any:
    return gateway.client.get(path, params=params, headers=auditor(gateway, tenant))


def listed(gateway: Gateway, **filters: str) -> list[dict[str, Any]]:
    return get(gateway, "/v1/audit/traces", limit=200, **filters).json()["traces"]


def test_the_overview_counts_what_the_trail_holds_and_each_figure_names_its_traces(gateway: Gateway) -> None:
    seeded = seed(gateway)
    answer = get(gateway, "/v1/audit/overview", period="24h")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["calls"]["by_outcome"]["allow"] == 5 and body["calls"]["by_outcome"]["deny"] == 1
    assert body["calls"]["total"] == len(listed(gateway, outcome="allow")) + len(listed(gateway, outcome="deny")) == 6
    assert sum(bar["by_outcome"]["allow"] for bar in body["timeline"]) == 5
    assert body["denials"]["by_task"] == [{"task": "no_such_task", "calls": 1}]
    assert body["denials"]["by_reason"]
    for entry in body["denials"]["by_reason"]:
        assert len(listed(gateway, outcome="deny", reason=entry["reason"])) == entry["calls"]
    assert body["returned"]["by_sensitivity"]["restricted"] == 1
    assert body["returned"]["restricted_by_actor"] == [{"actor": "user:boss", "items": 1}]
    assert [t["actor"] for t in listed(gateway, returned="restricted")] == ["user:boss"]
    masking = body["masking"]
    assert masking["placeholders_by_type"]["EMAIL_ADDRESS"] == 1 and masking["items_masked"] == 1
    assert [t["trace_id"] for t in listed(gateway, masked="EMAIL_ADDRESS")] == [seeded["calls"]["masked"]]
    assert {"type": "EMAIL_ADDRESS", "calls": 1} in masking["reveals_by_type"]
    assert masking["reveals_by_actor"] == [{"actor": "user:carol", "calls": 1}]
    assert [t["trace_id"] for t in listed(gateway, revealed="any", actor="user:carol")] == [seeded["calls"]["revealed"]]
    (revision,) = body["revisions"]
    assert revision["revision"].startswith("sha256:") and revision["denial_rate"] == round(1 / 6, 4)
    assert revision["before"] is None and len(listed(gateway, revision=revision["revision"], outcome="deny")) == 1
    assert body["chain"]["rows"] >= 8 and body["endpoints"]["retrieve"] == 6
    text = answer.text
    assert SECRET_TEXT not in text and SECRET_QUERY not in text and EMAIL not in text


def test_the_overview_of_another_tenant_and_of_a_non_auditor(gateway: Gateway) -> None:
    seeded = seed(gateway)
    theirs = get(gateway, "/v1/audit/overview", tenant="globex", period="24h").json()
    assert theirs["calls"]["by_outcome"]["allow"] == 1 and theirs["returned"]["restricted_by_actor"] == []
    assert "user:alice" not in json.dumps(theirs) and "user:boss" not in json.dumps(theirs)
    for path in ("/v1/audit/overview", "/v1/audit/subjects/ent_dana"):
        assert gateway.client.get(path, headers=gateway.auth(seeded["alice"])).status_code == 403
        assert gateway.client.get(path).status_code == 401


def test_bad_periods_are_refused_naming_the_field(gateway: Gateway) -> None:
    for params, field in (
        ({"period": "1y"}, "period"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-12-01T00:00:00Z"}, "since"),
        ({"since": "2026-12-01T00:00:00Z", "until": "2026-11-01T00:00:00Z"}, "until"),
        ({"period": "7d", "since": "2026-12-01T00:00:00Z"}, "since"),
        ({"bogus": "1"}, "bogus"),
    ):
        answer = get(gateway, "/v1/audit/overview", **params)
        assert answer.status_code == 400 and answer.json()["error"]["message"].startswith(field + ":"), (params, answer.text)


def test_a_custom_period_counts_its_edges_from_the_rows(gateway: Gateway) -> None:
    seed(gateway)
    whole = get(gateway, "/v1/audit/overview", period="24h").json()
    rows = listed(gateway, outcome="allow")
    assert len(rows) == whole["calls"]["by_outcome"]["allow"] == 5
    first, last = min(r["created_at"] for r in rows), max(r["created_at"] for r in rows)
    narrow = get(gateway, "/v1/audit/overview", since=first, until=last).json()  # `until` excludes the last
    assert narrow["calls"]["by_outcome"]["allow"] == whole["calls"]["by_outcome"]["allow"] - 1


def test_the_subject_report_follows_the_merge_and_names_each_stage(gateway: Gateway) -> None:
    seeded = seed(gateway)
    answer = get(gateway, "/v1/audit/subjects/ent_dana_old")
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert report["entities"] == ["ent_dana", "ent_dana_old"]
    by_id = {c["trace_id"]: c for c in report["calls"]}
    calls = seeded["calls"]
    assert {calls["dana"], calls["dana_old"]} <= set(by_id) and calls["masked"] not in by_id
    first = by_id[calls["dana"]]
    assert first["reached"] == "returned" and first["stages"][:2] == ["asked", "retrieved"] and first["actor"] == "user:alice"
    assert first["items"]["returned"] == ["mem_dana"] and by_id[calls["dana_old"]]["items"]["returned"] == ["mem_dana_old"]
    usage = [c for c in report["calls"] if c["endpoint"] == "usage"]
    assert len(usage) == 1 and usage[0]["reached"] == "used" and usage[0]["about"] == calls["dana"]
    assert usage[0]["items"]["used"] == ["mem_dana"]
    assert get(gateway, "/v1/audit/subjects/ent_dana").json()["calls"] == report["calls"]
    assert {t["trace_id"] for t in listed(gateway, entity="ent_dana")} == {c["trace_id"] for c in report["calls"]} - {
        calls["dana_old"]
    }
    exported = get(gateway, "/v1/audit/subjects/ent_dana", format="csv")
    assert exported.status_code == 200 and exported.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert [r["trace_id"] for r in rows] == [c["trace_id"] for c in report["calls"]]
    paged = get(gateway, "/v1/audit/subjects/ent_dana", limit=1).json()
    assert len(paged["calls"]) <= 1 and paged["cursor"]
    for text in (answer.text, exported.text):
        assert SECRET_TEXT not in text and SECRET_QUERY not in text and EMAIL not in text


def test_the_subject_report_stays_in_the_tenant(gateway: Gateway) -> None:
    seed(gateway)
    theirs = get(gateway, "/v1/audit/subjects/ent_dana", tenant="globex").json()
    assert all(c["actor"] == "user:mallory" for c in theirs["calls"]) and theirs["calls"]
    assert get(gateway, "/v1/audit/subjects/ent_nobody").json()["calls"] == []
    assert get(gateway, "/v1/audit/subjects/ent_dana", format="xml").status_code == 400
    assert get(gateway, "/v1/audit/subjects/ent_dana", cursor="nope").status_code == 400


def test_verify_names_an_edited_rollup_and_a_planted_facet(gateway: Gateway) -> None:
    seed(gateway)
    assert get(gateway, "/v1/audit/verify").json()["ok"] is True
    with db.writer(gateway.store).begin() as conn:
        conn.execute(
            update(audit_rollup).where(audit_rollup.c.chain == "acme", audit_rollup.c.measure == "returned").values(n=99)
        )
    broken = get(gateway, "/v1/audit/verify").json()
    assert broken["ok"] is False and "rollup edited" in broken["first_broken"]["reason"]
    with db.writer(gateway.store).begin() as conn:
        conn.execute(update(audit_rollup).where(audit_rollup.c.chain == "acme", audit_rollup.c.n == 99).values(n=1))
    # Put bob's call in the subject report: the report reads each row back and leaves it out; verify names it.
    with db.writer(gateway.store).begin() as conn:
        denial = conn.execute(audit_trace.select().where(audit_trace.c.decision == "deny", audit_trace.c.chain == "acme")).first()
        assert denial is not None
        conn.execute(insert(audit_facet).values(trace_pk=denial.pk, facet="subject:returned", value="ent_dana"))
    report = get(gateway, "/v1/audit/subjects/ent_dana").json()
    assert denial.trace_id not in {c["trace_id"] for c in report["calls"]}
    assert denial.trace_id not in {t["trace_id"] for t in listed(gateway, entity="ent_dana")}
    broken = get(gateway, "/v1/audit/verify").json()
    assert broken["ok"] is False and "facet index" in broken["first_broken"]["reason"]


def test_an_envelope_unmerged_in_the_database_keeps_its_calls_in_the_report(gateway: Gateway) -> None:
    """Someone with write access to the database clears ent_dana_old's merged_into, so the envelopes
    no longer join it to Dana: the chain's own merge row still does. A merge index row they add for
    another entity joins nothing, because the report reads the row's hashed lineage."""
    seeded = seed(gateway)
    whole = get(gateway, "/v1/audit/subjects/ent_dana").json()
    assert whole["entities"] == ["ent_dana", "ent_dana_old"]
    with db.writer(gateway.store).begin() as conn:
        conn.execute(
            update(item_table).where(item_table.c.tenant == "acme", item_table.c.id == "ent_dana_old").values(merged_into=None)
        )
        merge_row = conn.execute(
            audit_trace.select().where(audit_trace.c.chain == "acme", audit_trace.c.endpoint == "entity_merge")
        ).first()
        assert merge_row is not None and merge_row.lineage["merge"] == {
            "changed": 1,
            "entity": "ent_dana_old",
            "into": "ent_dana",
        }
        denial = conn.execute(audit_trace.select().where(audit_trace.c.decision == "deny", audit_trace.c.chain == "acme")).first()
        assert denial is not None
        conn.execute(insert(audit_facet).values(trace_pk=denial.pk, facet="merged_into", value="ent_dana"))
        conn.execute(insert(audit_facet).values(trace_pk=denial.pk, facet="merged", value="ent_restricted_person"))
    after = get(gateway, "/v1/audit/subjects/ent_dana").json()
    assert after["entities"] == ["ent_dana", "ent_dana_old"] and after["calls"] == whole["calls"]
    assert seeded["calls"]["dana_old"] in {c["trace_id"] for c in after["calls"]}
    assert get(gateway, "/v1/audit/subjects/ent_restricted_person").json()["entities"] == ["ent_restricted_person"]
    broken = get(gateway, "/v1/audit/verify").json()
    assert broken["ok"] is False and "facet index" in broken["first_broken"]["reason"]


def test_the_subject_report_pages_every_call_once_when_another_tenant_shares_the_id(gateway: Gateway) -> None:
    """The report walks the facet index newest first and cuts each walk at a page; another tenant's
    calls about an entity of the same id lie in the same index ranges (most of them here) and must
    neither fill a page nor hide a call. Paging three at a time lists each of acme's calls once,
    newest first, asked, retrieved or used."""
    from collections import Counter
    from datetime import datetime, timedelta, timezone

    from audit.chain import Rollup, add_to_rollup, append

    start = datetime.now(timezone.utc) - timedelta(hours=1)
    ours: list[str] = []
    with db.writer(gateway.store).begin() as conn:
        rollup: Rollup = Counter()
        for n in range(40):
            tenant = "acme" if n % 5 == 0 or n in (21, 22) else "globex"
            if n % 3 == 0:
                lineage: dict[str, Any] = {"version": 2, "subjects": ["ent_shared"]}
            elif n % 3 == 1:
                lineage = {"version": 2, "packed": ["mem_s"], "named_entities": {"ent_shared": ["mem_s"]}}
            else:
                lineage = {"version": 2, "used": ["mem_s"], "used_about": ["ent_shared"]}
            values: dict[str, Any] = {
                "trace_id": f"tr_{n:024x}",
                "created_at": start + timedelta(seconds=n),
                "tenant": tenant,
                "actor": "user:x",
                "endpoint": "usage" if n % 3 == 2 else "retrieve",
                "status_code": 200,
                "decision": "allow",
                "policy_engine": "regorus",
                "policy_revision": "rev",
                "error_code": None,
                "lineage": lineage,
            }
            append(conn, values, seal_key=None, rollup=rollup)
            if tenant == "acme":
                ours.append(values["trace_id"])
        add_to_rollup(conn, rollup)
    seen: list[str] = []
    cursor = ""
    for _ in range(20):
        page = get(gateway, "/v1/audit/subjects/ent_shared", limit=3, cursor=cursor).json()
        assert len(page["calls"]) <= 3
        seen += [c["trace_id"] for c in page["calls"]]
        cursor = page["cursor"] or ""
        if not cursor:
            break
    assert seen == list(reversed(ours))


def test_the_overview_from_the_rollup_equals_the_overview_recounted_from_the_rows(gateway: Gateway) -> None:
    """Over three days of calls (denials with reasons, restricted and masked returns, reveals, two
    revisions), every period, whole hours or ragged, gives from the rollup exactly what the rows
    give when each is tallied again: the figures a pack carries and verify-pack recomputes."""
    import random
    from collections import Counter
    from datetime import datetime, timedelta, timezone

    from audit.chain import Rollup, add_to_rollup, append
    from audit.review import figures, figures_of
    from core.audit_facts import tally_rows

    rng = random.Random(33)
    end = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(days=3)
    written = []
    with db.writer(gateway.store).begin() as conn:
        rollup: Rollup = Counter()
        for n in range(400):
            deny = rng.random() < 0.2
            lineage: dict[str, Any] = {
                "version": 2,
                "decision": {"allow": not deny, "reasons": ["task_not_granted"] if deny else []},
            }
            if not deny:
                kinds = rng.sample(["public", "internal", "restricted"], 2)
                lineage |= {
                    "packed": ["mem_a"],
                    "pii": {"masked": {"EMAIL_ADDRESS": rng.randint(0, 2)}},
                    "returned": {
                        "sensitivity": {k: 1 for k in kinds},
                        "masked_items": 1,
                        "revealed": ["PERSON"] if n % 7 == 0 else [],
                    },
                }
            values: dict[str, Any] = {
                "trace_id": f"tr_{n:024x}",
                "created_at": start + timedelta(seconds=rng.uniform(0, 3 * 86400)),
                "tenant": "acme",
                "actor": f"user:p{rng.randint(0, 5)}",
                "endpoint": "retrieve",
                "status_code": 403 if deny else rng.choice((200, 200, 200, 429, 500)),
                "decision": "deny" if deny else "allow",
                "policy_engine": "regorus",
                "policy_revision": "rev-1" if n < 200 else "rev-2",
                "error_code": None,
                "lineage": lineage,
            }
            append(conn, values, seal_key=None, rollup=rollup)
            written.append(values)
        add_to_rollup(conn, rollup)
    minute = timedelta(minutes=1)
    for since, until in (
        (start, end),
        (start - timedelta(days=1), end + timedelta(hours=2)),
        (start + 17 * minute, end - 43 * minute),
        (start + timedelta(hours=30, minutes=5), start + timedelta(hours=30, minutes=50)),
    ):
        rows = [v for v in written if since <= v["created_at"] < until]
        assert figures(gateway.store, "acme", since, until) == figures_of(tally_rows(rows), since, until)
