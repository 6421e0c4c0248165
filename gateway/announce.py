"""What the service says at start, in a few lines an operator reads once: version, store, policy
engine and revision, models, admission, the address it listens on, and a hint for a first run (while
the store holds no item). Never a password: a PostgreSQL URL is shown as host, port and database."""

from __future__ import annotations

import logging
import os
from importlib.metadata import PackageNotFoundError, version

from sqlalchemy import select
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import SQLAlchemyError

from core.tables import Item
from gateway.context import GatewayContext
from gateway.privacy.detect import MODEL
from gateway.settings import Settings

log = logging.getLogger("gateway")


def store_line(database_url: str) -> str:
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        return f"SQLite {url.database}"
    where = f"{url.host or 'localhost'}:{url.port or 5432}/{url.database or ''}"
    return f"PostgreSQL {where}" + (f" as {url.username}" if url.username else "")


def announce(settings: Settings, context: GatewayContext) -> None:
    """The start lines (INFO, on the `gateway` logger)."""
    try:
        release = version("governed-gateway")
    except PackageNotFoundError:
        release = "unknown"
    log.info("governed-gateway %s starting (pid %d)", release, os.getpid())
    log.info("store: %s", store_line(settings.effective_database_url))
    policy = context.policy
    label = f" ({policy.bundle.label})" if policy.bundle.label else ""
    log.info("policy: %s engine, revision %s%s", policy.name, policy.revision, label)
    privacy = context.privacy
    if privacy.detector is None:
        log.info("personal data: %s", privacy.unavailable)
    else:
        log.info(
            "personal data: Presidio with spaCy %s and the name models (%s), %s",
            MODEL,
            privacy.detector.version,
            "stored items analysed in the background" if privacy.worker is not None else "analysed at ingest",
        )
    queue = settings.admission_queue_units if settings.admission_queue_units is not None else 8 * settings.admission_capacity
    caps = ", ".join(
        f"{name} {value}"
        for name, value in (
            ("tenant concurrency", settings.admission_tenant_concurrency),
            ("actor concurrency", settings.admission_actor_concurrency),
            ("tenant rate", settings.admission_tenant_rate),
            ("actor rate", settings.admission_actor_rate),
        )
        if value is not None
    )
    log.info(
        "admission: %d seats, %d units may wait up to %d ms%s",
        settings.admission_capacity,
        queue,
        settings.admission_queue_wait_ms,
        f"; {caps}" if caps else "",
    )
    if not settings.database_url and _empty(context.store):
        log.info("first run? `gateway demo` loads sample tenants and prints their keys and a curl to try")
    log.info("listening on http://%s:%d", settings.host, settings.port)


def _empty(store: Engine) -> bool:
    """Whether the store holds no item yet (the demo hint is for a store nobody has written to)."""
    try:
        with store.connect() as conn:
            return conn.execute(select(Item.__table__.c.pk).limit(1)).first() is None  # type: ignore[attr-defined]
    except SQLAlchemyError:
        return False  # a store that cannot say is not a first run to hint at
