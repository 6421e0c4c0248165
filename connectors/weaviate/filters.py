"""An ItemFilter (and the caller's tags) as a Weaviate filter: a checkable tree first, then client objects.

Pure: no server is needed to build or check either form. See docs/weaviate.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any, Final

from weaviate.classes.query import Filter, FilterReturn

from connectors.weaviate.schema import DATE_PROPERTIES, SCHEMA
from core.constraints import ItemFilter
from core.errors import ConnectorError
from core.instants import parse_rfc3339, rfc3339

Node = dict[str, Any]
NOTHING: Final[Node] = {"nothing": True}

OPERATORS: Final = frozenset({"contains_any", "contains_all", "equal", "less_or_equal", "greater_than", "is_none"})

# ItemFilter fields the translation applies (tenant as the Weaviate tenant, the rest in the tree).
HANDLED_FIELDS: Final = frozenset(
    {"tenant", "kinds", "principals", "sensitivities", "statuses", "valid_at", "history", "scopes", "subjects"}
)
# ItemFilter fields that filter no item here: only entity_statuses, which governs entity lookups,
# and entity lookups never reach Weaviate. Any field in neither set is refused by `check_fields`
# when it carries a value: a new ItemFilter field fails the translation until someone decides its
# translation (or adds it here, with the reason).
NOT_ITEM_FILTERS: Final = frozenset({"entity_statuses"})


def _default(field: dataclasses.Field[Any]) -> object:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING  # a required field: any value is "set"


def check_fields(where: ItemFilter) -> None:
    """Refuse an ItemFilter carrying a field this translation does not know (with a non-default value)."""
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


def item_filter_tree(where: ItemFilter, tags: Sequence[str] = ()) -> Node:
    """`pushdown.permitted(where)` AND `pushdown.tagged(tags)` as a filter tree, except the tenant
    (the Weaviate tenant) and the tombstoned-entity clause (applied by StoreConfirmed on re-read)."""
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


constraints_filter = item_filter_tree  # the earlier name, kept for callers and tests


def to_weaviate(tree: Node) -> FilterReturn:
    """The filter tree as Weaviate filter objects; refuses anything it cannot express exactly."""
    if tree == NOTHING:
        raise ConnectorError("semantic: a filter that matches nothing has no Weaviate form; do not query")
    if set(tree) == {"all"} or set(tree) == {"any"}:
        ((key, children),) = tree.items()
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
