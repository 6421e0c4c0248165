"""The `gateway` command: one module per command group (serve, demo, migrate, keys, ingest, embed,
models, audit, pii, policy, work), what they share in `common`."""

from __future__ import annotations

from typing import Any

import click

from core.errors import GatewayError
from gateway.cli import audit, demo, embed, ingest, keys, migrate, models, pii, policy, serve, work


class Gateway(click.Group):
    """Every command's own failure (a store that cannot be reached or is behind, a bad setting)
    ends in one line naming what is wrong, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except GatewayError as exc:
            raise click.ClickException(exc.message) from exc


@click.group(cls=Gateway)
def main() -> None:
    """A policy-first governed retrieval gateway."""


for command in (
    serve.serve,
    demo.demo,
    migrate.migrate,
    keys.keys,
    ingest.ingest_command,
    embed.embed,
    models.models,
    audit.audit,
    pii.pii,
    policy.policy,
    work.work,
):
    main.add_command(command)
