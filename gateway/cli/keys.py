"""`gateway keys`: create, list and revoke API keys."""

from __future__ import annotations

import json
from typing import Any

import click

from core.errors import GatewayError
from gateway.cli.common import settings_from, store_options


@click.group()
def keys() -> None:
    """API keys (only their hashes are stored)."""


@keys.command("create")
@store_options
@click.option("--tenant", required=True)
@click.option("--principal", required=True, help="user:ID")
@click.option("--groups", default="", help="Comma-separated groups.")
@click.option(
    "--roles", default="agent", show_default=True, help="Comma-separated: agent, ingest, auditor, policy_admin, key_admin."
)
@click.option("--clearance", default="internal", show_default=True)
def keys_create(tenant: str, principal: str, groups: str, roles: str, clearance: str, **flags: Any) -> None:
    """Create an API key and print it once."""
    from core.store import close_store, open_store
    from gateway.auth import create_api_key

    settings = settings_from(**flags)
    engine = open_store(settings.effective_database_url)
    try:
        key = create_api_key(
            engine,
            tenant=tenant,
            principal=principal,
            roles=[r for r in roles.split(",") if r],
            groups=[g for g in groups.split(",") if g],
            clearance=clearance,
        )
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    finally:
        close_store(engine)
    click.echo(key)


@keys.command("list")
@store_options
@click.option("--tenant", help="Only this tenant's keys (default: every tenant's).")
def keys_list(tenant: str | None, **flags: Any) -> None:
    """Print every key, revoked ones too, one JSON object a line: never a secret or its hash."""
    from core.store import close_store, open_store
    from gateway.auth import list_api_keys

    settings = settings_from(**flags)
    engine = open_store(settings.effective_database_url)
    try:
        for key in list_api_keys(engine, tenant):
            click.echo(json.dumps(key))
    finally:
        close_store(engine)


@keys.command("revoke")
@store_options
@click.option("--tenant", help="Refuse unless the key is this tenant's.")
@click.argument("key_id")
def keys_revoke(key_id: str, tenant: str | None, **flags: Any) -> None:
    """Revoke the key KEY_ID (the 16 hex digits after gw_) and end its audit-page sessions."""
    from core.store import close_store, open_store
    from gateway.auth import revoke_api_key

    settings = settings_from(**flags)
    engine = open_store(settings.effective_database_url)
    try:
        revoked = revoke_api_key(engine, key_id, tenant)
    except GatewayError as exc:
        raise click.ClickException(exc.message) from exc
    finally:
        close_store(engine)
    click.echo(json.dumps(revoked))
