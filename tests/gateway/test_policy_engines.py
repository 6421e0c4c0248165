"""Both policy engines behind one interface: behaviour changes with policy files alone, broken
policies fail at start-up, and an engine that errors, hangs or is unreachable fails closed (503)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.errors import ConfigurationError
from tests.conftest import Gateway, edit_json, open_gateway
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


def test_rego_change_denies_with_its_reason_and_a_trace(sqlite_url: str, tmp_path: Path, policy_copy: Path) -> None:
    rego = policy_copy / "gateway/request/request.rego"
    rego.write_text(rego.read_text() + '\nrefusals contains "sales_freeze" if input.task.type == "account_followup"\n')
    with gateway_with(sqlite_url, tmp_path, policies_dir=policy_copy) as gateway:
        key = seed(gateway)
        response = gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl"})
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
    rego = policy_copy / "gateway/request/request.rego"
    # regorus fails the whole evaluation when a built-in gets a bad argument: here, any task with a scope.
    rego.write_text(rego.read_text() + '\nrefusals contains "never" if time.parse_rfc3339_ns(input.task.scope) < 0\n')
    with gateway_with(sqlite_url, tmp_path, policies_dir=policy_copy) as gateway:
        key = seed(gateway)
        response = gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl"})
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "policy_unavailable"
        assert "wombat" not in response.text
        row = gateway.trace(response.headers["x-trace-id"])
        assert row["status_code"] == 503 and row["error_code"] == "policy_unavailable"
        assert row["decision"] == "error" and "packed" not in row["lineage"]


def test_item_the_policy_denies_after_pushdown_is_dropped_and_counted(
    sqlite_url: str, tmp_path: Path, policy_copy: Path
) -> None:
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


@pytest.fixture
def opa() -> Iterator[OpaDouble]:
    with OpaDouble(mode="ok") as double:
        yield double


def test_opa_backend_gives_the_same_answers_as_the_embedded_engine(
    database_url: str, tmp_path: Path, opa: OpaDouble
) -> None:
    questions = [
        {"task": SALES_TASK, "query": "wombatacl wombatsens wombatscope quokkaacl quokkasens"},
        {"task": SALES_TASK, "mode": "brief", "entities": [{"email": "jane@globex.example"}]},
        {"task": {"type": "research"}, "query": "wombatacl"},
        {"task": {"type": "unknown_task"}, "query": "wombatacl"},
        {"task": SALES_TASK, "query": "quokkaexpired", "as_of": "2025-06-01T00:00:00Z"},
    ]
    answers = {}
    for engine, overrides in (("embedded", {}), ("opa", {"opa_url": opa.url})):
        with gateway_with(database_url, tmp_path / engine, **overrides) as gateway:
            key = seed(gateway)
            answers[engine] = [_essence(gateway.retrieve(key, q)) for q in questions]
            assert gateway.client.get("/v1/policy", headers=gateway.auth(key)).json()["engine"] == engine
    assert answers["opa"] == answers["embedded"]
    assert any(a[1] for a in answers["opa"])  # the comparison is not between two empty answers
    decisions = opa.requests_to("/v1/data/gateway/request", method="POST")
    assert decisions and all("input" in r["body"] for r in decisions)
    assert "wombatacl" not in str(decisions)  # the query text never goes to the policy engine


def _essence(response: Any) -> tuple[int, list[str], str | None]:
    body = response.json()
    if response.status_code != 200:
        return response.status_code, [], body["error"]["code"]
    return 200, sorted(i["id"] for i in body["items"]), body["empty_reason"]


@pytest.mark.parametrize("mode", ["error", "garbage", "undefined", "hang"])
def test_opa_failure_fails_closed_with_503_and_a_trace(sqlite_url: str, tmp_path: Path, opa: OpaDouble, mode: str) -> None:
    # The OPA double answers from a thread of this process, beside the app's background analysis of
    # the seeded items: a deadline with room for that, and a hang well past it.
    with gateway_with(sqlite_url, tmp_path, opa_url=opa.url, opa_timeout_ms=1000) as gateway:
        key = seed(gateway)
        assert gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl"}).status_code == 200
        opa.mode = mode
        opa.hang_seconds = 3
        opa.clear_requests()
        started = time.monotonic()
        response = gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl"})
        assert response.status_code == 503, response.text
        # One call, one deadline: the client never retries a failed or hung decision.
        assert len(opa.requests_to("/v1/data/gateway/request", method="POST")) == 1
        assert time.monotonic() - started < 2.5
        assert response.json()["error"]["code"] == "policy_unavailable"
        assert "wombat" not in response.text
        row = gateway.trace(response.headers["x-trace-id"])
        assert row["status_code"] == 503 and row["policy_engine"] == "opa"
        opa.mode = "ok"


def test_opa_unreachable_after_start_fails_closed(sqlite_url: str, tmp_path: Path) -> None:
    double = OpaDouble(mode="ok")
    with gateway_with(sqlite_url, tmp_path, opa_url=double.url, opa_timeout_ms=300) as gateway:
        key = seed(gateway)
        double.close()
        response = gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl"})
        assert response.status_code == 503
        assert gateway.trace(response.headers["x-trace-id"])["error_code"] == "policy_unavailable"


def test_opa_unreachable_at_start_refuses_to_start(sqlite_url: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="unreachable"):
        with gateway_with(sqlite_url, tmp_path, opa_url="http://127.0.0.1:9", opa_timeout_ms=300):
            pass


def test_opa_items_denial_midway_fails_closed(sqlite_url: str, tmp_path: Path, opa: OpaDouble) -> None:
    """The request decision succeeds, then the batch verify fails: nothing is returned."""
    with gateway_with(sqlite_url, tmp_path, opa_url=opa.url, opa_timeout_ms=300) as gateway:
        key = seed(gateway)
        opa.put_policy("gateway/items/items.rego", "package gateway.items\n\nallowed := x if { x := 1 / 0 }\n")
        response = gateway.retrieve(key, {"task": SALES_TASK, "query": "wombatacl"})
        assert response.status_code == 503
        assert "wombat" not in response.text


def test_readyz_names_the_policy_engine_when_opa_goes_away(sqlite_url: str, tmp_path: Path) -> None:
    double = OpaDouble(mode="ok")
    with gateway_with(sqlite_url, tmp_path, opa_url=double.url, opa_timeout_ms=300) as gateway:
        assert gateway.client.get("/readyz").json()["checks"]["policy"] == "ok"
        double.close()
        response = gateway.client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["checks"] == {"policy": "opa engine not answering", "store": "ok", "admission": "ok"}
