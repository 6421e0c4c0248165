"""`gateway embed`: vectors for every item still waiting for one."""

from __future__ import annotations

import functools
from typing import Any

import click

from gateway.cli.common import cores, rate_bar, settings_from, store_options, threads_option


@click.command()
@store_options
@click.option(
    "--batch",
    type=click.IntRange(min=1, max=1024),
    default=8,
    show_default=True,
    help="Passages per model call (passages of similar length run together); an endpoint's requests "
    "(GATEWAY_EMBEDDINGS_URL) take GATEWAY_EMBEDDINGS_BATCH instead.",
)
@threads_option
@click.option(
    "--rate",
    type=click.FloatRange(min=0.1),
    default=None,
    help="At most this many items a second, to leave cores to a running service (default: as fast as it goes).",
)
def embed(batch: int, threads: int | None, rate: float | None, **flags: Any) -> None:
    """Embed every item still waiting for a vector of the configured model (the service also does
    this in the background). After a model change, this re-embeds every item; stopped, it resumes
    where it stopped."""
    from core.errors import ConnectorError
    from core.store import open_store
    from gateway.context import build_weaviate
    from gateway.writes.embeddings import load_embedder
    from gateway.writes.vectorize import embed_all, lag, publish_to_weaviate

    settings = settings_from(**flags)
    embedder, note = load_embedder(settings, threads=threads or cores(), bulk=True)
    if embedder is None:
        raise click.ClickException(note or "no embedder")
    if note:
        click.echo(f"warning: {note}", err=True)
    engine = open_store(settings.effective_database_url)
    waiting = lag(engine, embedder.model_id)
    # With Weaviate, every chunk is copied there before it counts as embedded (as the service does).
    weaviate = build_weaviate(settings, embedder, engine) if settings.weaviate_url else None
    publish = functools.partial(publish_to_weaviate, weaviate) if weaviate else None
    try:
        with rate_bar(waiting, f"embedding with {embedder.model_id}") as bar:
            done = embed_all(engine, embedder, batch, progress=bar.update, publish=publish, rate=rate)
    except ConnectorError as exc:
        raise click.ClickException(f"{exc.message}; the items not yet copied are still waiting") from exc
    finally:
        if weaviate is not None:
            weaviate.close()
    click.echo(f"{done} items embedded; {lag(engine, embedder.model_id)} waiting")
