"""The Weaviate semantic connector: nearest neighbours inside an ItemFilter, one Weaviate tenant per tenant.

Always wrapped by `connectors.confirm.StoreConfirmed`, which applies what the filter cannot. See docs/weaviate.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

import anyio.to_thread
import weaviate
from weaviate.classes.config import Configure, VectorDistances
from weaviate.classes.data import DataObject
from weaviate.classes.init import AdditionalConfig, Auth, Timeout
from weaviate.classes.query import Filter, FilterReturn, MetadataQuery
from weaviate.exceptions import WeaviateBaseError
from weaviate.util import generate_uuid5

from connectors.weaviate.filters import NOTHING, item_filter_tree, to_weaviate
from connectors.weaviate.schema import (
    SCHEMA,
    VECTOR,
    _properties,
    properties_of,
    record_of,
    schema_description,
    schema_problems,
    weaviate_tenant,
)
from core.constraints import ItemFilter
from core.errors import ConfigurationError, ConnectorError
from core.records import Candidate, RecallQuery, Record, SkipReason, SourceResult

COLLECTION: Final = "GatewayItem"
DEFAULT_GRPC_PORT: Final = 50051
INSERT_CHUNK: Final = 200


def _error(action: str, exc: BaseException) -> ConnectorError:
    return ConnectorError(f"semantic {action} failed: {type(exc).__name__}")


class WeaviateConnector:
    """Nearest neighbours among the items the constraints admit, in the constraints' tenant.

    Built from a connected `weaviate.WeaviateClient` (the caller closes it) or a URL such as
    `http://weaviate:8080` (connected on first use, closed by `close()`); gRPC is on the same
    host at `grpc_port`.

    Its candidates come from a copy that can lag behind the store, and its filter leaves out the
    tombstoned-entity clause of `pushdown.permitted`: serve it only behind `StoreConfirmed`.
    """

    name = "semantic"

    def __init__(
        self,
        client: weaviate.WeaviateClient | str,
        *,
        model: str,
        dims: int,
        collection: str = COLLECTION,
        grpc_port: int = DEFAULT_GRPC_PORT,
        api_key: str | None = None,
        timeout_s: float = 10.0,
        on_created: Callable[[], object] | None = None,
    ) -> None:
        """`on_created` runs once when this connector creates its collection: the store's vectors
        of the model were never copied into it (the service forgets them, and they are made again)."""
        if dims < 1 or not model:
            raise ValueError("a semantic connector needs a model id and positive dimensions")
        self.model = model
        self.dims = dims
        self.collection = collection
        self._lock = threading.Lock()
        self._verified = False
        self._on_created = on_created
        if isinstance(client, str):
            self._url = urlsplit(client)
            if self._url.scheme not in ("http", "https") or not self._url.hostname:
                raise ConfigurationError("GATEWAY_WEAVIATE_URL must be http(s)://host[:port]")
            http_port = self._url.port or (443 if self._url.scheme == "https" else 8080)
            if http_port == grpc_port:  # the client refuses it on first use; say so at start instead
                raise ConfigurationError(f"GATEWAY_WEAVIATE_GRPC_PORT ({grpc_port}) must differ from the URL's HTTP port")
            self._client: weaviate.WeaviateClient | None = None
            self._owned = True
        else:
            self._client = client
            self._owned = False
        self._grpc_port = grpc_port
        self._api_key = api_key
        self._timeout_s = timeout_s

    # -- connection

    def _connected(self) -> weaviate.WeaviateClient:
        with self._lock:
            if self._client is None:
                secure = self._url.scheme == "https"
                host = self._url.hostname or ""
                self._client = weaviate.connect_to_custom(
                    http_host=host,
                    http_port=self._url.port or (443 if secure else 8080),
                    http_secure=secure,
                    grpc_host=host,
                    grpc_port=self._grpc_port,
                    grpc_secure=secure,
                    auth_credentials=Auth.api_key(self._api_key) if self._api_key else None,
                    additional_config=AdditionalConfig(
                        timeout=Timeout(init=self._timeout_s, query=self._timeout_s, insert=self._timeout_s * 6)
                    ),
                    skip_init_checks=True,
                )
            return self._client

    def close(self) -> None:
        """Close a client this connector opened (one passed in stays the caller's)."""
        with self._lock:
            client, self._client = (self._client, None) if self._owned else (None, self._client)
        if client is not None:
            client.close()

    # -- schema

    def ensure_schema(self) -> None:
        """Create the collection if it is missing, then check it fits (blocking). Writing and
        searching do this on first use, so a new deployment needs no separate step."""
        try:
            self._prepare(self._connected())
        except WeaviateBaseError as exc:
            raise _error("schema", exc) from exc

    def _prepare(self, client: weaviate.WeaviateClient) -> None:
        if self._verified:
            return
        created = False
        if not client.collections.exists(self.collection):
            try:
                created = True
                client.collections.create(
                    self.collection,
                    description=schema_description(self.model, self.dims),
                    properties=_properties(),
                    vector_config=Configure.Vectors.self_provided(
                        name=VECTOR,
                        vector_index_config=Configure.VectorIndex.hnsw(distance_metric=VectorDistances.COSINE),
                    ),
                    multi_tenancy_config=Configure.multi_tenancy(enabled=True, auto_tenant_creation=True),
                    inverted_index_config=Configure.inverted_index(index_null_state=True),
                )
            except WeaviateBaseError:
                created = False
                if not client.collections.exists(self.collection):  # not another replica creating it meanwhile
                    raise
        problems = schema_problems(client.collections.use(self.collection).config.get(), self.model, self.dims)
        if problems:
            raise ConnectorError("semantic: the Weaviate collection does not fit: " + "; ".join(problems))
        if created and self._on_created is not None:
            self._on_created()
        self._verified = True

    # -- writing

    def upsert(self, tenant: str, records_with_vectors: Iterable[tuple[Record, Sequence[float]]]) -> int:
        """Write records (idempotent by item id) into the tenant's shard; returns how many (blocking)."""
        shard = weaviate_tenant(tenant)
        objects: list[DataObject[dict[str, Any], None]] = []
        for record, vector in records_with_vectors:
            if record.tenant != tenant:
                raise ConnectorError("semantic: a record of another tenant cannot be written here")
            if len(vector) != self.dims:
                raise ConnectorError("semantic: a vector has other dimensions than the collection")
            objects.append(
                DataObject(properties=properties_of(record), uuid=generate_uuid5(record.id), vector={VECTOR: list(vector)})
            )
        try:
            client = self._connected()
            self._prepare(client)
            data = client.collections.use(self.collection).with_tenant(shard).data
            for start in range(0, len(objects), INSERT_CHUNK):
                outcome = data.insert_many(objects[start : start + INSERT_CHUNK])
                if outcome.has_errors:
                    raise ConnectorError(f"semantic upsert failed for {len(outcome.errors)} objects")
        except WeaviateBaseError as exc:
            raise _error("upsert", exc) from exc
        return len(objects)

    def forget(self, tenant: str, ids: tuple[str, ...]) -> int:
        """Delete the tenant's copies of these items (ones the store no longer holds); blocking."""
        if not ids:
            return 0
        try:
            client = self._connected()
            self._prepare(client)
            data = client.collections.use(self.collection).with_tenant(weaviate_tenant(tenant)).data
            outcome = data.delete_many(where=Filter.by_id().contains_any([generate_uuid5(i) for i in ids]))
        except WeaviateBaseError as exc:
            raise _error("delete", exc) from exc
        return int(outcome.successful)

    # -- searching

    async def search(self, where: ItemFilter, query: RecallQuery) -> SourceResult:
        started = time.perf_counter()
        tree = item_filter_tree(where, query.tags)
        if query.vector is None:
            return SourceResult.skipped(self.name, SkipReason.NO_QUERY_VECTOR)
        if query.model != self.model:
            raise ConnectorError("semantic: the query vector comes from another model than the index")
        if len(query.vector) != self.dims:
            raise ConnectorError("semantic: the query vector has other dimensions than the index")
        if tree == NOTHING or query.limit < 1:
            return SourceResult(
                self.name, "empty", ms=(time.perf_counter() - started) * 1000, detail="the constraints admit nothing"
            )
        native = to_weaviate(tree)
        shard = weaviate_tenant(where.tenant)
        candidates = await anyio.to_thread.run_sync(self._search, where.tenant, shard, native, query, abandon_on_cancel=True)
        ms = (time.perf_counter() - started) * 1000
        return SourceResult(self.name, "ok" if candidates else "empty", candidates, ms)

    def _search(self, tenant: str, shard: str, where: FilterReturn, query: RecallQuery) -> tuple[Candidate, ...]:
        assert query.vector is not None
        try:
            client = self._connected()
            self._prepare(client)
            collection = client.collections.use(self.collection).with_tenant(shard)
            response = collection.query.near_vector(
                near_vector=list(query.vector),
                limit=query.limit,
                filters=where,
                target_vector=VECTOR,
                return_metadata=MetadataQuery(distance=True),
                return_properties=list(SCHEMA),
            )
        except WeaviateBaseError as exc:
            if "tenant not found" in str(exc):  # a tenant that never wrote anything has no shard yet
                return ()
            raise _error("search", exc) from exc
        candidates: list[Candidate] = []
        for rank, obj in enumerate(response.objects, start=1):
            distance = obj.metadata.distance
            if distance is None:
                raise ConnectorError("semantic search failed: no distance returned")
            candidates.append(Candidate(record_of(dict(obj.properties), tenant), self.name, rank, 1.0 - float(distance)))
        return tuple(candidates)
