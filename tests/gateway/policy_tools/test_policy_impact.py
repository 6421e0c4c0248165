"""Policy impact through the HTTP API and the command line: recorded calls replayed against a
candidate find exactly the planted flips and newly allowed items, and nothing of another tenant."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from audit.record import Trace, TraceBuilder
from core.actor import Actor
from core.request import parse_retrieve
from gateway.cli import main
from gateway.pipeline.respond import request_shape
from gateway.policy.bundle import read_bundle
from gateway.policy.decide import request_input
from gateway.policy_tools.impact import replay_input
from gateway.settings import PROJECT_POLICIES
from tests.conftest import Gateway

SALES = {"type": "account_followup", "scope": "sales"}
SUPPORT = {"type": "support_ticket", "scope": "support"}
RESEARCH = {"type": "research"}
ITEMS = [
    {"id": "ent_acct", "kind": "entity", "entity_type": "company", "name": "Acct", "acl": ["*"]},
    {"id": "ent_person", "kind": "entity", "entity_type": "contact", "name": "Pat", "acl": ["*"]},
    {"id": "mem_sales", "kind": "memory", "text": "impactword sales note", "acl": ["*"], "scope": ["sales"]},
    {
        "id": "mem_support",
        "kind": "memory",
        "text": "impactword support note",
        "acl": ["*"],
        "scope": ["support"],
        "entity": "ent_acct",
    },
    {
        "id": "doc_research",
        "kind": "document",
        "document": "d1",
        "section": "s",
        "text": "impactword research",
        "acl": ["*"],
        "scope": ["research"],
    },
]
EDGES = [  # support_ticket reads no edges: the first two are what widening its kinds lets in
    {"from": "ent_acct", "relation": "works_at", "to": "ent_person", "acl": ["*"], "scope": ["support"]},
    {
        "from": "ent_person",
        "relation": "owns",
        "to": "ent_acct",
        "acl": ["*"],
        "scope": ["support"],
        "sensitivity": "confidential",
    },
    {
        "from": "ent_acct",
        "relation": "reports_to",
        "to": "ent_person",
        "acl": ["*"],
        "scope": ["sales"],
    },  # out of scope either way
]


@dataclass
class Planted:
    gateway: Gateway
    admin: str
    sam: list[str]  # the sales actor's account_followup calls (allowed)
    globex: list[str]


def call(gateway: Gateway, key: str, body: dict[str, Any], status: int = 200) -> str:
    response = gateway.retrieve(key, body)
    assert response.status_code == status, response.text
    return str(response.headers["x-trace-id"])


def as_older_row(gateway: Gateway, trace_id: str, actor: str | None = None) -> str:
    """A copy of a recorded call as rows were written before the actor, graph and subjects were kept."""
    row = gateway.trace(trace_id)
    lineage = {k: v for k, v in row["lineage"].items() if k not in ("actor", "subjects")}
    lineage["request"] = {k: v for k, v in lineage["request"].items() if k != "graph"}
    copy = Trace(
        trace_id=trace_id + "_old",
        created_at=datetime.fromisoformat(row["created_at"]).replace(tzinfo=timezone.utc),
        endpoint="retrieve",
        status_code=row["status_code"],
        decision=row["decision"],
        tenant=row["tenant"],
        actor=actor or row["actor"],
        policy_engine=row["policy_engine"],
        policy_revision=row["policy_revision"],
        error_code=row["error_code"],
        lineage=lineage,
    )
    gateway.client.app.state.context.audit.write_sync(copy)  # type: ignore[attr-defined]
    return copy.trace_id


@pytest.fixture(scope="module")
def planted(module_sqlite_gateway: Gateway) -> Planted:
    gateway = module_sqlite_gateway
    gateway.ingest("acme", ITEMS)
    gateway.ingest("globex", ITEMS[:3])
    writer = gateway.auth(gateway.key("writer-acme", roles=("ingest",)))
    assert gateway.client.put("/v1/edges", json=EDGES, headers=writer).json()["rejected"] == []
    sam = gateway.key("sam", groups=("sales",), clearance="confidential")
    sue = gateway.key("sue", groups=("support",), clearance="confidential")
    rex = gateway.key("rex")
    gina = gateway.key("gina", tenant="globex", groups=("sales",), clearance="confidential")
    sams = [
        call(gateway, sam, {"task": SALES, "query": "impactword", "entities": [{"id": "ent_acct"}]}),
        call(gateway, sam, {"task": SALES, "query": "impactword"}),
        call(gateway, sam, {"task": SALES, "query": "impactword", "graph": {"max_depth": 1}}),
    ]
    call(gateway, sam, {"task": SUPPORT, "query": "impactword"}, 403)  # not granted: stays a deny
    for _ in range(2):
        call(gateway, sue, {"task": SUPPORT, "query": "impactword", "entities": [{"id": "ent_acct"}]})
    call(gateway, rex, {"task": RESEARCH, "query": "impactword"})
    sams.append(as_older_row(gateway, sams[0]))  # replayed with sam's key's attributes
    as_older_row(gateway, sams[1], actor="user:ghost")  # no key says who ghost is: unreplayable
    globex = [call(gateway, gina, {"task": SALES, "query": "impactword"}) for _ in range(2)]
    admin = gateway.key("pat", roles=("policy_admin",))
    return Planted(gateway, admin, sams, globex)


def candidate(change: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The shipped policies as an inline candidate, with `change` applied to its config document."""
    bundle = read_bundle(PROJECT_POLICIES)
    config = json.loads(json.dumps(bundle.data["gateway"]["config"]))
    if change is not None:
        change(config)
    return {"modules": dict(bundle.modules), "data": {"gateway": {"config": config}}}


def widen_support_kinds(config: dict[str, Any]) -> None:
    config["task_types"]["support_ticket"]["kinds"].append("edge")


def drop_sales_grant(config: dict[str, Any]) -> None:
    config["task_types"]["account_followup"]["grants"].remove("group:sales")


def run_impact(planted: Planted, body: dict[str, Any], status: int = 200) -> Any:
    response = planted.gateway.client.post("/v1/policy/impact", json=body, headers=planted.gateway.auth(planted.admin))
    assert response.status_code == status, response.text
    return response


NO_ITEMS = {"count": 0, "by_sensitivity": {}, "by_reason": {}, "by_kind": {}}


def test_an_unchanged_candidate_flips_nothing(planted: Planted) -> None:
    report = run_impact(planted, {"policies": candidate()}).json()
    assert report["calls"] == 9 and report["replayed"] == 8
    assert report["unreplayable"] == {"count": 1, "by_reason": {"actor_not_recorded": 1}}
    assert report["assumed"] == {"actor_from_key": 1, "graph_defaults": 1}
    assert report["flips"] == {"allow_to_deny": [], "deny_to_allow": []}
    assert report["items"] == {"newly_allowed": NO_ITEMS, "newly_denied": NO_ITEMS}
    assert report["recorded_differs"] == 0
    assert report["failed"] == {"current": {"count": 0, "traces": []}, "candidate": {"count": 0, "traces": []}}
    assert report["window"]["tenant"] == "acme" and report["window"]["limit"] == 1000
    assert "allow -> deny: 0 calls" in report["summary"]


def test_widening_a_tasks_kinds_newly_allows_exactly_the_planted_items(planted: Planted) -> None:
    report = run_impact(planted, {"policies": candidate(widen_support_kinds)}).json()
    assert report["flips"] == {"allow_to_deny": [], "deny_to_allow": []}
    assert report["items"]["newly_allowed"] == {
        "count": 2,
        "by_sensitivity": {"confidential": 1, "internal": 1},
        "by_reason": {"kind": 2},
        "by_kind": {"edge": 2},
    }
    assert report["items"]["newly_denied"] == NO_ITEMS
    assert "items newly allowed: 2" in report["summary"]


def test_narrowing_a_grant_flips_exactly_the_sales_actors_calls(planted: Planted) -> None:
    report = run_impact(planted, {"policies": candidate(drop_sales_grant)}).json()
    [group] = report["flips"]["allow_to_deny"]
    assert (group["task_type"], group["role"], group["count"]) == ("account_followup", "agent", 4)
    assert sorted(group["traces"]) == sorted(planted.sam)
    assert report["flips"]["deny_to_allow"] == []
    assert report["items"] == {"newly_allowed": NO_ITEMS, "newly_denied": NO_ITEMS}  # counted for calls both allow
    assert "account_followup as agent: 4" in report["summary"]


def test_the_report_is_the_callers_tenant_only_and_holds_no_text(planted: Planted) -> None:
    response = run_impact(planted, {"policies": candidate(drop_sales_grant), "tenant": "acme"})
    for trace_id in planted.globex:
        assert trace_id not in response.text
    assert "hmac" not in response.text and "impactword" not in response.text and "ent_acct" not in response.text
    refused = run_impact(planted, {"policies": candidate(), "tenant": "globex"}, 403)
    assert refused.json()["error"]["message"].startswith("tenant:")


def test_since_and_limit_narrow_the_window(planted: Planted) -> None:
    assert run_impact(planted, {"policies": candidate(), "limit": 3}).json()["calls"] == 3
    later = run_impact(planted, {"policies": candidate(), "since": "2100-01-01T00:00:00Z"}).json()
    assert later["calls"] == 0 and "0 read" in later["summary"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"policies": {"modules": {}}}, "policies.modules"),
        ({}, "policies"),
        ({"policies": candidate(), "since": "yesterday"}, "since"),
        ({"policies": candidate(), "limit": 0}, "limit"),
        ({"policies": candidate(), "limit": 10_001}, "limit"),
        ({"policies": candidate(), "limit": "5"}, "limit"),
        ({"policies": candidate(), "query": "x"}, "query"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(planted: Planted, body: dict[str, Any], field: str) -> None:
    message = run_impact(planted, body, 400).json()["error"]["message"]
    assert message.startswith(field + ":")


def test_a_candidate_that_does_not_compile_is_a_400_with_its_file_and_line(planted: Planted) -> None:
    broken = candidate()
    broken["modules"]["gateway/request/request.rego"] += "\nthis is not rego\n"
    message = run_impact(planted, {"policies": broken}, 400).json()["error"]["message"]
    assert message.startswith("policies:") and "request.rego" in message


def test_only_a_policy_admin_may_run_it(planted: Planted) -> None:
    gateway = planted.gateway
    response = gateway.client.post("/v1/policy/impact", json={"policies": candidate()}, headers=gateway.auth(gateway.key("sam")))
    assert response.status_code == 403


def test_the_chain_still_verifies_with_the_new_lineage_fields(planted: Planted) -> None:
    row = planted.gateway.trace(planted.sam[0])
    assert row["lineage"]["actor"] == {"roles": ["agent"], "groups": ["sales"], "clearance": "confidential"}
    assert row["lineage"]["subjects"] == ["ent_acct"]
    assert row["lineage"]["request"]["graph"] == {"max_depth": None, "relations": None}
    assert planted.gateway.client.app.state.context.audit.verify("acme").ok  # type: ignore[attr-defined]


def test_the_command_writes_the_json_report_and_prints_the_summary(planted: Planted, policy_copy: Path, tmp_path: Path) -> None:
    config = policy_copy / "gateway" / "config" / "data.json"
    document = json.loads(config.read_text())
    drop_sales_grant(document)
    config.write_text(json.dumps(document))
    out = tmp_path / "impact.json"
    result = CliRunner().invoke(
        main,
        [
            "policy",
            "impact",
            "--database-url",
            planted.gateway.settings.effective_database_url,
            "--candidate",
            str(policy_copy),
            "--tenant",
            "acme",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "allow -> deny: 4 calls" in result.output
    report = json.loads(out.read_text())
    assert report["flips"]["allow_to_deny"][0]["count"] == 4 and report["replayed"] == 8
    everyone = CliRunner().invoke(
        main,
        ["policy", "impact", "--database-url", planted.gateway.settings.effective_database_url, "--candidate", str(policy_copy)],
    )
    assert "allow -> deny: 6 calls" in everyone.output  # globex's sales calls too
    bad = CliRunner().invoke(main, ["policy", "impact", "--candidate", str(policy_copy), "--since", "soon"])
    assert bad.exit_code != 0 and "since:" in bad.output


def test_a_replay_asks_the_policy_what_the_call_asked() -> None:
    request = parse_retrieve(
        {
            "task": SALES,
            "query": "q",
            "entities": [{"id": "e1"}, {"email": "a@b.example"}],
            "as_of": "2026-01-02T03:04:05+01:00",
            "kinds": ["memory"],
            "graph": {"max_depth": 2},
            "sources": {"graph": True},
            "depth": "deep",
            "include_historical": True,
            "mode": "brief",
        }
    )
    actor = Actor("sam", "acme", ("agent",), ("sales",), "confidential")
    shape = request_shape(request, TraceBuilder("tr_x", "retrieve", datetime.now(timezone.utc), key=b"k" * 32))
    now = datetime(2026, 5, 1, tzinfo=timezone.utc)
    assert replay_input(shape, actor, now) == request_input(actor, request, now)
    older = shape.model_copy(update={"graph": None})  # a row written before the graph options were kept
    assert replay_input(older, actor, now)["request"]["graph"] == {"max_depth": None, "relations": None}


def test_a_candidate_failing_on_calls_counts_them_never_as_an_allow_or_a_deny(planted: Planted) -> None:
    failing = candidate()
    # Passes the start-up probe; fails (a built-in given null) on every account_followup call.
    failing["modules"]["gateway/request/request.rego"] += (
        '\nboom := time.parse_rfc3339_ns(object.get(input.request, "as_of", null)) if input.task.type == "account_followup"\n'
    )
    report = run_impact(planted, {"policies": failing}).json()
    assert report["failed"]["candidate"]["count"] == 4 and sorted(report["failed"]["candidate"]["traces"]) == sorted(planted.sam)
    assert report["replayed"] == 4 and report["flips"] == {"allow_to_deny": [], "deny_to_allow": []}
    assert "candidate policy failed on 4 calls" in report["summary"]


def test_a_candidates_own_reasons_are_not_echoed(planted: Planted) -> None:
    leaky = candidate(lambda config: config["task_types"]["support_ticket"]["kinds"].remove("memory"))
    items = leaky["modules"]["gateway/items/items.rego"]
    assert "\ndenied := " in items
    leaky["modules"]["gateway/items/items.rego"] = items.replace("\ndenied := ", "\nshipped_denied := ") + (
        '\ndenied := [{"id": d.id, "reason": sprintf("leak-%s", [d.id])} | some d in shipped_denied]\n'
    )
    response = run_impact(planted, {"policies": leaky})
    assert response.json()["items"]["newly_denied"]["by_reason"] == {"other": 1}  # mem_support, for sue's calls
    assert "leak-" not in response.text


def test_a_replay_stops_at_its_deadline_or_when_its_client_leaves() -> None:
    """Issue 30: impact had no overall deadline and kept running after the client left."""
    from types import SimpleNamespace

    import anyio

    from core.errors import BadRequest, DeadlineExceeded
    from gateway.http.routes.policy_impact import _bounded

    async def slow() -> dict[str, Any]:
        await anyio.sleep(30)
        return {"never": True}

    async def quick() -> dict[str, Any]:
        return {"replayed": 1}

    def call(deadline: int, gone_after: float | None) -> Any:
        started = time.monotonic()

        async def is_disconnected() -> bool:
            return gone_after is not None and time.monotonic() - started >= gone_after

        return SimpleNamespace(
            context=SimpleNamespace(settings=SimpleNamespace(impact_deadline_seconds=deadline)),
            request=SimpleNamespace(is_disconnected=is_disconnected),
        )

    async def main() -> None:
        assert await _bounded(call(5, None), quick()) == {"replayed": 1}
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="ran past its 1 s deadline"):
            await _bounded(call(1, None), slow())
        assert time.monotonic() - started < 5
        started = time.monotonic()
        with pytest.raises(BadRequest, match="the client left"):
            await _bounded(call(60, 0.2), slow())
        assert time.monotonic() - started < 5

    anyio.run(main)


def test_a_replay_runs_below_the_service_and_is_charged_its_candidates_cpu(
    planted: Planted, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 55: a candidate's policy process ran at the service's priority and its CPU counted
    nowhere (two runs moved another tenant's p95 4.3x). It now runs niced below the service, and
    the call is charged what the process used: its row says so, and the actor's next runs are
    priced at it."""
    import os

    from gateway.policy import candidate as candidate_module
    from gateway.policy.embedded import EmbeddedEngine

    seen: list[tuple[int, float]] = []
    real_cpu = EmbeddedEngine.cpu_s

    def cpu_s(engine: EmbeddedEngine) -> float:
        process = engine._workers[0].process
        assert process is not None
        used = real_cpu(engine)
        seen.append((os.getpriority(os.PRIO_PROCESS, process.pid), used))
        return used

    monkeypatch.setattr(EmbeddedEngine, "cpu_s", cpu_s)
    response = run_impact(planted, {"policies": candidate()})
    ((niceness, used),) = seen
    assert niceness == os.getpriority(os.PRIO_PROCESS, 0) + candidate_module.CANDIDATE_NICE
    assert used > 0.05  # loading the policy and replaying eight calls take CPU
    work = planted.gateway.trace(response.headers["x-trace-id"])["lineage"]["admission"]["work"]
    assert work["cpu_ms"] >= used * 1000  # the process's CPU is on the call's meter
