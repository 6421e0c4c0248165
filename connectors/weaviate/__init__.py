"""Semantic search on Weaviate (the scale-out deployment): filter translation, collection schema, connector.

See docs/weaviate.md.
"""

from connectors.weaviate.connector import COLLECTION, DEFAULT_GRPC_PORT, WeaviateConnector
from connectors.weaviate.filters import (
    HANDLED_FIELDS,
    NOT_ITEM_FILTERS,
    NOTHING,
    Node,
    check_fields,
    constraints_filter,
    item_filter_tree,
    to_weaviate,
)
from connectors.weaviate.schema import (
    FILTERED,
    SCHEMA,
    VECTOR,
    _properties,
    collection_for,
    properties_of,
    record_of,
    schema_description,
    schema_problems,
    weaviate_tenant,
)

__all__ = [
    "collection_for",
    "COLLECTION",
    "DEFAULT_GRPC_PORT",
    "FILTERED",
    "HANDLED_FIELDS",
    "NOTHING",
    "NOT_ITEM_FILTERS",
    "Node",
    "SCHEMA",
    "VECTOR",
    "WeaviateConnector",
    "_properties",  # private, but the tests build a live collection config from what it creates
    "check_fields",
    "constraints_filter",
    "item_filter_tree",
    "properties_of",
    "record_of",
    "schema_description",
    "schema_problems",
    "to_weaviate",
    "weaviate_tenant",
]
