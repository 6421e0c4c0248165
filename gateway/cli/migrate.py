"""`gateway migrate`: the store's schema upgraded to this release."""

from __future__ import annotations

from typing import Any

import click

from core.errors import GatewayError
from gateway.cli.common import settings_from, store_options


@click.command()
@store_options
def migrate(**flags: Any) -> None:
    """Upgrade the store's schema to this release (run it before starting PostgreSQL replicas)."""
    from sqlalchemy.engine import make_url

    from core.store import migrate_store

    settings = settings_from(**flags)
    try:
        done = migrate_store(settings.effective_database_url)
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    click.echo(f"store: {make_url(settings.effective_database_url).render_as_string(hide_password=True)}")
    click.echo(f"revision before: {done.before or 'none (no version table)'}")
    click.echo(f"revision after: {done.after} (head{'' if done.changed else ', nothing to do'})")
    if done.backup is not None:
        click.echo(f"backup: {done.backup}")
