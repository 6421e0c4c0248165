"""The Weaviate collection: its properties, the check of a live collection, records <-> objects, tenants.

See docs/weaviate.md.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any, Final

from weaviate.classes.config import DataType, Property, Tokenization, VectorDistances

from core.errors import ConnectorError
from core.instants import parse_rfc3339, rfc3339, to_utc
from core.records import Record

VECTOR: Final = "default"  # the one named vector of the collection

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

TENANT_ESCAPES: Final = {"_": "__", ".": "_d", "@": "_a", ":": "_c"}
WEAVIATE_TENANT: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


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


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


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


# ---------------------------------------------------------------- the collection


def collection_for(base: str, model: str) -> str:
    """The collection of one embedding model: `GATEWAY_WEAVIATE_COLLECTION`, then the model id in
    the characters a collection name allows. A model change writes a collection of its own, so no
    search ever compares vectors of two models, even while replicas of both run."""
    return f"{base}_{re.sub('[^0-9A-Za-z]+', '_', model).strip('_')}"


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
        elif (
            name in FILTERED
            and tokenization is not None
            and (prop.tokenization != tokenization or getattr(prop, "text_analyzer", None) is not None)
        ):
            problems.append(f"property {name!r} is not tokenized as {tokenization.value}")
        elif name in FILTERED and not getattr(prop, "index_filterable", True):
            problems.append(f"property {name!r} is not filterable")
    return problems


def _properties() -> list[Property]:
    """The properties `ensure_schema` creates the collection with."""
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
