"""`gateway work`: background work (embedding, personal-data analysis) in a process that serves no calls."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import click

from gateway.cli.common import cores, processes_option, settings_from, store_options, threads_option

IDLE_S = 2.0  # with --follow, how long a worker that found nothing waits before it looks again


@click.command()
@store_options
@click.option("--follow", is_flag=True, help="Keep working as items are written (default: stop when nothing waits).")
@threads_option
@processes_option
@click.option("--embed/--no-embed", default=True, show_default=True, help="Embed items waiting for a vector.")
@click.option("--analyze/--no-analyze", default=True, show_default=True, help="Analyse items for personal data.")
def work(follow: bool, threads: int | None, processes: int | None, embed: bool, analyze: bool, **flags: Any) -> None:
    """Embed and analyse waiting items beside `gateway serve` (or instead of its background workers):
    every batch is claimed first, so any number of these processes, the service's workers, `gateway
    embed` and `gateway pii analyze` share the backlog without doing an item twice. Embedding and
    analysis run side by side, each on every core; a process that dies leaves its claims to expire."""
    from core.store import open_store
    from gateway.privacy.detect import analyzer_version
    from gateway.privacy.store import analyze_all_processes, pending
    from gateway.writes.embeddings import load_embedder
    from gateway.writes.vectorize import embed_all, lag

    settings = settings_from(**flags)
    engine = open_store(settings.effective_database_url)
    jobs: list[tuple[str, Callable[[], int], Callable[[], int]]] = []
    if embed and settings.embeddings != "none":
        embedder, note = load_embedder(settings, threads=threads or cores(), bulk=True)
        if embedder is None:
            raise click.ClickException(note or "no embedder")
        if note:
            click.echo(f"warning: {note}", err=True)
        if settings.weaviate_url:
            raise click.ClickException("with GATEWAY_WEAVIATE_URL, run `gateway embed` (it copies each batch to Weaviate)")
        model = embedder
        jobs.append(("embedded", lambda: embed_all(engine, model), lambda: lag(engine, model.model_id)))
    if analyze and settings.pii != "none":
        version = analyzer_version()
        count = processes or cores()
        jobs.append(("analysed", lambda: analyze_all_processes(engine, version, count), lambda: pending(engine, version)))
    if not jobs:
        raise click.ClickException("nothing to do: embedding and analysis are both off")
    totals = dict.fromkeys((name for name, _, _ in jobs), 0)
    failures: list[BaseException] = []

    def loop(name: str, run: Callable[[], int]) -> None:
        try:
            while True:
                done = run()
                totals[name] += done
                if not follow:
                    return
                if not done:
                    time.sleep(IDLE_S)
        except BaseException as exc:  # reported once both have stopped
            failures.append(exc)

    threads_ = [threading.Thread(target=loop, args=(name, run), daemon=True) for name, run, _ in jobs]
    for thread in threads_:
        thread.start()
    try:
        for thread in threads_:
            while thread.is_alive():
                thread.join(1.0)
    except KeyboardInterrupt:
        pass
    if failures:
        raise failures[0]
    click.echo("; ".join(f"{totals[name]} items {name}, {left()} waiting" for name, _, left in jobs))
