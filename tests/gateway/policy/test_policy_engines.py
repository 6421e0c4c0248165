"""Both policy engines behind one interface: behaviour changes with policy files alone, broken
policies fail at start-up, and an engine that errors, hangs or is unreachable fails closed (503)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.errors import ConfigurationError
from gateway.settings import PROJECT_POLICIES
from tests.conftest import Gateway, edit_json, open_gateway
from tests.engines import Opa, OpaServer, opa_command
from tests.gateway.fixtures import SALES_TASK, seed
from tests.opa_double import OpaDouble


def gateway_with(url: str, tmp_path: Path, **overrides: Any) -> contextlib.AbstractContextManager[Gateway]:
    return open_gateway(url, tmp_path, **overrides)


def test_data_change_widens_what_a_task_reads_without_code(sqlite_url: str, tmp_path: Path, policy_copy: Path) -> None:
    with gateway_with(sqlite_url, tmp_path, policies_dir=policy_copy) as before:
        key = seed(before)
        body = before.retrieve(key, {"task": {"type": "research"}, "query": "wombatacl"}).json()
        assert body["items"] == []
        old_revision = body["decision"]["policy_revision"]

    edit_json(policy_copy / "gateway/config/data.json", lambda d: d["task_types"]["research"]["kinds"].append("memory"))
    with gateway_with(sqlite_url, tmp_path, policies_dir=policy_copy) as after:
        after.keys = before.keys
        body = after.retrieve(key, {"task": {"type": "research"}, "query": "wombatacl"}).json()
        assert [i["id"] for i in body["items"]] == ["mem_acl_ok"]
        assert body["decision"]["policy_revision"] != old_revision


@contextlib.contextmanager
def sales_call_under_rule(
    rule: str, url: str, tmp_path: Path, policy_copy: Path
) -> Iterator[tuple[Gateway, str, httpx.Response]]:
    """`rule` added to the request policy, a gateway on it, and alice's sales call through it."""
    rego = policy_copy / "gateway/request/request.rego"
    rego.write_text(rego.read_text() + rule)
    with gateway_with(url, tmp_path, policies_dir=policy_copy) as gateway:
        key = seed(gateway)
        yield gateway, key, gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl"})


def test_rego_change_denies_with_its_reason_and_a_trace(sqlite_url: str, tmp_path: Path, policy_copy: Path) -> None:
    rule = '\nrefusals contains "sales_freeze" if input.task.type == "account_followup"\n'
    with sales_call_under_rule(rule, sqlite_url, tmp_path, policy_copy) as (gateway, key, response):
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "policy_denied"
        assert response.json()["error"]["reasons"] == ["sales_freeze"]
        assert "wombat" not in response.text
        row = gateway.trace(response.headers["x-trace-id"])
        assert row["decision"] == "deny" and row["status_code"] == 403
        assert gateway.retrieve(key, {"task": {"type": "research"}, "query": "x"}).status_code == 200


def test_policy_with_a_syntax_error_fails_at_start_with_file_and_line(sqlite_url: str, tmp_path: Path, policy_copy: Path) -> None:
    rego = policy_copy / "gateway/items/items.rego"
    rego.write_text(rego.read_text() + "\nbroken_rule if {{ \n")
    with pytest.raises(ConfigurationError) as failure:
        with gateway_with(sqlite_url, tmp_path, policies_dir=policy_copy):
            pass
    assert "items.rego:" in failure.value.message


def test_policy_that_errors_at_evaluation_fails_closed_with_503_and_a_trace(
    sqlite_url: str, tmp_path: Path, policy_copy: Path
) -> None:
    # regorus fails the whole evaluation when a built-in gets a bad argument: here, any task with a scope.
    rule = '\nrefusals contains "never" if time.parse_rfc3339_ns(input.task.scope) < 0\n'
    with sales_call_under_rule(rule, sqlite_url, tmp_path, policy_copy) as (gateway, _, response):
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "policy_unavailable"
        assert "wombat" not in response.text
        row = gateway.trace(response.headers["x-trace-id"])
        assert row["status_code"] == 503 and row["error_code"] == "policy_unavailable"
        assert row["decision"] == "error" and "packed" not in row["lineage"]


def test_item_the_policy_denies_after_pushdown_is_dropped_and_counted(sqlite_url: str, tmp_path: Path, policy_copy: Path) -> None:
    rego = policy_copy / "gateway/items/items.rego"
    rego.write_text(
        rego.read_text()
        + '\nfailures contains [item.id, "embargo"] if {\n\tsome item in input.items\n\titem.id == "mem_acl_ok"\n}\n'
    )
    with gateway_with(sqlite_url, tmp_path, policies_dir=policy_copy) as gateway:
        key = seed(gateway)
        response = gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl wombatsens"})
        body = response.json()
        assert [i["id"] for i in body["items"]] == ["mem_confidential_ok"]
        assert body["sources"]["lexical"]["count"] == 1  # counts only what the policy confirmed
        lineage = gateway.trace(body["trace_id"])["lineage"]
        assert lineage["pushdown_mismatches"] == 1
        assert lineage["dropped_by_policy"] == [{"id": "mem_acl_ok", "reason": "not_allowed"}]
        assert sorted(lineage["retrieved"]["lexical"]) == ["mem_acl_ok", "mem_confidential_ok"]


# ---------------------------------------------------------------- the OPA server engine, on a real `opa run --server`

REQUEST_MODULE = "gateway/request/request.rego"  # the id the gateway pushes it under (its path in the bundle)


def test_opa_backend_gives_the_same_answers_as_the_embedded_engine(database_url: str, tmp_path: Path, opa_live: Opa) -> None:
    questions: list[dict[str, Any]] = [
        {"task": SALES_TASK, "query": "wombatacl wombatsens wombatscope quokkaacl quokkasens"},
        {"task": SALES_TASK, "mode": "brief", "entities": [{"email": "jane@globex.example"}]},
        {"task": {"type": "research"}, "query": "wombatacl"},
        {"task": {"type": "unknown_task"}, "query": "wombatacl"},
        {"task": SALES_TASK, "query": "quokkaexpired", "as_of": "2025-06-01T00:00:00Z"},
    ]
    answers = {}
    for engine, overrides in (("embedded", {}), ("opa", {"opa_url": opa_live.url})):
        with gateway_with(database_url, tmp_path / engine, **overrides) as gateway:
            key = seed(gateway)
            answers[engine] = [_essence(gateway.retrieve(key, q)) for q in questions]
            policy = gateway.client.get("/v1/policy", headers=gateway.auth(key)).json()
            assert policy["engine"] == engine
    assert answers["opa"] == answers["embedded"]
    assert any(a[1] for a in answers["opa"])  # the comparison is not between two empty answers
    assert any(a[0] == 403 for a in answers["opa"])  # nor between two allows
    assert REQUEST_MODULE in opa_live.policy_ids()  # pushed through OPA's policy API
    decisions = [d for d in opa_live.decisions() if d.get("path") == "gateway/request"]
    assert len(decisions) >= len(questions) and all("input" in d for d in decisions)
    assert "wombat" not in opa_live.server.log_tail() and "quokka" not in str(opa_live.decisions())  # no query text


def _essence(response: Any) -> tuple[int, list[str], str | None]:
    body = response.json()
    if response.status_code != 200:
        return response.status_code, [], body["error"]["code"]
    return 200, sorted(i["id"] for i in body["items"]), body["empty_reason"]


# What each way of breaking the live OPA does to it; "garbage" needs the double (a real OPA always answers JSON).
BREAKS = {
    # an evaluation error: two complete definitions of `allow` both true -> 500 eval_conflict_error
    "error": lambda opa: opa.put_policy(
        REQUEST_MODULE, "package gateway.request\n\nallow := true if input.actor\nallow := false if input.actor\n"
    ),
    # the decision's package gone -> 200 without a result
    "undefined": lambda opa: opa.delete_policy(REQUEST_MODULE),
    # the process stopped where it stands: the connection is accepted, no answer comes
    "hang": lambda opa: opa.server.pause(),
}


@pytest.mark.parametrize("mode", sorted(BREAKS))
def test_opa_failure_fails_closed_with_503_and_a_trace(sqlite_url: str, tmp_path: Path, opa_live: Opa, mode: str) -> None:
    with gateway_with(sqlite_url, tmp_path, opa_url=opa_live.url, opa_timeout_ms=1000) as gateway:
        key = seed(gateway)
        assert gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl"}).status_code == 200
        BREAKS[mode](opa_live)
        started = time.monotonic()
        response = gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl"})
        assert response.status_code == 503, response.text
        assert time.monotonic() - started < 2.5  # one call, one deadline: a hung decision is never retried
        assert response.json()["error"]["code"] == "policy_unavailable"
        assert "wombat" not in response.text
        row = gateway.trace(response.headers["x-trace-id"])
        assert row["status_code"] == 503 and row["policy_engine"] == "opa"
        opa_live.server.resume()


def test_opa_answering_garbage_fails_closed(sqlite_url: str, tmp_path: Path) -> None:
    """The one fault a real OPA cannot be made to show: a 200 whose body is not JSON (the double)."""
    with OpaDouble(mode="ok") as double, gateway_with(sqlite_url, tmp_path, opa_url=double.url, opa_timeout_ms=1000) as gateway:
        key = seed(gateway)
        assert gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl"}).status_code == 200
        double.mode = "garbage"
        double.clear_requests()
        response = gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl"})
        assert response.status_code == 503 and response.json()["error"]["code"] == "policy_unavailable"
        assert len(double.requests_to("/v1/data/gateway/request", method="POST")) == 1
        assert gateway.trace(response.headers["x-trace-id"])["error_code"] == "policy_unavailable"


def test_opa_unreachable_after_start_fails_closed(sqlite_url: str, tmp_path: Path, opa_live: Opa) -> None:
    with gateway_with(sqlite_url, tmp_path, opa_url=opa_live.url, opa_timeout_ms=300) as gateway:
        key = seed(gateway)
        opa_live.server.stop()  # connection refused from now on
        response = gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl"})
        assert response.status_code == 503
        assert gateway.trace(response.headers["x-trace-id"])["error_code"] == "policy_unavailable"


def test_opa_unreachable_at_start_refuses_to_start(sqlite_url: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="unreachable"):
        with gateway_with(sqlite_url, tmp_path, opa_url="http://127.0.0.1:9", opa_timeout_ms=300):
            pass


def test_opa_items_denial_midway_fails_closed(sqlite_url: str, tmp_path: Path, opa_live: Opa) -> None:
    """The request decision succeeds, then the batch verify fails: nothing is returned."""
    with gateway_with(sqlite_url, tmp_path, opa_url=opa_live.url, opa_timeout_ms=1000) as gateway:
        key = seed(gateway)
        assert gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl"}).status_code == 200
        opa_live.put_policy(
            "gateway/items/items.rego", "package gateway.items\n\nallowed := 1 if input.items\nallowed := 2 if input.items\n"
        )
        response = gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl"})
        assert response.status_code == 503
        assert "wombat" not in response.text


def test_readyz_names_the_policy_engine_when_opa_goes_away(sqlite_url: str, tmp_path: Path, opa_live: Opa) -> None:
    with gateway_with(sqlite_url, tmp_path, opa_url=opa_live.url, opa_timeout_ms=300) as gateway:
        assert gateway.client.get("/readyz").json()["checks"]["policy"] == "ok"
        opa_live.server.stop()
        response = gateway.client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["checks"] == {"policy": "opa engine not answering", "store": "ok", "admission": "ok"}


def test_a_bundle_opa_loads_itself_names_its_revision_from_provenance(sqlite_url: str, tmp_path: Path) -> None:
    """GATEWAY_OPA_PUSH_POLICIES=false: OPA serves a bundle `opa build` wrote; the gateway pushes
    nothing and names the revision OPA reports."""
    bundle = tmp_path / "bundle.tar.gz"
    built = opa_command("build", "--bundle", ".", "--revision", "rev-2026-12-01", "--output", bundle, cwd=PROJECT_POLICIES)
    assert built.returncode == 0, built.stderr
    with OpaServer((bundle,), bundle=True) as server:
        with gateway_with(sqlite_url, tmp_path, opa_url=server.url, opa_push_policies=False) as gateway:
            key = seed(gateway)
            response = gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl"})
            assert response.status_code == 200 and [i["id"] for i in response.json()["items"]] == ["mem_acl_ok"]
            revision = response.json()["decision"]["policy_revision"]
            assert revision.startswith("opa:") and revision.endswith("@rev-2026-12-01"), revision
            assert gateway.trace(response.headers["x-trace-id"])["policy_revision"] == revision
        assert httpx.get(f"{server.url}/v1/policies", timeout=10).json()["result"]  # the bundle's, not pushed ones
