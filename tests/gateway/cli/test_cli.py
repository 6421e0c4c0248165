"""The `gateway` command, driven through click's CliRunner; what it writes is checked through a gateway
opened on the same SQLite file, over HTTP."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gateway.cli import main
from gateway.settings import load_settings
from tests.conftest import Gateway, make_gateway
from tests.gateway.fixtures import SALES_TASK, memory

TOKEN = re.compile(r"\bgw_[0-9a-f]{16}_[A-Za-z0-9_-]{20,100}\b")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "cli-data"


@pytest.fixture
def cli_gateway(data_dir: Path, tmp_path: Path) -> Iterator[Gateway]:
    """A gateway on the store the CLI writes to with `--data data_dir`."""
    url = load_settings({"data_dir": data_dir}, environ={}).effective_database_url
    assert url == f"sqlite:///{(data_dir / 'gateway.db').resolve()}"
    yield from make_gateway(url, tmp_path)


def run(*args: str | Path, env: dict[str, str | None] | None = None) -> Result:
    # GATEWAY_* variables in the caller's environment must not redirect the CLI away from the test's store.
    clean: dict[str, str | None] = {"GATEWAY_DATABASE_URL": None, "GATEWAY_DATA_DIR": None, "GATEWAY_POLICIES_DIR": None}
    return CliRunner().invoke(main, [str(a) for a in args], env={**clean, **(env or {})})


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def found(gateway: Gateway, key: str, query: str) -> list[str]:
    response = gateway.retrieve(key, {"task": SALES_TASK, "query": query})
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


# ---------------------------------------------------------------------------
# keys create
# ---------------------------------------------------------------------------


def test_keys_create_prints_a_key_that_authenticates(cli_gateway: Gateway, data_dir: Path) -> None:
    result = ok(
        run(
            "keys",
            "create",
            "--data",
            data_dir,
            "--tenant",
            "acme",
            "--principal",
            "user:x",
            "--roles",
            "agent",
            "--clearance",
            "internal",
        )
    )
    key = result.stdout.strip()
    assert TOKEN.fullmatch(key), result.stdout
    response = cli_gateway.retrieve(key, {"task": {"type": "research"}, "query": "anything"})
    assert response.status_code == 200, response.text
    row = cli_gateway.trace(response.headers["x-trace-id"])
    assert (row["tenant"], row["actor"]) == ("acme", "user:x")


def test_keys_create_with_groups_sees_group_items(cli_gateway: Gateway, data_dir: Path) -> None:
    cli_gateway.ingest("acme", [memory("mem_group", "kookaburra sales note", acl=["group:sales"])])
    plain = ok(run("keys", "create", "--data", data_dir, "--tenant", "acme", "--principal", "user:plain")).stdout.strip()
    seller = ok(
        run("keys", "create", "--data", data_dir, "--tenant", "acme", "--principal", "user:seller", "--groups", "sales,emea")
    ).stdout.strip()
    assert plain != seller
    refused = cli_gateway.retrieve(plain, {"task": SALES_TASK, "query": "kookaburra"})  # the sales task is the group's
    assert refused.status_code == 403 and refused.json()["error"]["reasons"] == ["task_not_granted"]
    assert found(cli_gateway, seller, "kookaburra") == ["mem_group"]


def test_keys_created_by_the_cli_carry_their_roles(cli_gateway: Gateway, data_dir: Path) -> None:
    writer = ok(
        run("keys", "create", "--data", data_dir, "--tenant", "acme", "--principal", "user:loader", "--roles", "ingest")
    ).stdout.strip()
    response = cli_gateway.client.put("/v1/items", json=[memory("mem_w", "kookaburra written")], headers=cli_gateway.auth(writer))
    assert response.status_code == 200 and response.json()["created"] == 1
    agent = ok(run("keys", "create", "--data", data_dir, "--tenant", "acme", "--principal", "user:agent")).stdout.strip()
    response = cli_gateway.client.put("/v1/items", json=[memory("mem_a", "kookaburra refused")], headers=cli_gateway.auth(agent))
    assert response.status_code == 403


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--roles", "superuser"], "roles"),
        (["--roles", "agent,root"], "root"),
        (["--clearance", "top_secret"], "clearance"),
        (["--principal", "x"], "principal"),
        (["--principal", "group:sales"], "principal"),
        (["--tenant", "acme corp"], "tenant"),
        (["--groups", "sales,bad group"], "groups"),
    ],
)
def test_keys_create_refuses_bad_values(data_dir: Path, args: list[str], expected: str) -> None:
    options = {"--tenant": "acme", "--principal": "user:x", **dict(zip(args[::2], args[1::2]))}
    result = run("keys", "create", "--data", data_dir, *(part for pair in options.items() for part in pair))
    assert result.exit_code != 0
    assert expected in result.output
    assert "Traceback" not in result.output
    assert not TOKEN.search(result.output)


def test_keys_create_refusal_writes_no_key(cli_gateway: Gateway, data_dir: Path) -> None:
    from sqlmodel import Session, select

    from core.tables import ApiKey

    result = run("keys", "create", "--data", data_dir, "--tenant", "acme", "--principal", "user:x", "--clearance", "cosmic")
    assert result.exit_code != 0
    with Session(cli_gateway.store) as session:
        assert session.exec(select(ApiKey)).all() == []


# ---------------------------------------------------------------------------
# ingest
# ---------------------------------------------------------------------------


def reports(result: Result) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def test_ingest_json_file(cli_gateway: Gateway, data_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "items.json"
    path.write_text(json.dumps([memory("mem_file_1", "lyrebirdone json note"), memory("mem_file_2", "lyrebirdtwo json note")]))
    result = ok(run("ingest", "--data", data_dir, "--tenant", "acme", path))
    assert reports(result) == [{"file": str(path), "created": 2, "updated": 0, "unchanged": 0, "rejected": []}]
    key = cli_gateway.key("alice", groups=("sales",))
    assert found(cli_gateway, key, "lyrebirdone") == ["mem_file_1"]
    assert found(cli_gateway, key, "lyrebirdtwo") == ["mem_file_2"]
    again = ok(run("ingest", "--data", data_dir, "--tenant", "acme", path))
    assert reports(again)[0]["unchanged"] == 2


def test_ingest_ndjson_file(cli_gateway: Gateway, data_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "items.ndjson"
    path.write_text("\n".join(json.dumps(memory(f"mem_nd_{i}", f"lyrebirdnd{i} ndjson note")) for i in range(3)) + "\n")
    result = ok(run("ingest", "--data", data_dir, "--tenant", "acme", path))
    assert reports(result)[0]["created"] == 3
    key = cli_gateway.key("alice", groups=("sales",))
    assert found(cli_gateway, key, "lyrebirdnd1") == ["mem_nd_1"]


def test_ingest_writes_into_the_named_tenant(cli_gateway: Gateway, data_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "globex.json"
    path.write_text(json.dumps([memory("mem_globex", "lyrebirdglobex note")]))
    ok(run("ingest", "--data", data_dir, "--tenant", "globex", path))
    assert found(cli_gateway, cli_gateway.key("alice", groups=("sales",)), "lyrebirdglobex") == []
    gina = cli_gateway.key("gina", tenant="globex", groups=("sales",))
    assert found(cli_gateway, gina, "lyrebirdglobex") == ["mem_globex"]


def test_ingest_file_with_a_bad_item_exits_1_but_writes_the_good_ones(
    cli_gateway: Gateway, data_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "mixed.ndjson"
    lines = [
        json.dumps(memory("mem_good_1", "lyrebirdgood first")),
        json.dumps({"id": "mem_bad", "kind": "memory", "text": "lyrebirdbad"}),  # no acl
        "not json at all",
        json.dumps(memory("mem_good_2", "lyrebirdgood second")),
    ]
    path.write_text("\n".join(lines) + "\n")
    result = run("ingest", "--data", data_dir, "--tenant", "acme", path)
    assert result.exit_code == 1, result.output
    (summary,) = reports(result)
    assert (summary["created"], len(summary["rejected"])) == (2, 2)
    assert summary["rejected"][0]["id"] == "mem_bad" and summary["rejected"][0]["errors"][0].startswith("acl:")
    assert summary["rejected"][1]["errors"] == ["line 3: not valid JSON"]
    key = cli_gateway.key("alice", groups=("sales",))
    assert sorted(found(cli_gateway, key, "lyrebirdgood")) == ["mem_good_1", "mem_good_2"]
    assert found(cli_gateway, key, "lyrebirdbad") == []


def test_ingest_malformed_json_file_exits_1_and_goes_on_to_the_next(cli_gateway: Gateway, data_dir: Path, tmp_path: Path) -> None:
    broken, good = tmp_path / "broken.json", tmp_path / "good.json"
    broken.write_text('[{"id": "mem_x", ')
    good.write_text(json.dumps([memory("mem_after", "lyrebirdafter note")]))
    result = run("ingest", "--data", data_dir, "--tenant", "acme", broken, good)
    assert result.exit_code == 1
    assert "malformed JSON" in result.stderr and str(broken) in result.stderr
    assert reports(result)[0]["file"] == str(good)
    assert found(cli_gateway, cli_gateway.key("alice", groups=("sales",)), "lyrebirdafter") == ["mem_after"]


def test_ingest_of_a_missing_file_fails(data_dir: Path, tmp_path: Path) -> None:
    result = run("ingest", "--data", data_dir, "--tenant", "acme", tmp_path / "nope.json")
    assert result.exit_code == 2
    assert "nope.json" in result.output


# ---------------------------------------------------------------------------
# demo
# ---------------------------------------------------------------------------


def demo_tokens(output: str) -> dict[str, str]:
    """Each demo actor's token: the line after the one naming the actor."""
    lines = output.splitlines()
    tokens = {}
    for number, line in enumerate(lines[:-1]):
        name = line.strip().split(" ")[0]
        match = TOKEN.search(lines[number + 1])
        if "@" in name and match and not TOKEN.search(line):
            tokens[name] = match.group(0)
    return tokens


def test_demo_loads_data_and_prints_working_tokens(cli_gateway: Gateway, data_dir: Path) -> None:
    result = ok(run("demo", "--data", data_dir))
    output = result.stdout
    assert "Demo data loaded" in output
    assert "curl" in output and "/v1/retrieve" in output and "/mcp" in output
    tokens = demo_tokens(output)
    assert {"alice@acme", "bob@acme", "gina@globex"} <= set(tokens)
    assert all(token.startswith("gw_") for token in tokens.values())
    assert f"Bearer {tokens['alice@acme']}" in output  # the curl line uses alice's token

    response = cli_gateway.retrieve(tokens["alice@acme"], {"task": SALES_TASK, "query": "pricing discount"})
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert items, response.text
    assert cli_gateway.trace(response.headers["x-trace-id"])["actor"] == "user:alice"

    gina = cli_gateway.retrieve(tokens["gina@globex"], {"task": SALES_TASK, "query": "pricing discount"})
    assert gina.status_code == 200
    assert not {i["id"] for i in items} & {i["id"] for i in gina.json()["items"]}  # no acme item for globex

    # each demo actor gets the tasks its group is granted, and no other
    review = {"task": {"type": "compliance_review"}, "query": "pricing"}
    assert cli_gateway.retrieve(tokens["carol@acme"], review).status_code == 200
    assert cli_gateway.retrieve(tokens["alice@acme"], review).json()["error"]["reasons"] == ["task_not_granted"]
    assert cli_gateway.retrieve(tokens["bob@acme"], {"task": {"type": "support_ticket"}, "query": "refunds"}).status_code == 200


def test_demo_twice_is_idempotent_and_issues_new_keys(data_dir: Path) -> None:
    first = ok(run("demo", "--data", data_dir))
    second = ok(run("demo", "--data", data_dir))
    assert re.search(r"\b0 created, 0 updated, [1-9]\d* unchanged", second.stdout), second.stdout
    assert set(demo_tokens(first.stdout).values()).isdisjoint(demo_tokens(second.stdout).values())


# ---------------------------------------------------------------------------
# policy test
# ---------------------------------------------------------------------------


def test_policy_test_passes_on_the_project_policies() -> None:
    result = ok(run("policy", "test"))
    summary = re.search(r"(\d+)/(\d+) Rego tests passed", result.stdout)
    assert summary and summary.group(1) == summary.group(2) and int(summary.group(2)) > 0
    assert "FAIL" not in result.stdout


def test_policy_test_fails_on_a_failing_rego_test(policy_copy: Path) -> None:
    assert ok(run("policy", "test", policy_copy))  # the copy passes before the edit
    (policy_copy / "gateway" / "extra_test.rego").write_text("package gateway.extra_test\n\ntest_fails if { false }\n")
    result = run("policy", "test", policy_copy)
    assert result.exit_code == 1, result.output
    assert "FAIL data.gateway.extra_test.test_fails" in result.stdout
    summary = re.search(r"(\d+)/(\d+) Rego tests passed", result.stdout)
    assert summary and int(summary.group(1)) == int(summary.group(2)) - 1


def test_policy_test_reads_the_policies_dir_setting(policy_copy: Path) -> None:
    (policy_copy / "gateway" / "extra_test.rego").write_text("package gateway.extra_test\n\ntest_fails if { false }\n")
    result = run("policy", "test", env={"GATEWAY_POLICIES_DIR": str(policy_copy)})
    assert result.exit_code == 1
    assert "test_fails" in result.stdout


def test_policy_test_on_a_missing_directory_fails(tmp_path: Path) -> None:
    result = run("policy", "test", tmp_path / "nowhere")
    assert result.exit_code != 0
    assert "Traceback" not in result.output


# ---------------------------------------------------------------------------
# --data that cannot hold the store: one line naming the option and the path
# ---------------------------------------------------------------------------

STORE_COMMANDS = (
    ("audit", "verify"),
    ("audit", "export", "--since", "2026-01-01T00:00:00Z", "--until", "2026-02-01T00:00:00Z", "--out", "pack"),
    ("audit", "prune", "--days", "30"),
    ("keys", "list"),
    ("keys", "revoke", "0123456789abcdef"),
    ("keys", "create", "--tenant", "acme", "--principal", "user:x"),
    ("migrate",),
    ("demo",),
    ("embed",),
    ("pii", "analyze"),
)


def bad_data_dirs(tmp_path: Path) -> dict[str, Path]:
    """A file that is no SQLite database, a directory whose gateway.db is not one, a path under a file."""
    (tmp_path / "x.db").write_text("not a database\n")
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "gateway.db").write_text("not a database either\n")
    return {
        "file": tmp_path / "x.db",
        "not sqlite": tmp_path / "garbage",
        "under a file": tmp_path / "x.db" / "data",
    }


@pytest.mark.parametrize("command", STORE_COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_data_option_that_cannot_hold_the_store_is_named_without_a_traceback(command: tuple[str, ...], tmp_path: Path) -> None:
    for what, path in bad_data_dirs(tmp_path).items():
        result = run(*command, "--data", path)
        assert result.exit_code == 2 and isinstance(result.exception, SystemExit), (what, result.output, result.exception)
        assert "Traceback" not in result.output and "'--data'" in result.output, (what, result.output)
        assert str(path) in result.output or str(path / "gateway.db") in result.output, (what, result.output)
    assert not (tmp_path / "x.db").is_dir() and (tmp_path / "x.db").read_text() == "not a database\n"  # nothing touched


def test_the_data_directory_from_the_environment_and_a_database_url_under_a_file(tmp_path: Path) -> None:
    paths = bad_data_dirs(tmp_path)
    result = run("audit", "verify", env={"GATEWAY_DATA_DIR": str(paths["file"])})
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (result.output, result.exception)
    assert "GATEWAY_DATA_DIR" in result.output and str(paths["file"]) in result.output
    result = run("audit", "verify", "--database-url", f"sqlite:///{paths['under a file'] / 'gateway.db'}")
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (result.output, result.exception)
    assert f"{paths['file']} is a file" in result.output


def test_the_installed_command_prints_no_traceback_for_a_bad_data_option(tmp_path: Path) -> None:
    for path in bad_data_dirs(tmp_path).values():
        done = subprocess.run(
            [str(Path(sys.executable).parent / "gateway"), "audit", "verify", "--data", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr + done.stdout, done.stderr
        assert "Invalid value for '--data'" in done.stderr, done.stderr
