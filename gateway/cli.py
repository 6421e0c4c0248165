"""The `gateway` command: serve, demo, keys, ingest, policy test."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from core.errors import GatewayError
from gateway.settings import Settings, load_settings


def store_options(command: Any) -> Any:
    command = click.option("--data", "data_dir", type=click.Path(path_type=Path), help="Data directory (GATEWAY_DATA_DIR, default ./.gateway).")(command)
    command = click.option("--database-url", help="SQLAlchemy URL, e.g. PostgreSQL (GATEWAY_DATABASE_URL).")(command)
    return command


def settings_from(**overrides: Any) -> Settings:
    try:
        return load_settings(overrides)
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc


@click.group()
def main() -> None:
    """A policy-first governed retrieval gateway."""


@main.command()
@store_options
@click.option("--host", help="Bind address (GATEWAY_HOST, default 127.0.0.1).")
@click.option("--port", type=int, help="Port (GATEWAY_PORT, default 8080).")
@click.option("--policies", "policies_dir", type=click.Path(path_type=Path), help="Policies directory (GATEWAY_POLICIES_DIR).")
@click.option("--opa-url", help="Use a running OPA server instead of the embedded engine (GATEWAY_OPA_URL).")
@click.option("--workers", type=int, default=1, show_default=True, help="Worker processes.")
def serve(workers: int, **flags: Any) -> None:
    """Run the HTTP service (embedded default: one SQLite file, in-process Rego)."""
    import uvicorn

    settings = settings_from(**flags)
    _export(settings)
    uvicorn.run(
        "gateway.http.server:app",
        host=settings.host,
        port=settings.port,
        workers=workers,
        log_level="info",
        access_log=False,
    )


def _export(settings: Settings) -> None:
    """Hand the resolved settings to the server module (and to worker processes) through the environment."""
    import os

    os.environ["GATEWAY_DATA_DIR"] = str(settings.data_dir)
    os.environ["GATEWAY_POLICIES_DIR"] = str(settings.policies_dir)
    for name in ("database_url", "opa_url"):
        value = getattr(settings, name)
        if value:
            os.environ[f"GATEWAY_{name.upper()}"] = value


@main.command()
@store_options
def demo(**flags: Any) -> None:
    """Load the multi-tenant demo data set and print tokens and a sample curl."""
    from core.store import open_store
    from gateway.demo import load_demo

    settings = settings_from(**flags)
    engine = open_store(settings.effective_database_url)
    tokens, report = load_demo(engine)
    click.echo(f"Demo data loaded into {settings.effective_database_url}: "
               f"{report.created} created, {report.updated} updated, {report.unchanged} unchanged.")
    click.echo("\nDemo actors (keys are shown once; run `gateway demo` again for new ones):")
    for name, (description, token) in tokens.items():
        click.echo(f"  {name:<14} {description}\n  {'':<14} {token}")
    alice = tokens["alice@acme"][1]
    body = json.dumps({"task": {"type": "account_followup", "scope": "sales"}, "mode": "brief", "query": "pricing discount",
                       "entities": [{"email": "Jane@Globex.example"}]})
    click.echo(f"\nStart the service with `gateway serve`, then:\n\n  curl -s http://{settings.host}:{settings.port}/v1/retrieve \\\n"
               f"    -H 'Authorization: Bearer {alice}' \\\n    -H 'Content-Type: application/json' \\\n    -d '{body}'\n")


@main.group()
def keys() -> None:
    """API keys (only their hashes are stored)."""


@keys.command("create")
@store_options
@click.option("--tenant", required=True)
@click.option("--principal", required=True, help="user:ID")
@click.option("--groups", default="", help="Comma-separated groups.")
@click.option("--roles", default="agent", show_default=True, help="Comma-separated: agent, ingest, auditor, policy_admin.")
@click.option("--clearance", default="internal", show_default=True)
def keys_create(tenant: str, principal: str, groups: str, roles: str, clearance: str, **flags: Any) -> None:
    """Create an API key and print it once."""
    from core.store import open_store
    from gateway.auth import create_api_key

    settings = settings_from(**flags)
    try:
        key = create_api_key(
            open_store(settings.effective_database_url),
            tenant=tenant,
            principal=principal,
            roles=[r for r in roles.split(",") if r],
            groups=[g for g in groups.split(",") if g],
            clearance=clearance,
        )
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    click.echo(key)


@main.command("ingest")
@store_options
@click.option("--tenant", required=True, help="Tenant the items belong to.")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
def ingest_command(tenant: str, files: tuple[Path, ...], **flags: Any) -> None:
    """Ingest JSON, NDJSON or Markdown (.md) files, with the same rules as PUT /v1/items and /v1/documents."""
    from core.store import open_store
    from gateway.writes.documents import parse_document
    from gateway.writes.items import ingest, ingest_document, parse_items_body

    settings = settings_from(**flags)
    engine = open_store(settings.effective_database_url)
    failed = False
    for path in files:
        if path.suffix.lower() in (".md", ".markdown"):
            try:
                outcome = ingest_document(engine, tenant, parse_document(path.stem, path.read_bytes()))
            except GatewayError as exc:
                click.echo(f"{path}: {exc.message}", err=True)
                failed = True
                continue
            click.echo(json.dumps({"file": str(path), **outcome}))
            failed = failed or bool(outcome["rejected"])
            continue
        try:
            entries = parse_items_body(path.read_bytes(), "application/x-ndjson" if path.suffix == ".ndjson" else None)
        except GatewayError as exc:
            click.echo(f"{path}: {exc.message}", err=True)
            failed = True
            continue
        with click.progressbar(length=len(entries), label=str(path), file=sys.stderr) as bar:
            report = ingest(engine, tenant, entries)
            bar.update(len(entries))
        click.echo(json.dumps({"file": str(path), **report.as_dict()}))
        failed = failed or bool(report.rejected)
    sys.exit(1 if failed else 0)


@main.command()
@store_options
@click.option("--batch", type=int, default=64, show_default=True, help="Passages per model call.")
@click.option("--threads", type=int, default=2, show_default=True, help="Model threads.")
def embed(batch: int, threads: int, **flags: Any) -> None:
    """Embed every item still waiting for a vector (the service also does this in the background)."""
    from core.store import open_store
    from gateway.writes.embeddings import load_embedder
    from gateway.writes.vectorize import embed_all, lag

    settings = settings_from(**flags)
    embedder, unavailable = load_embedder(settings, threads=threads)
    if embedder is None:
        raise click.ClickException(unavailable or "no embedder")
    engine = open_store(settings.effective_database_url)
    waiting = lag(engine, embedder.model_id)
    with click.progressbar(length=waiting, label=f"embedding with {embedder.model_id}", file=sys.stderr) as bar:
        done = embed_all(engine, embedder, batch, progress=bar.update)
    click.echo(f"{done} items embedded; {lag(engine, embedder.model_id)} waiting")


@main.group()
def audit() -> None:
    """Audit trail tools."""


@audit.command("verify")
@store_options
@click.option("--tenant", help="Check this tenant's chain only (default: every chain).")
def audit_verify(tenant: str | None, **flags: Any) -> None:
    """Recompute the audit hash chains; print where the first one breaks and exit 1 if any does."""
    from audit.chain import verify
    from core.store import open_store

    settings = settings_from(**flags)
    report = verify(open_store(settings.effective_database_url), tenant)
    click.echo(json.dumps(report, indent=2))
    sys.exit(0 if report["ok"] else 1)


@audit.command("prune")
@store_options
@click.option("--days", type=int, help="Keep this many days (default GATEWAY_AUDIT_RETENTION_DAYS).")
def audit_prune(days: int | None, **flags: Any) -> None:
    """Remove audit rows older than the retention period; each chain stays verifiable from its
    oldest kept row."""
    from datetime import timedelta

    from audit.chain import prune
    from core.instants import utc_now
    from core.store import open_store

    settings = settings_from(**flags)
    keep_days = days if days is not None else settings.audit_retention_days
    if keep_days < 1:
        raise click.ClickException("--days: keep at least one day")
    removed = prune(open_store(settings.effective_database_url), utc_now() - timedelta(days=keep_days))
    click.echo(json.dumps({"kept_days": keep_days, "removed": removed}))


@main.group()
def pii() -> None:
    """Personal-data tools."""


@pii.command("analyze")
@store_options
@click.option("--batch", type=int, default=64, show_default=True, help="Items per batch.")
def pii_analyze(batch: int, **flags: Any) -> None:
    """Analyse every item whose stored spans are missing, older than its text, or from another
    analyzer configuration (the service also does this in the background)."""
    from core.store import open_store
    from gateway.privacy.detect import Detector
    from gateway.privacy.store import analyze_all, pending

    settings = settings_from(**flags)
    engine = open_store(settings.effective_database_url)
    detector = Detector()
    waiting = pending(engine, detector.version)
    with click.progressbar(length=waiting, label=f"analysing with {detector.version}", file=sys.stderr) as bar:
        done = analyze_all(engine, detector, batch, progress=bar.update)
    click.echo(f"{done} items analysed; {pending(engine, detector.version)} waiting")


@main.group()
def policy() -> None:
    """Policy tools."""


@policy.command("test")
@click.argument("directory", required=False, type=click.Path(path_type=Path))
@click.option("-v", "--verbose", is_flag=True, help="List passing tests too.")
def policy_test(directory: Path | None, verbose: bool) -> None:
    """Run the Rego tests (test_ rules) with the embedded engine; exit 1 on any failure."""
    from gateway.policy.rego_tests import run_rego_tests

    root = directory or load_settings().policies_dir
    try:
        results = run_rego_tests(root)
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    failures = [r for r in results if not r.passed]
    for result in results:
        if verbose or not result.passed:
            status = "PASS" if result.passed else "FAIL"
            click.echo(f"{status} data.{result.package}.{result.name}" + (f": {result.error}" if result.error else ""))
    click.echo(f"{len(results) - len(failures)}/{len(results)} Rego tests passed")
    sys.exit(1 if failures or not results else 0)
