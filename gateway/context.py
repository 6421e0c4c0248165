"""Everything a request handler needs, built once at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.engine import Engine

from audit.store import AuditStore
from connectors.fts import FullTextConnector
from connectors.sql import SqlExactConnector
from gateway.auth import Authenticator
from gateway.db import open_store
from gateway.policy import PolicyEngine, load_engine
from gateway.retrieve import Connectors
from gateway.settings import Settings


@dataclass(frozen=True, slots=True)
class GatewayContext:
    settings: Settings
    store: Engine
    policy: PolicyEngine
    authenticator: Authenticator
    connectors: Connectors
    audit: AuditStore


async def build_context(settings: Settings) -> GatewayContext:
    store = open_store(settings.effective_database_url)
    try:
        policy = await load_engine(settings)
    except BaseException:
        store.dispose()
        raise
    return GatewayContext(
        settings=settings,
        store=store,
        policy=policy,
        authenticator=Authenticator(store, settings),
        connectors=Connectors(exact=SqlExactConnector(store), lexical=FullTextConnector(store)),
        audit=AuditStore(store),
    )
