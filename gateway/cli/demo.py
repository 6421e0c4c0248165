"""`gateway demo`: the multi-tenant demo data set."""

from __future__ import annotations

import json
from typing import Any

import click

from gateway.cli.common import settings_from, store_options


@click.command()
@store_options
def demo(**flags: Any) -> None:
    """Load the multi-tenant demo data set and print tokens and a sample curl."""
    from core.store import open_store
    from gateway.demo import load_demo

    settings = settings_from(**flags)
    engine = open_store(settings.effective_database_url)
    tokens, report = load_demo(engine)
    click.echo(
        f"Demo data loaded into {settings.effective_database_url}: "
        f"{report.created} created, {report.updated} updated, {report.unchanged} unchanged."
    )
    click.echo("\nDemo actors (keys are shown once; run `gateway demo` again for new ones):")
    for name, (description, token) in tokens.items():
        click.echo(f"  {name:<14} {description}\n  {'':<14} {token}")
    alice = tokens["alice@acme"][1]
    body = json.dumps(
        {
            "task": {"type": "account_followup", "scope": "sales"},
            "mode": "brief",
            "query": "pricing discount",
            "entities": [{"email": "Jane@Globex.example"}],
        }
    )
    click.echo(
        f"\nStart the service with `gateway serve`, then:\n\n  curl -s http://{settings.host}:{settings.port}/v1/retrieve \\\n"
        f"    -H 'Authorization: Bearer {alice}' \\\n    -H 'Content-Type: application/json' \\\n    -d '{body}'\n"
    )
    click.echo(
        f"An MCP client reaches the same calls as tools at http://{settings.host}:{settings.port}/mcp with the same\n"
        "Authorization header; Python agents use gateway.client (docs/agents.md)."
    )
