"""Schema migrations: a store written before migrations existed (tests/fixtures, made by that code
with tests/fixtures/make_legacy_store.py) upgrades and keeps working; a fresh store gets head; a
second migrate changes nothing; SQLite is backed up first; PostgreSQL behind head is refused; a
failing revision leaves the store where it was; two migrators at once take turns."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from click.testing import CliRunner
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import Engine
from sqlmodel import SQLModel
from starlette.testclient import TestClient

from core.errors import StoreUnavailable
from core.migrate import MIGRATIONS, head_revision, store_revision, upgrade
from core.store import create_store_engine, open_store
from gateway.cli import main
from gateway.http.app import create_app
from gateway.settings import load_settings
from tests.conftest import BACKENDS, fresh_database, open_gateway, require_postgres

FIXTURES = Path(__file__).parents[1] / "fixtures"
MANIFEST = json.loads((FIXTURES / "legacy_store.json").read_text())
DUMP_SCHEMA = "gw_legacy_fixture"  # the schema tests/fixtures/legacy_store_postgres.sql was dumped from
TABLES = (
    "item",
    "item_principal",
    "item_scope",
    "item_tag",
    "item_vector",
    "item_pii",
    "source_document",
    "entity_tombstone",
    "retrieve_cursor",
    "api_key",
    "audit_trace",
    "audit_item",
    "audit_secret",
)


def empty_schema() -> Iterator[str]:
    """A PostgreSQL schema of its own, with nothing in it (not migrated)."""
    postgres = require_postgres()
    schema = "gw_test_" + secrets.token_hex(6)
    admin = create_engine(postgres)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    try:
        yield f"{postgres}?options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()


@pytest.fixture(params=BACKENDS)
def legacy_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(backend, url, manifest) of a store in the schema from before migrations, with data in every table."""
    backend: str = request.param
    if backend == "sqlite":
        (tmp_path / "data").mkdir()
        shutil.copyfile(FIXTURES / "legacy_store.sqlite", tmp_path / "data" / "gateway.db")
        (tmp_path / "data" / "gateway.db").chmod(0o600)  # a private store: its backup copy must stay private
        yield backend, f"sqlite:///{tmp_path / 'data' / 'gateway.db'}", MANIFEST["sqlite"]
        return
    postgres = require_postgres()
    schema = "gw_test_" + secrets.token_hex(6)
    dump = (FIXTURES / "legacy_store_postgres.sql").read_text().replace(DUMP_SCHEMA, schema)
    conninfo = postgres.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(conninfo, autocommit=True) as raw:
        # The store of before migrations had made btree_gin itself (its full-text index leads with
        # the tenant); a fresh server has not, so it comes first, as it did then.
        raw.execute(b"CREATE EXTENSION IF NOT EXISTS btree_gin SCHEMA public")
        raw.execute(dump.encode())  # no parameters: run as one script
    try:
        yield backend, f"{postgres}?options=-csearch_path%3D{schema}", MANIFEST["postgres"]
    finally:
        with psycopg.connect(conninfo, autocommit=True) as raw:
            raw.execute(f"DROP SCHEMA {schema} CASCADE".encode())


def migrate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["migrate", *args])
    return result.exit_code, result.output


def counts(url: str) -> dict[str, int]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {table: conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one() for table in TABLES}
    finally:
        engine.dispose()


def shape(engine: Engine) -> dict[str, tuple[list[str], list[str]]]:
    """Each table's columns and index names (what the code relies on), per-tenant FTS tables aside."""
    found = inspect(engine)
    return {
        table: (sorted(c["name"] for c in found.get_columns(table)), sorted(str(i["name"]) for i in found.get_indexes(table)))
        for table in found.get_table_names()
        if not table.startswith("item_fts_")
    }


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# ---------------------------------------------------------------- a store from before migrations


def test_a_store_from_before_migrations_upgrades_and_keeps_working(
    legacy_store: tuple[str, str, dict[str, Any]], tmp_path: Path
) -> None:
    backend, url, manifest = legacy_store
    before = counts(url)
    assert all(before.values()), before  # data in every table the service fills by itself
    if backend == "postgres":
        with pytest.raises(StoreUnavailable, match=r"revision none .* run `gateway migrate --database-url "):
            open_store(url)
        code, output = migrate("--database-url", url)
        assert code == 0, output
        assert "revision before: none (no version table)" in output and f"revision after: {head_revision()} (head)" in output
    # SQLite: the service migrates it at start, after a backup copy
    with open_gateway(url, tmp_path, cursor_idle_seconds=10**9) as gateway:
        client = gateway.client
        keys = manifest["keys"]
        first = client.post("/v1/retrieve", json=manifest["retrieve"], headers=auth(keys["alice"]))
        assert first.status_code == 200, first.text  # the old key authenticates
        assert [item["id"] for item in first.json()["items"]] == manifest["first_page"]
        page = client.post(
            "/v1/retrieve", json={"task": manifest["retrieve"]["task"], "cursor": manifest["cursor"]}, headers=auth(keys["alice"])
        )
        assert page.status_code == 200, page.text  # the old cursor still pages
        paged = [item["id"] for item in page.json()["items"]]
        assert paged and not set(paged) & set(manifest["first_page"])
        assert client.post("/v1/retrieve", json=manifest["retrieve"], headers=auth(keys["alice"][:-2] + "xx")).status_code == 401
        # a write after the upgrade is found lexically beside the old items (FTS triggers and index in place)
        wrote = client.put(
            "/v1/items",
            json=[
                {
                    "id": "mem_after",
                    "kind": "memory",
                    "text": "heliotrope billing after the upgrade",
                    "acl": ["group:sales"],
                    "scope": ["sales"],
                }
            ],
            headers=auth(keys["writer"]),
        )
        assert wrote.status_code == 200 and wrote.json()["created"] == 1, wrote.text
        found = client.post(
            "/v1/retrieve",
            json={**manifest["retrieve"], "query": "heliotrope", "budget": {"bytes": 4000}},
            headers=auth(keys["alice"]),
        )
        assert [item["id"] for item in found.json()["items"]] == ["mem_after"], found.text
        verify = client.get("/v1/audit/verify", headers=auth(keys["auditor"]))
        assert verify.status_code == 200 and verify.json()["ok"] is True, verify.text
        assert verify.json()["chains"]["acme"]["rows"] > before["audit_trace"] // 2
        assert store_revision(gateway.store) == head_revision()
        upgraded = shape(gateway.store)
    after = counts(url)
    untouched = ("entity_tombstone", "source_document", "api_key", "audit_secret")
    assert {t: after[t] for t in untouched} == {t: before[t] for t in untouched}
    assert after["item"] == before["item"] + 1
    # vectors and spans kept (the background workers may have added the new item's by now)
    assert before["item_vector"] <= after["item_vector"] <= before["item_vector"] + 1
    assert before["item_pii"] <= after["item_pii"] <= before["item_pii"] + 1
    # the upgraded store has every table, column and index a fresh one has
    for fresh_url in fresh_database(backend, tmp_path / "fresh"):
        engine = open_store(fresh_url)
        try:
            assert upgraded == shape(engine)
        finally:
            engine.dispose()
    if backend == "sqlite":
        backups = list((tmp_path / "data").glob("gateway.db.unversioned-*.bak"))
        assert len(backups) == 1, backups
        store_mode = (tmp_path / "data" / "gateway.db").stat().st_mode & 0o777
        assert backups[0].stat().st_mode & 0o777 == store_mode  # as private as the store, whatever the umask
        copy = sqlite3.connect(backups[0])
        try:
            assert copy.execute("SELECT count(*) FROM item").fetchone() == (before["item"],)
            assert copy.execute("SELECT name FROM sqlite_master WHERE name = 'alembic_version'").fetchone() is None
        finally:
            copy.close()


# ---------------------------------------------------------------- fresh stores and the command


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fresh_store_gets_head_and_a_second_migrate_is_a_no_op(backend: str, tmp_path: Path) -> None:
    target = ["--data", str(tmp_path)] if backend == "sqlite" else None
    for url in [f"sqlite:///{tmp_path / 'gateway.db'}"] if backend == "sqlite" else empty_schema():
        args = target or ["--database-url", url]
        code, output = migrate(*args)
        assert code == 0, output
        assert "revision before: none (no version table)" in output and f"revision after: {head_revision()} (head)" in output
        assert "backup:" not in output  # nothing to keep in an empty store
        code, output = migrate(*args)
        assert code == 0, output
        assert f"revision before: {head_revision()}" in output and "nothing to do" in output
        engine = open_store(url)
        try:
            assert store_revision(engine) == head_revision()
        finally:
            engine.dispose()
    assert not list(tmp_path.glob("*.bak"))


def test_migrate_of_an_unreachable_store_is_a_one_line_error() -> None:
    code, output = migrate("--database-url", "postgresql+psycopg://gw:hunter2@127.0.0.1:9/none?connect_timeout=2")
    assert code == 1
    assert output.strip().splitlines() == [
        "Error: store unreachable (postgresql) at postgresql+psycopg://gw:***@127.0.0.1:9/none?connect_timeout=2: OperationalError"
    ]
    code, output = migrate("--database-url", "mysql://x/y")
    assert code == 1 and "database_url" in output and "Traceback" not in output


@pytest.mark.parametrize("backend", BACKENDS)
def test_models_and_migrations_agree(backend: str, tmp_path: Path) -> None:
    """A model changed without a revision fails here: the migrated schema is what the models declare,
    apart from what only the migrations make (full text, indexes declared in SQL)."""
    only_migrations = {
        "alembic_version",
        "tsv",
        "ix_item_tenant_document_section",
        "ix_item_tenant_edge_from",
        "ix_item_tenant_merged_into",
        "ix_item_tenant_tsv",
        "ix_item_tsv",
        "xid",  # PostgreSQL's log rows name their transaction (0008)
        "ix_item_change_tenant_xid",
    }
    for url in fresh_database(backend, tmp_path):
        engine = open_store(url)
        try:
            with engine.connect() as conn:
                context = MigrationContext.configure(
                    conn,
                    opts={
                        "compare_type": True,
                        "include_name": lambda name, kind, parent: name not in only_migrations,
                    },
                )
                assert compare_metadata(context, SQLModel.metadata) == []
        finally:
            engine.dispose()


# ---------------------------------------------------------------- PostgreSQL refuses a store behind


def test_postgres_behind_head_refuses_to_start_and_says_what_to_run(tmp_path: Path) -> None:
    for url in empty_schema():
        with pytest.raises(StoreUnavailable) as refused:
            open_store(url)
        assert "revision none (no version table)" in refused.value.message
        assert f"run `gateway migrate --database-url {url}` before starting the service" in refused.value.message
        settings = load_settings({"data_dir": tmp_path, "database_url": url}, environ={})
        with pytest.raises(StoreUnavailable, match="run `gateway migrate --database-url "):
            with TestClient(create_app(settings)):
                pass  # the service's start-up refuses before it serves anything
        engine = create_engine(url)
        try:
            assert inspect(engine).get_table_names() == []  # refused, not half made
        finally:
            engine.dispose()


def test_serve_on_a_postgres_store_behind_head_stops_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`gateway serve` checks the store before any worker starts: one line saying what to run, no
    traceback, and nothing listening."""
    monkeypatch.setattr(os, "environ", dict(os.environ))  # serve hands its settings on through os.environ
    for url in empty_schema():
        result = CliRunner().invoke(main, ["serve", "--data", str(tmp_path), "--database-url", url, "--port", "0"])
        assert result.exit_code == 1
        assert result.output.startswith("Error: ") and "run `gateway migrate --database-url " in result.output
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) <= 2


# ---------------------------------------------------------------- failures and concurrency


FAILING_REVISION = """
import sqlalchemy as sa
from alembic import op

revision = "9999"
down_revision = "{head}"


def upgrade() -> None:
    op.create_table("half_done", sa.Column("pk", sa.Integer(), primary_key=True))
    op.add_column("item", sa.Column("half", sa.Integer()))
    op.execute("DELETE FROM api_key")
    raise RuntimeError("revision 9999 fails half way")
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failing_migration_leaves_the_store_at_its_revision(backend: str, tmp_path: Path) -> None:
    migrations = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS, migrations, ignore=shutil.ignore_patterns("__pycache__"))
    (migrations / "versions" / "r9999_fails.py").write_text(FAILING_REVISION.format(head=head_revision()))
    for url in fresh_database(backend, tmp_path):
        store = open_store(url)  # at head, with a key in it
        with store.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO api_key (key_id, secret_hash, tenant, principal, roles, groups, clearance, created_at) "
                    "VALUES ('k1', 'h', 'acme', 'user:a', '[]', '[]', 'internal', CURRENT_TIMESTAMP)"
                )
            )
        store.dispose()
        engine = create_store_engine(url)
        try:
            with pytest.raises(
                StoreUnavailable,
                match=rf"failed, the store stays at {head_revision()}: RuntimeError: revision 9999 fails half way",
            ):
                upgrade(engine, migrations=migrations)
            assert store_revision(engine) == head_revision()
            found = inspect(engine)
            assert "half_done" not in found.get_table_names()
            assert "half" not in {c["name"] for c in found.get_columns("item")}
            with engine.connect() as conn:
                assert conn.execute(text("SELECT key_id FROM api_key")).scalars().all() == ["k1"]
        finally:
            engine.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_migrators_at_once_take_turns(backend: str, tmp_path: Path) -> None:
    urls = [f"sqlite:///{tmp_path / 'gateway.db'}"] if backend == "sqlite" else empty_schema()
    for url in urls:
        engines = [create_store_engine(url) for _ in range(3)]
        start = threading.Barrier(len(engines))
        results: list[Any] = []

        def run(engine: Engine) -> None:
            start.wait()
            try:
                results.append(upgrade(engine))
            except Exception as exc:  # recorded, and the assertion below names it
                results.append(exc)

        threads = [threading.Thread(target=run, args=(engine,)) for engine in engines]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        try:
            assert [type(r).__name__ for r in results] == ["Upgrade"] * 3, results
            assert sorted(r.changed for r in results) == [False, False, True]  # one did it, the others found head
            with engines[0].connect() as conn:
                assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == [head_revision()]
        finally:
            for engine in engines:
                engine.dispose()
