"""`gateway ingest`: items and documents from files, or NDJSON from standard input."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from core.errors import GatewayError
from gateway.cli.common import settings_from, store_options
from gateway.cli.progress import Progress
from gateway.settings import Settings

if TYPE_CHECKING:
    from gateway.writes.supplied import Intake, VectorIntake

STDIN = "-"


@click.command("ingest")
@store_options
@click.option("--tenant", required=True, help="Tenant the items belong to.")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, allow_dash=True, dir_okay=False, path_type=Path))
def ingest_command(tenant: str, files: tuple[Path, ...], **flags: Any) -> None:
    """Ingest JSON, NDJSON or Markdown (.md) files, or NDJSON from standard input (`-`), with the same
    rules as PUT /v1/items and /v1/documents. NDJSON (.ndjson, .jsonl, or `-`) is streamed: a file
    of any size loads in bounded memory, with a progress bar (plain lines when not on a terminal)."""
    from core.store import open_store

    settings = settings_from(**flags)
    engine = open_store(settings.effective_database_url)
    intake = functools.cache(functools.partial(_intake, settings, engine))
    failed = False
    for path in files:
        try:
            outcome = _ingest_one(engine, tenant, path, intake)
        except GatewayError as exc:
            click.echo(f"{path}: {exc.message}", err=True)
            failed = True
            continue
        click.echo(json.dumps({"file": str(path), **outcome}))
        failed = failed or bool(outcome["rejected"]) or bool(outcome.get("rejected_omitted"))
    sys.exit(1 if failed else 0)


def _intake(settings: Settings, engine: Any) -> VectorIntake | None:
    """What a vector an item carries must match: the configured model, loaded when the first item
    carrying one comes (most files carry none); with Weaviate, its copies go there first."""
    from gateway.context import build_weaviate
    from gateway.writes.embeddings import load_embedder
    from gateway.writes.supplied import VectorIntake
    from gateway.writes.vectorize import publish_to_weaviate

    embedder, _ = load_embedder(settings)
    if embedder is None:
        return None
    publish = (
        functools.partial(publish_to_weaviate, build_weaviate(settings, embedder, engine)) if settings.weaviate_url else None
    )
    return VectorIntake(embedder.model_id, embedder.dims, publish)


def _ingest_one(engine: Any, tenant: str, path: Path, intake: Intake) -> dict[str, Any]:
    from gateway.writes.documents import parse_document
    from gateway.writes.items import ingest, ingest_document, parse_items_body

    if path.suffix.lower() in (".md", ".markdown"):
        return ingest_document(engine, tenant, parse_document(path.stem, path.read_bytes()))
    if str(path) == STDIN:
        with Progress(None, "stdin") as progress:
            return ingest(engine, tenant, _lines(sys.stdin.buffer, progress), intake=intake).as_dict()
    if path.suffix.lower() in (".ndjson", ".jsonl"):
        with path.open("rb") as file, Progress(_count_lines(path), str(path)) as progress:
            return ingest(engine, tenant, _lines(file, progress), intake=intake).as_dict()
    entries = parse_items_body(path.read_bytes(), None)
    with Progress(len(entries), str(path)) as progress:
        report = ingest(engine, tenant, entries, intake=intake)
        progress.update(len(entries))
    return report.as_dict()


def _lines(file: IO[bytes], progress: Progress) -> Iterator[Any]:
    """The entries of an NDJSON stream, one line at a time (blank lines skipped), parsed as PUT
    /v1/items parses a streamed body's lines."""
    from gateway.writes.items import parse_line

    index = 0
    for number, line in enumerate(file, start=1):
        if not line.strip():
            continue
        yield parse_line(line, number, index)
        index += 1
        progress.update(1)


def _count_lines(path: Path) -> int:
    """The file's lines (the bar's total; blank lines, skipped, make it a little high), counted in 1 MiB blocks."""
    count = 0
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            count += block.count(b"\n")
    return count
