"""What the command groups share: the store options, the settings, the cores, a progress bar."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from core.errors import GatewayError
from gateway.cli.progress import Progress
from gateway.settings import Settings, load_settings


def store_options(command: Any) -> Any:
    command = click.option(
        "--data", "data_dir", type=click.Path(path_type=Path), help="Data directory (GATEWAY_DATA_DIR, default ./.gateway)."
    )(command)
    command = click.option("--database-url", help="SQLAlchemy URL, e.g. PostgreSQL (GATEWAY_DATABASE_URL).")(command)
    return command


def settings_from(**overrides: Any) -> Settings:
    """The settings, flags over GATEWAY_* variables; a bad setting, or a data directory that cannot
    hold the store (`--data` naming a file, a path under a file, a gateway.db that is not SQLite),
    ends the command with one line naming the option and the path, never a traceback."""
    try:
        settings = load_settings(overrides)
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    uses_store = "data_dir" in overrides and not settings.database_url  # a command with `store_options`, on SQLite
    problem = data_dir_problem(settings.data_dir) if uses_store else None
    if problem is not None:
        if overrides["data_dir"] is not None:
            raise click.BadParameter(problem, param_hint="'--data'")
        raise click.ClickException(f"GATEWAY_DATA_DIR: {problem}")
    return settings


SQLITE_HEADER = b"SQLite format 3\x00"


def data_dir_problem(data_dir: Path) -> str | None:
    """Why `data_dir` cannot be the data directory (it holds gateway.db, made on first use), or None."""
    try:
        if data_dir.exists() and not data_dir.is_dir():
            return f"{data_dir} is a file, not a directory: give the directory that holds (or is to hold) gateway.db"
        if not data_dir.exists():
            existing = next((p for p in data_dir.absolute().parents if p.exists()), None)
            if existing is not None and not existing.is_dir():
                return f"{data_dir} cannot be made: {existing} is a file, not a directory"
            return None  # made on first use (where it cannot be, the store says why)
        database = data_dir / "gateway.db"
        if database.is_dir():
            return f"{database} is a directory, not a SQLite database"
        if database.is_file():
            with database.open("rb") as f:
                header = f.read(len(SQLITE_HEADER))
            if header and header != SQLITE_HEADER:
                return f"{database} is not a SQLite database"
        return None
    except OSError as exc:  # no permission to look, for one
        return f"{data_dir} cannot be read: {exc.strerror or type(exc).__name__}"


# The worker commands' shared options (`gateway embed`, `pii analyze`, `work`).
threads_option = click.option(
    "--threads",
    type=click.IntRange(min=1, max=256),
    default=None,
    help="Model runs side by side, one core each (default: the cores this process may use).",
)
processes_option = click.option(
    "--processes",
    type=click.IntRange(min=1, max=256),
    default=None,
    help="Analysing processes (default: the cores this process may use).",
)


def cores() -> int:
    """The cores this process may run on (a container's CPU set, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def rate_bar(length: int, label: str) -> Progress:
    """A progress bar with items/s and the time left (gateway/cli/progress.py)."""
    return Progress(length, label)
