"""`gateway embed`: vectors for every item still waiting for one."""

from __future__ import annotations

import functools
from typing import Any

import click

from gateway.cli.common import cores, rate_bar, settings_from, store_options


@click.command()
@store_options
@click.option(
    "--batch",
    type=click.IntRange(min=1, max=1024),
    default=8,
    show_default=True,
    help="Passages per model call (passages of similar length run together).",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1, max=256),
    default=None,
    help="Model runs side by side, one core each (default: the cores this process may use).",
)
def embed(batch: int, threads: int | None, **flags: Any) -> None:
    """Embed every item still waiting for a vector (the service also does this in the background)."""
    from core.errors import ConnectorError
    from core.store import open_store
    from gateway.context import build_weaviate
    from gateway.writes.embeddings import load_embedder
    from gateway.writes.vectorize import embed_all, lag, publish_to_weaviate

    settings = settings_from(**flags)
    embedder, unavailable = load_embedder(settings, threads=threads or cores(), bulk=True)
    if embedder is None:
        raise click.ClickException(unavailable or "no embedder")
    engine = open_store(settings.effective_database_url)
    waiting = lag(engine, embedder.model_id)
    # With Weaviate, every chunk is copied there before it counts as embedded (as the service does).
    weaviate = build_weaviate(settings, embedder) if settings.weaviate_url else None
    publish = functools.partial(publish_to_weaviate, weaviate) if weaviate else None
    try:
        with rate_bar(waiting, f"embedding with {embedder.model_id}") as bar:
            done = embed_all(engine, embedder, batch, progress=bar.update, publish=publish)
    except ConnectorError as exc:
        raise click.ClickException(f"{exc.message}; the items not yet copied are still waiting") from exc
    finally:
        if weaviate is not None:
            weaviate.close()
    click.echo(f"{done} items embedded; {lag(engine, embedder.model_id)} waiting")
