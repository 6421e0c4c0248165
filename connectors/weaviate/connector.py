"""Semantic connector on Weaviate (the scale-out deployment): nearest neighbours inside the constraints.

One collection (default `GatewayItem`) with multi-tenancy: one Weaviate tenant per gateway tenant,
chosen with `with_tenant`, so a search never reaches another tenant's shard and no tenant property
exists to filter on. Vectors come from the gateway (no vectorizer); the collection records the
model id and dimensions it was built for, and a query of another model or length is refused.

Constraints are translated in two steps, so the translation can be checked without a server:

1. `constraints_filter(constraints, tags)` -> a small JSON-serialisable tree of our own:

       node := {"all": [node, ...]}                      every child holds (never empty)
             | {"any": [node, ...]}                      some child holds (never empty)
             | {"property": P, "op": OP, "value": V}     one condition on one property
             | {"nothing": true}                         matches no object (only as the whole tree)

       OP := "contains_any"  V a non-empty list of strings: a text[] property shares one of them,
                             a text property equals one of them
           | "contains_all"  V a non-empty list of strings: the text[] property holds every one
           | "equal"         V a bool
           | "less_or_equal" | "greater_than"   V an RFC3339 instant, compared with a date property
           | "is_none"       V a bool: the property is (true) or is not (false) null

2. `to_weaviate(tree)` -> `weaviate.classes.query.Filter` objects. `{"nothing": true}` has no
   Weaviate form: the connector answers "empty" without querying. An empty "all" or "any", an
   unknown operator or property is refused (ConnectorError): never a missing filter.

The tree is exactly `connectors.pushdown.permitted(constraints)` AND `tagged(tags)`, tenant aside:

    tenant         the Weaviate tenant (`weaviate_tenant`), never a filter
    kinds          kind in kinds                   (empty -> nothing)
    principals     acl shares one principal        (empty -> nothing)
    sensitivities  sensitivity in sensitivities    (empty -> nothing)
    statuses       status in statuses              (empty -> nothing)
    valid_at       valid_from null or <= valid_at, and valid_to null or > valid_at
    scopes         scoped is false, or scope shares one of scopes (empty -> scoped is false)
    subjects       attached_to null, or in subjects            (empty -> attached_to null)
    caller tags    tags holds every tag (ANDed, never instead of the above)

`graph_relations`, `graph_max_depth` (graph traversal knobs) and `policy_result` (the raw decision)
filter no item, in `permitted` as here. Any other Constraints field carrying a non-default value
makes the translation refuse (ConnectorError): a filter is never silently dropped.

Weaviate matches text through the property's tokenization. Every filtered text property uses
`field` tokenization (the whole value is one case-sensitive token), never the default `word`, which
would split "group:finance" into "group" and "finance" and let "group:sales" match it. `field`
trims surrounding whitespace; no stored envelope value can carry any (ingest patterns), so a filter
value that does is left out, as it could match nothing in SQL either. On first use the connector
checks the live collection (model, dimensions, cosine distance, null-state index, tokenization) and
refuses a collection built otherwise.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, Final
from urllib.parse import urlsplit

import anyio.to_thread
import weaviate
from weaviate.classes.config import Configure, DataType, Property, Tokenization, VectorDistances
from weaviate.classes.data import DataObject
from weaviate.classes.init import AdditionalConfig, Auth, Timeout
from weaviate.classes.query import Filter, FilterReturn, MetadataQuery
from weaviate.exceptions import WeaviateBaseError
from weaviate.util import generate_uuid5

from core.constraints import ItemFilter

from core.records import Candidate, Record, RecallQuery, SkipReason, SourceResult
from core.instants import parse_rfc3339, rfc3339, to_utc
from core.errors import ConnectorError

COLLECTION: Final = "GatewayItem"
VECTOR: Final = "default"  # the one named vector of the collection
DEFAULT_GRPC_PORT: Final = 50051
INSERT_CHUNK: Final = 200

Node = dict[str, Any]
NOTHING: Final[Node] = {"nothing": True}

# Constraints fields the translation applies, and those that filter no item (as in pushdown.permitted).
HANDLED_FIELDS: Final = frozenset(
    {"tenant", "kinds", "principals", "sensitivities", "statuses", "valid_at", "history", "scopes", "subjects"}
)
# entity_statuses governs entity lookups only, which never reach Weaviate.
NOT_ITEM_FILTERS: Final = frozenset({"entity_statuses"})

# name -> (data type, tokenization); text properties that are filtered use FIELD tokenization.
SCHEMA: Final[dict[str, tuple[DataType, Tokenization | None]]] = {
    "item_id": (DataType.TEXT, Tokenization.FIELD),
    "kind": (DataType.TEXT, Tokenization.FIELD),
    "text": (DataType.TEXT, Tokenization.WORD),
    "acl": (DataType.TEXT_ARRAY, Tokenization.FIELD),
    "sensitivity": (DataType.TEXT, Tokenization.FIELD),
    "valid_from": (DataType.DATE, None),
    "valid_to": (DataType.DATE, None),
    "scope": (DataType.TEXT_ARRAY, Tokenization.FIELD),
    "scoped": (DataType.BOOL, None),
    "authority": (DataType.TEXT, Tokenization.FIELD),
    "status": (DataType.TEXT, Tokenization.FIELD),
    "slot": (DataType.TEXT, Tokenization.FIELD),
    "attached_to": (DataType.TEXT, Tokenization.FIELD),
    "entity": (DataType.TEXT, Tokenization.FIELD),
    "section": (DataType.TEXT, Tokenization.FIELD),
    "document": (DataType.TEXT, Tokenization.FIELD),
    "tags": (DataType.TEXT_ARRAY, Tokenization.FIELD),
    "source_system": (DataType.TEXT, Tokenization.FIELD),
    "source_uri": (DataType.TEXT, Tokenization.FIELD),
    "recorded_at": (DataType.DATE, None),
    "relation": (DataType.TEXT, Tokenization.FIELD),
    "edge_from": (DataType.TEXT, Tokenization.FIELD),
    "edge_to": (DataType.TEXT, Tokenization.FIELD),
    "confidence": (DataType.NUMBER, None),
    "weight": (DataType.NUMBER, None),
}
FILTERED: Final = frozenset(
    {"kind", "acl", "sensitivity", "valid_from", "valid_to", "scope", "scoped", "status", "attached_to", "tags"}
)
DATE_PROPERTIES: Final = frozenset(name for name, (data_type, _) in SCHEMA.items() if data_type == DataType.DATE)
OPERATORS: Final = frozenset({"contains_any", "contains_all", "equal", "less_or_equal", "greater_than", "is_none"})

TENANT_ESCAPES: Final = {"_": "__", ".": "_d", "@": "_a", ":": "_c"}
WEAVIATE_TENANT: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


# ---------------------------------------------------------------- translation (pure)


def _default(field: dataclasses.Field[Any]) -> object:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING  # a required field: any value is "set"


def check_fields(where: ItemFilter) -> None:
    """Refuse constraints carrying a field this translation does not know (with a non-default value)."""
    for field in dataclasses.fields(where):
        if field.name in HANDLED_FIELDS or field.name in NOT_ITEM_FILTERS:
            continue
        default = _default(field)
        if default is dataclasses.MISSING or getattr(where, field.name) != default:
            raise ConnectorError(
                f"semantic: constraint {field.name!r} has no Weaviate translation; refusing to search without it"
            )


def _exact(values: Iterable[str]) -> list[str]:
    """Distinct values, in order, leaving out those `field` tokenization would trim (they match nothing)."""
    return list(dict.fromkeys(v for v in values if v == v.strip() and v))


def _leaf(prop: str, op: str, value: Any) -> Node:
    return {"property": prop, "op": op, "value": value}


def _one_of(prop: str, values: Iterable[str]) -> Node:
    wanted = _exact(values)
    return _leaf(prop, "contains_any", wanted) if wanted else NOTHING


def _all(*nodes: Node) -> Node:
    if any(node == NOTHING for node in nodes):
        return NOTHING
    return {"all": list(nodes)}


def _any(*nodes: Node) -> Node:
    kept = [node for node in nodes if node != NOTHING]
    if not kept:
        return NOTHING
    return kept[0] if len(kept) == 1 else {"any": kept}


def constraints_filter(where: ItemFilter, tags: Sequence[str] = ()) -> Node:
    """`pushdown.permitted(constraints)` AND `pushdown.tagged(tags)` as a filter tree (tenant aside)."""
    check_fields(where)
    if not where.principals or not where.kinds:
        return NOTHING
    at = rfc3339(where.valid_at)
    clauses = [
        _one_of("kind", where.kinds),
        _one_of("sensitivity", where.sensitivities),
        _one_of("status", where.statuses),
        _any(_leaf("valid_from", "is_none", True), _leaf("valid_from", "less_or_equal", at)),
        # With history, whatever had started by the instant counts, ended or not.
        *([] if where.history else [_any(_leaf("valid_to", "is_none", True), _leaf("valid_to", "greater_than", at))]),
        _one_of("acl", where.principals),
        _any(_leaf("scoped", "equal", False), _one_of("scope", where.scopes)),
        _any(_leaf("attached_to", "is_none", True), _one_of("attached_to", where.subjects)),
    ]
    if tags:
        wanted = _exact(tags)
        if len(wanted) < len(set(tags)):  # a tag no item can carry: nothing has every tag
            return NOTHING
        clauses.append(_leaf("tags", "contains_all", wanted))
    return _all(*clauses)


def to_weaviate(tree: Node) -> FilterReturn:
    """The filter tree as Weaviate filter objects; refuses anything it cannot express exactly."""
    if tree == NOTHING:
        raise ConnectorError("semantic: a filter that matches nothing has no Weaviate form; do not query")
    if set(tree) == {"all"} or set(tree) == {"any"}:
        (key, children), = tree.items()
        if not isinstance(children, list) or not children:
            raise ConnectorError(f"semantic: an empty {key!r} node is not a filter")
        converted = [to_weaviate(child) for child in children]
        return Filter.all_of(converted) if key == "all" else Filter.any_of(converted)
    if set(tree) != {"property", "op", "value"}:
        raise ConnectorError("semantic: unknown filter node")
    prop, op, value = tree["property"], tree["op"], tree["value"]
    if prop not in SCHEMA or op not in OPERATORS:
        raise ConnectorError("semantic: unknown filter property or operator")
    target = Filter.by_property(prop)
    if op == "is_none":
        return target.is_none(bool(value))
    if op == "equal":
        return target.equal(value)
    if op in ("contains_any", "contains_all"):
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise ConnectorError("semantic: a contains filter needs a non-empty list of strings")
        return target.contains_any(value) if op == "contains_any" else target.contains_all(value)
    if prop not in DATE_PROPERTIES or not isinstance(value, str):
        raise ConnectorError("semantic: a range filter needs a date property and an instant")
    instant = parse_rfc3339(value)
    return target.less_or_equal(instant) if op == "less_or_equal" else target.greater_than(instant)


def weaviate_tenant(tenant: str) -> str:
    """The Weaviate tenant of a gateway tenant: one-to-one (`_` escapes `_ . @ :`), at most 64 characters."""
    name = "".join(TENANT_ESCAPES.get(ch, ch) for ch in tenant)
    if not WEAVIATE_TENANT.fullmatch(name):
        raise ConnectorError("semantic: the tenant name has no Weaviate tenant form")
    return name


# ---------------------------------------------------------------- records <-> objects


def properties_of(record: Record) -> dict[str, Any]:
    """The Weaviate properties of a record (its tenant is the Weaviate tenant; nulls are left out)."""
    props: dict[str, Any] = {
        "item_id": record.id,
        "kind": record.kind,
        "text": record.text,
        "acl": list(record.acl),
        "sensitivity": record.sensitivity,
        "valid_from": rfc3339(record.valid_from),
        "valid_to": rfc3339(record.valid_to),
        "scope": list(record.scope),
        "scoped": bool(record.scope),
        "authority": record.authority,
        "status": record.status,
        "slot": record.slot,
        "attached_to": record.attached_to,
        "entity": record.entity,
        "section": record.section,
        "document": record.document,
        "tags": list(record.tags),
        "source_system": record.source_system,
        "source_uri": record.source_uri,
        "recorded_at": rfc3339(record.recorded_at),
        "relation": record.relation,
        "edge_from": record.edge_from,
        "edge_to": record.edge_to,
        "confidence": record.confidence,
        "weight": record.weight,
    }
    return {name: value for name, value in props.items() if value is not None}


def _instant(value: Any) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return to_utc(value)
    return parse_rfc3339(str(value))


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def record_of(props: dict[str, Any], tenant: str) -> Record:
    """A Record from a Weaviate object's properties; `tenant` is the gateway tenant that was searched."""
    return Record(
        id=str(props["item_id"]),
        kind=str(props["kind"]),
        tenant=tenant,
        text=str(props.get("text") or ""),
        acl=tuple(props.get("acl") or ()),
        sensitivity=str(props["sensitivity"]),
        scope=tuple(props.get("scope") or ()),
        authority=str(props["authority"]),
        status=str(props["status"]),
        valid_from=_instant(props.get("valid_from")),
        valid_to=_instant(props.get("valid_to")),
        recorded_at=_instant(props.get("recorded_at")),
        entity=_text(props.get("entity")),
        section=_text(props.get("section")),
        document=_text(props.get("document")),
        slot=_text(props.get("slot")),
        attached_to=_text(props.get("attached_to")),
        source_system=_text(props.get("source_system")),
        source_uri=_text(props.get("source_uri")),
        tags=tuple(props.get("tags") or ()),
        relation=_text(props.get("relation")),
        edge_from=_text(props.get("edge_from")),
        edge_to=_text(props.get("edge_to")),
        confidence=_number(props.get("confidence")),
        weight=_number(props.get("weight")),
    )


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


# ---------------------------------------------------------------- schema


def schema_description(model: str, dims: int) -> str:
    return json.dumps({"gateway": "semantic", "model": model, "dims": dims}, sort_keys=True)


def schema_problems(config: Any, model: str, dims: int) -> list[str]:
    """What makes a live collection config unfit for this connector (empty when fit). No values quoted."""
    problems: list[str] = []
    try:
        described = json.loads(config.description or "")
    except ValueError:
        described = None
    if not isinstance(described, dict) or described.get("model") != model:
        problems.append("the collection was built for another embedding model")
    elif described.get("dims") != dims:
        problems.append("the collection was built for other vector dimensions")
    if not config.multi_tenancy_config.enabled:
        problems.append("multi-tenancy is not enabled")
    if not config.inverted_index_config.index_null_state:
        problems.append("the null-state index is off (is_none filters need it)")
    vectors = config.vector_config or {}
    index = vectors[VECTOR].vector_index_config if VECTOR in vectors else None
    if getattr(index, "distance_metric", None) != VectorDistances.COSINE:
        problems.append(f"the {VECTOR!r} vector does not use cosine distance")
    live = {prop.name: prop for prop in config.properties}
    for name, (data_type, tokenization) in SCHEMA.items():
        prop = live.get(name)
        if prop is None or prop.data_type != data_type:
            problems.append(f"property {name!r} is missing or of another type")
        elif name in FILTERED and tokenization is not None and (
            prop.tokenization != tokenization or getattr(prop, "text_analyzer", None) is not None
        ):
            problems.append(f"property {name!r} is not tokenized as {tokenization.value}")
        elif name in FILTERED and not getattr(prop, "index_filterable", True):
            problems.append(f"property {name!r} is not filterable")
    return problems


def _properties() -> list[Property]:
    return [
        Property(
            name=name,
            data_type=data_type,
            tokenization=tokenization,
            index_filterable=name in FILTERED or name in ("item_id", "entity", "document"),
            index_searchable=name == "text",  # BM25 only over the body; the rest are exact-match fields
        )
        for name, (data_type, tokenization) in SCHEMA.items()
    ]


# ---------------------------------------------------------------- connector


def _error(action: str, exc: BaseException) -> ConnectorError:
    return ConnectorError(f"semantic {action} failed: {type(exc).__name__}")


class WeaviateConnector:
    """Nearest neighbours among the items the constraints admit, in the constraints' tenant.

    Built from a connected `weaviate.WeaviateClient` (the caller closes it) or a URL such as
    `http://weaviate:8080` (connected on first use, closed by `close()`); gRPC is on the same
    host at `grpc_port`.
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
    ) -> None:
        if dims < 1 or not model:
            raise ValueError("a semantic connector needs a model id and positive dimensions")
        self.model = model
        self.dims = dims
        self.collection = collection
        self._lock = threading.Lock()
        self._verified = False
        if isinstance(client, str):
            self._url = urlsplit(client)
            if self._url.scheme not in ("http", "https") or not self._url.hostname:
                raise ValueError("the Weaviate URL must be http(s)://host[:port]")
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
        """Create the collection if it is missing, then check it fits (blocking)."""
        try:
            client = self._connected()
            if not client.collections.exists(self.collection):
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
            self._verify(client)
        except WeaviateBaseError as exc:
            raise _error("schema", exc) from exc

    def _verify(self, client: weaviate.WeaviateClient) -> None:
        if self._verified:
            return
        problems = schema_problems(client.collections.use(self.collection).config.get(), self.model, self.dims)
        if problems:
            raise ConnectorError("semantic: the Weaviate collection does not fit: " + "; ".join(problems))
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
            self._verify(client)
            data = client.collections.use(self.collection).with_tenant(shard).data
            for start in range(0, len(objects), INSERT_CHUNK):
                outcome = data.insert_many(objects[start : start + INSERT_CHUNK])
                if outcome.has_errors:
                    raise ConnectorError(f"semantic upsert failed for {len(outcome.errors)} objects")
        except WeaviateBaseError as exc:
            raise _error("upsert", exc) from exc
        return len(objects)

    # -- searching

    async def search(self, where: ItemFilter, query: RecallQuery) -> SourceResult:
        started = time.perf_counter()
        tree = constraints_filter(where, query.tags)
        if query.vector is None:
            return SourceResult.skipped(self.name, SkipReason.NO_QUERY_VECTOR)
        if query.model != self.model:
            raise ConnectorError("semantic: the query vector comes from another model than the index")
        if len(query.vector) != self.dims:
            raise ConnectorError("semantic: the query vector has other dimensions than the index")
        if tree == NOTHING or query.limit < 1:
            return SourceResult(self.name, "empty", ms=(time.perf_counter() - started) * 1000, detail="the constraints admit nothing")
        native = to_weaviate(tree)
        shard = weaviate_tenant(where.tenant)
        candidates = await anyio.to_thread.run_sync(self._search, where.tenant, shard, native, query, abandon_on_cancel=True)
        ms = (time.perf_counter() - started) * 1000
        return SourceResult(self.name, "ok" if candidates else "empty", candidates, ms)

    def _search(self, tenant: str, shard: str, where: FilterReturn, query: RecallQuery) -> tuple[Candidate, ...]:
        assert query.vector is not None
        try:
            client = self._connected()
            self._verify(client)
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
