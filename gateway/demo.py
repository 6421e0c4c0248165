"""A small multi-tenant demo data set, generated with its actors' keys. The actors and the items are
data (gateway/demo.json, package data): each tenant's items as PUT /v1/items takes them."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from sqlalchemy.engine import Engine

from gateway.auth import create_api_key
from gateway.writes.entities import merge
from gateway.writes.items import IngestReport, ingest

DATA = "demo.json"  # package data beside this module


def demo_data() -> dict[str, Any]:
    """The demo's `actors` (name: tenant, principal, roles, groups, clearance, about) and `items` (tenant: items)."""
    data: dict[str, Any] = json.loads(resources.files(__package__).joinpath(DATA).read_text(encoding="utf-8"))
    return data


def load_demo(engine: Engine) -> tuple[dict[str, tuple[str, str]], IngestReport]:
    """Write the demo items (idempotent) and create one fresh key per demo actor."""
    data = demo_data()
    report = ingest(engine, "acme", data["items"]["acme"])
    merge(engine, "acme", "ent_jane_old", "ent_jane")  # a duplicate record, resolved to its survivor
    other = ingest(engine, "globex", data["items"]["globex"])
    for name in ("created", "updated", "unchanged"):
        setattr(report, name, getattr(report, name) + getattr(other, name))
    report.rejected.extend(other.rejected)
    tokens = {}
    for name, actor in data["actors"].items():
        key = create_api_key(
            engine,
            tenant=actor["tenant"],
            principal=actor["principal"],
            roles=actor["roles"],
            groups=actor["groups"],
            clearance=actor["clearance"],
        )
        tokens[name] = (actor["about"], key)
    return tokens, report
