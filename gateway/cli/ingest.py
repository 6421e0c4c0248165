"""`gateway ingest`: items and documents from files."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from core.errors import GatewayError
from gateway.cli.common import settings_from, store_options


@click.command("ingest")
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
