"""Everything a request handler needs, built once at start-up."""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import Engine

from audit.chain import load_or_create_key
from audit.integrity import Checkpointer, CheckpointLog, load_signer
from audit.store import AuditStore
from connectors.sql.exact import SqlExactConnector
from connectors.sql.graph import SqlGraphConnector
from connectors.sql.lexical import FullTextConnector
from connectors.sql.pgvector import PgvectorConnector
from connectors.sql.pgvector import prepare as prepare_pgvector
from connectors.sql.vectors import Admitted, StoredVectors, VectorConnector, VectorIndex
from core.errors import ConfigurationError
from core.store import open_store
from gateway.admission import Admission, load_admission
from gateway.auth import Authenticator
from gateway.pipeline.pipeline import Connectors, Pipeline
from gateway.pipeline.semantic import Semantic
from gateway.policy.archive import warn_if_vulnerable
from gateway.policy.factory import load_engine
from gateway.policy.reload import ReloadingEngine
from gateway.privacy.store import Privacy, load_privacy
from gateway.settings import AuditSettings, EmbeddingSettings, Settings
from gateway.synthesis.client import Synthesizer
from gateway.telemetry import NOOP, Telemetry, build_telemetry
from gateway.writes.embeddings import Embedder, OnnxEmbedder, load_embedder
from gateway.writes.supplied import VectorIntake
from gateway.writes.vectorize import EmbeddingWorker, forget_vectors, publish_to_weaviate

if TYPE_CHECKING:  # Weaviate's client is imported only by a deployment that sets GATEWAY_WEAVIATE_URL
    from connectors.weaviate import WeaviateConnector

log = logging.getLogger("gateway.context")


@dataclass(frozen=True, slots=True)
class GatewayContext:
    settings: Settings
    store: Engine
    policy: ReloadingEngine
    authenticator: Authenticator
    connectors: Connectors
    audit: AuditStore
    privacy: Privacy
    synthesizer: Synthesizer | None = None
    telemetry: Telemetry = NOOP
    admission: Admission = field(default_factory=lambda: load_admission(Settings(), {}))

    pipeline: Pipeline = field(init=False, repr=False)

    def __post_init__(self) -> None:
        """The retrieve pipeline, built once over this context's store, policy and connectors."""
        pipeline = Pipeline(self.settings, self.store, self.policy, self.connectors, self.privacy, self.synthesizer)
        object.__setattr__(self, "pipeline", pipeline)

    def nudge_workers(self) -> None:
        """Something was written: embedding and personal-data analysis have work."""
        for worker in (self.connectors.semantic.worker, self.privacy.worker):
            if worker is not None:
                worker.nudge()


def lexical_engine(setting: str, dialect: str) -> str:
    """`auto`: Tantivy on either store (`dialect`, SQLite or PostgreSQL). Its per-process threads
    stop with the service (`TextIndex.close`, at shutdown) and a first build runs on the search's
    own connection, which the deadline can interrupt; PostgreSQL's own ranking scores every
    permitted match, so it answers only while a tenant's index builds, or with `store`."""
    if setting == "auto":
        return "tantivy"
    return setting


async def build_context(settings: Settings, telemetry: Telemetry | None = None) -> GatewayContext:
    """Everything the service runs on; `telemetry` replaces the one the settings describe (tests
    hand in one with in-memory exporters)."""
    warn_if_vulnerable()  # once per process: on a Python whose tarfile backtracks (CVE-2024-6232), one WARNING line
    store = open_store(settings.effective_database_url)
    try:
        lexical = FullTextConnector(store, lexical_engine(settings.lexical_engine, store.dialect.name))
        # first: it may refuse to start, before policy workers exist; the lexical index lists a
        # filter's rows for it (semantic search plans by their count)
        semantic = build_semantic(settings, store, admitted=lexical.admitted)
        policy = await load_engine(settings)
    except BaseException:
        store.dispose()
        raise
    return GatewayContext(
        settings=settings,
        store=store,
        policy=policy,
        authenticator=Authenticator(store, settings),
        connectors=Connectors(
            exact=SqlExactConnector(store),
            lexical=lexical,
            semantic=semantic,
            graph=SqlGraphConnector(store),
        ),
        audit=AuditStore(
            store,
            settings.audit_key.encode() if settings.audit_key else load_or_create_key(store),
            build_checkpointer(settings, store),
        ),
        privacy=load_privacy(store, settings.pii, settings.pii_background, background_processes(settings.pii_processes)),
        synthesizer=(
            Synthesizer(settings.llm_url, settings.llm_model, settings.llm_key, settings.llm_timeout_ms)
            if settings.llm_url
            else None
        ),
        telemetry=telemetry or build_telemetry(settings),
        admission=load_admission(settings, policy.bundle.data.get("gateway", {}).get("config", {})),
    )


def build_checkpointer(settings: AuditSettings, store: Engine) -> Checkpointer | None:
    """With GATEWAY_AUDIT_SIGNING_KEY: the signer of the audit chains' checkpoints."""
    if settings.audit_signing_key is None or settings.audit_checkpoints is None:
        return None
    from audit.integrity import WitnessClient, load_verifier

    witness = WitnessClient(settings.audit_witness_url) if settings.audit_witness_url else None
    previous = [load_verifier(Path(p.strip())) for p in (settings.audit_previous_keys or "").split(",") if p.strip()]
    return Checkpointer(
        store,
        load_signer(settings.audit_signing_key),
        CheckpointLog(settings.audit_checkpoints),
        settings.audit_checkpoint_rows,
        settings.audit_checkpoint_seconds,
        witness=witness,
        previous=previous,
    )


def build_weaviate(settings: EmbeddingSettings, embedder: Embedder, store: Engine) -> "WeaviateConnector":
    """The Weaviate connector of GATEWAY_WEAVIATE_URL, for the model's vectors, in the model's own
    collection; when it has to create that collection, the store's vectors of the model are
    forgotten, so the worker (or `gateway embed`) makes and copies them again."""
    from connectors.weaviate import WeaviateConnector, collection_for

    assert settings.weaviate_url
    return WeaviateConnector(
        settings.weaviate_url,
        model=embedder.model_id,
        dims=embedder.dims,
        collection=collection_for(settings.weaviate_collection, embedder.model_id),
        on_created=functools.partial(forget_vectors, store, embedder.model_id),
        grpc_port=settings.weaviate_grpc_port,
        api_key=settings.weaviate_api_key,
    )


def usable_cores() -> int:
    """The cores this process may run on (a container's CPU set, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def background_processes(setting: int | None) -> int:
    """The background analysis's pool size from GATEWAY_PII_PROCESSES: 0 (in this process) for 1,
    one per usable core when unset."""
    wanted = usable_cores() if setting is None else setting
    return wanted if wanted > 1 else 0


def _bulk(settings: Settings, embedder: Embedder) -> Embedder | None:
    """The background worker's own copy of the packaged model, a session per usable core (as
    `gateway embed` runs it): its batches use every core while no call waits, and a call's query
    runs on the service's session, never queued behind a batch. None for an endpoint."""
    if not isinstance(embedder, OnnxEmbedder):
        return None
    bulk, _ = load_embedder(settings, threads=usable_cores(), bulk=True)
    return bulk if bulk is not None and bulk.model_id == embedder.model_id else None


def build_semantic(settings: Settings, store: Engine, admitted: Admitted | None = None) -> Semantic:
    """The embedded vector index and its embedding worker, or the reason semantic search is off."""
    embedder, note = load_embedder(settings)
    if embedder is None:
        return Semantic(None, None, None, note)
    log.info("embedding model: %s (%d dimensions)%s", embedder.model_id, embedder.dims, f"; {note}" if note else "")
    made = functools.partial(
        Semantic,
        fallback=note,
        stored=StoredVectors(store, embedder.model_id, embedder.dims),
        intake=VectorIntake(embedder.model_id, embedder.dims),
    )
    if settings.weaviate_url:
        from connectors.confirm import StoreConfirmed

        weaviate = build_weaviate(settings, embedder, store)
        publish = functools.partial(publish_to_weaviate, weaviate)
        # Vectors items carry are copied to Weaviate, as the worker's are, before they count as stored.
        made = functools.partial(made, intake=VectorIntake(embedder.model_id, embedder.dims, publish))
        worker = (
            EmbeddingWorker(store, embedder, publish=publish, bulk=_bulk(settings, embedder), side_by_side=usable_cores())
            if settings.background_embedding
            else None
        )
        return made(embedder, StoreConfirmed(weaviate, store), worker, close=weaviate.close)
    worker = (
        EmbeddingWorker(store, embedder, bulk=_bulk(settings, embedder), side_by_side=usable_cores())
        if settings.background_embedding
        else None
    )
    if settings.vector_index != "memory":
        # pgvector: the index lives in the store, so nothing vector-shaped is held (or warmed) here.
        reason = prepare_pgvector(store, embedder.dims, settings.pgvector_index)
        if reason is None:
            connector = PgvectorConnector(store, embedder.model_id, embedder.dims, index=settings.pgvector_index)
            return made(embedder, connector, worker)
        if settings.vector_index == "pgvector":
            raise ConfigurationError(f"GATEWAY_VECTOR_INDEX=pgvector: {reason}")
        if settings.pgvector_index == "ivfflat" and store.dialect.name == "postgresql":
            # asked for pgvector's IVFFlat on PostgreSQL: never the in-process index in its place
            raise ConfigurationError(f"GATEWAY_PGVECTOR_INDEX=ivfflat: {reason}")
        log.debug("vector index: in-process (%s)", reason)  # the default: not worth a start line
    index = VectorIndex(store, embedder.model_id, embedder.dims, admitted=admitted)
    return made(embedder, VectorConnector(index), worker)
