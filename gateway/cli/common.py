"""What the command groups share: the store options, the settings, the cores, a progress bar."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from core.errors import GatewayError
from gateway.settings import Settings, load_settings


def store_options(command: Any) -> Any:
    command = click.option(
        "--data", "data_dir", type=click.Path(path_type=Path), help="Data directory (GATEWAY_DATA_DIR, default ./.gateway)."
    )(command)
    command = click.option("--database-url", help="SQLAlchemy URL, e.g. PostgreSQL (GATEWAY_DATABASE_URL).")(command)
    return command


def settings_from(**overrides: Any) -> Settings:
    try:
        return load_settings(overrides)
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc


def cores() -> int:
    """The cores this process may run on (a container's CPU set, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def rate_bar(length: int, label: str) -> Any:
    """A progress bar with items/s (and the percentage and ETA click shows when the length is known)."""
    started = time.monotonic()

    def rate(_: Any) -> str:
        seconds = time.monotonic() - started
        return f"{bar.pos / seconds:.1f} items/s" if bar.pos and seconds > 0 else ""

    bar = click.progressbar(length=length, label=label, file=sys.stderr, show_eta=True, show_percent=True, item_show_func=rate)
    return bar
