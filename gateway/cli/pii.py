"""`gateway pii`: personal-data analysis of the stored items."""

from __future__ import annotations

from typing import Any

import click

from gateway.cli.common import cores, processes_option, rate_bar, settings_from, store_options


@click.group()
def pii() -> None:
    """Personal-data tools."""


@pii.command("analyze")
@store_options
@click.option("--batch", type=click.IntRange(min=1, max=4096), default=32, show_default=True, help="Items per batch.")
@processes_option
def pii_analyze(batch: int, processes: int | None, **flags: Any) -> None:
    """Analyse every item whose stored spans are missing, older than its text, or from another
    analyzer configuration (the service also does this in the background)."""
    from core.store import open_store
    from gateway.privacy.detect import Detector, analyzer_version
    from gateway.privacy.store import analyze_all, analyze_all_processes, pending

    settings = settings_from(**flags)
    engine = open_store(settings.effective_database_url)
    processes = processes or cores()
    version = analyzer_version()
    waiting = pending(engine, version)
    with rate_bar(waiting, f"analysing with {version}") as bar:
        if processes > 1 and waiting > batch:
            done = analyze_all_processes(engine, version, processes, batch, progress=bar.update)
        else:
            done = analyze_all(engine, Detector(), batch, progress=bar.update)
    click.echo(f"{done} items analysed; {pending(engine, version)} waiting")
