"""Whether a bundle's items policy could decide an item by its id, read from the policy's syntax tree.

When it cannot, every item with the same envelope but for its id gets the same verdict, and the
embedded engine evaluates one item per distinct envelope (gateway/policy/worker.py). The check is
conservative: it answers "may read ids" (with the place) for anything it does not recognise.

What it accepts, over every module of the bundle (regorus's AST, spans stripped):
- `input.items` only as the collection of `some [i,] item in input.items`, or indexed by a
  variable or number (`input.items[i]`), then bound to a variable or read a field of;
- an item (such a variable, or `input.items[i]`) only read a field of, by a literal name, or by
  `object.get(item, <literal>, <default>)`, or by a variable bound by `some f in [<literals>]`;
- the field `id` of an item only as the first element of a `failures` rule's head
  (`failures contains [item.id, reason]`), inside `is_string(item.id)` (the same answer for every string), or in the id
  plumbing of the shipped policy: the rules `allowed`, `denied`, `failed_ids` and `first_failure`
  of package gateway.items, accepted only when they are exactly the shipped ones. Those read ids
  only to join an item with its own failures, never for their values;
- the documents that hold item ids (`failures`, `failed_ids`, `allowed`, `denied`) read only by
  that plumbing;
- no `with`, no bare `input`, no import of `input` or of data.gateway.items.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

from gateway.policy.bundle import PolicyBundle
from gateway.policy.embedded import new_engine

ITEMS_PACKAGE = "gateway.items"
PLUMBING = ("allowed", "denied", "failed_ids", "first_failure")
ID_DOCUMENTS = frozenset({"failures", "failed_ids", "allowed", "denied"})


class ReadsIds(Exception):
    """Where the policy may read an item's id (or does something the check does not follow)."""


def id_read(bundle: PolicyBundle, shipped: PolicyBundle | None = None) -> str | None:
    """None when no verdict of the bundle's items policy can depend on an item's id; otherwise
    where it may (`file:line: what`). `shipped` is the project's own bundle, whose id plumbing
    rules a bundle may keep as they are."""
    try:
        modules = _modules(bundle)
        reference = _plumbing(_modules(shipped)) if shipped is not None else {}
        for path, package, rules in modules:
            for rule in rules:
                name = _rule_name(rule)
                if package == ITEMS_PACKAGE and name in PLUMBING:
                    if name not in reference or _strip(rule) not in reference[name]:
                        raise ReadsIds(f"{path}:{_line(rule)}: the rule {name} is not the shipped one")
                    continue
                _Rule(path, package, name).check(rule)
    except ReadsIds as exc:
        return str(exc)
    except Exception as exc:  # a tree the check does not know: assume ids are read
        return f"the policy's syntax tree could not be checked ({type(exc).__name__})"
    return None


def _modules(bundle: PolicyBundle) -> list[tuple[str, str, list[Any]]]:
    engine = new_engine()
    for path, source in bundle.modules:
        engine.add_policy(str(path), source)
    found = []
    for module in json.loads(engine.get_ast_as_json()):
        package = _ref_name(module["ast"]["package"]["refr"])
        for imported in module["ast"].get("imports") or ():
            name = _ref_name(imported["refr"])
            if name == "input" or name.startswith(("input.", "data.gateway.items")):
                raise ReadsIds(f"{module['source']['file']}:{_line(imported)}: import {name}")
        found.append((module["source"]["file"], package, module["ast"]["rules"]))
    return found


def _plumbing(modules: list[tuple[str, str, list[Any]]]) -> dict[str, list[Any]]:
    rules: dict[str, list[Any]] = {}
    for _, package, found in modules:
        if package != ITEMS_PACKAGE:
            continue
        for rule in found:
            name = _rule_name(rule)
            if name in PLUMBING:
                rules.setdefault(name, []).append(_strip(rule))
    return rules


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k not in ("span", "eidx", "sidx", "qidx")}
    if isinstance(node, list):
        return [_strip(v) for v in node if not (isinstance(v, dict) and {"line", "col", "start", "end"} <= set(v))]
    return node


def _line(node: Any) -> int:
    if isinstance(node, dict):
        span = node.get("span")
        if isinstance(span, dict) and "line" in span:
            return int(span["line"])
        for value in node.values():
            line = _line(value)
            if line:
                return line
    if isinstance(node, list):
        for value in node:
            line = _line(value)
            if line:
                return line
    return 0


def _is_node(node: dict[str, Any]) -> bool:
    """An AST node is a one-key object named by its kind (`Var`, `RefDot`, ...)."""
    return len(node) == 1 and next(iter(node))[:1].isupper()


def _kind(node: Any) -> tuple[str, Any]:
    ((kind, payload),) = node.items()
    return kind, payload


def _ref_name(node: Any) -> str:
    kind, payload = _kind(node)
    if kind == "Var":
        return str(payload["value"])
    if kind == "RefDot":
        return f"{_ref_name(payload['refr'])}.{payload['field'][-1]}"
    raise ReadsIds(f"line {_line(node)}: a rule or package name the check does not follow")


def _rule_name(rule: Any) -> str:
    kind, payload = _kind(rule)
    head = payload["refr"] if kind == "Default" else _kind(payload["head"])[1]["refr"]
    return _ref_name(head)


def _chain(node: Any) -> tuple[Any, list[tuple[str, Any]]]:
    """A reference as its base and its accessors, outermost last: ("field", name) or ("index", node)."""
    accessors: list[tuple[str, Any]] = []
    while True:
        kind, payload = _kind(node)
        if kind == "RefDot":
            accessors.append(("field", payload["field"][-1]))
            node = payload["refr"]
        elif kind == "RefBrack":
            index_kind, index = _kind(payload["index"])
            accessors.append(("field", index["value"]) if index_kind == "String" else ("index", payload["index"]))
            node = payload["refr"]
        else:
            accessors.reverse()
            return node, accessors


class _Rule:
    """One rule's check: its item variables, literal-key variables, and each use of them."""

    def __init__(self, path: str, package: str, name: str) -> None:
        self.path, self.package, self.name = path, package, name
        self.items: set[str] = set()
        self.keys: dict[str, frozenset[str]] = {}

    def fail(self, node: Any, what: str) -> NoReturn:
        raise ReadsIds(f"{self.path}:{_line(node)}: {what} (rule {self.name})")

    def check(self, rule: Any) -> None:
        self._bind(rule)
        kind, payload = _kind(rule)
        if kind == "Default":
            self.visit(payload["value"])
            return
        _, head = _kind(payload["head"])
        in_failures = self.package == ITEMS_PACKAGE and self.name == "failures"
        key = head.get("key")
        if key is not None:  # `failures contains [item.id, reason]` names its item's id first, and only there
            if in_failures and _kind(key)[0] == "Array" and _kind(key)[1]["items"]:
                first, *rest = _kind(key)[1]["items"]
                # The id itself, never a value made from it (a prefix of one id could name another).
                self.visit(first, id_allowed=_kind(first)[0] in ("RefDot", "RefBrack"))
                self.visit(rest)
            else:
                self.visit(key)
        if head.get("assign"):
            self.visit(head["assign"]["value"])
        for arg in head.get("args") or ():
            self.visit(arg)
        for body in payload["bodies"]:
            if body.get("assign"):
                self.visit(body["assign"]["value"])
            self.query(body["query"])

    def query(self, query: Any) -> None:
        for statement in query["stmts"]:
            if statement.get("with_mods"):
                self.fail(statement, "`with` replaces the input or data")
            self.visit(statement["literal"])

    # -- bindings, found before the uses (a variable may be bound after its first use in source order)

    def _bind(self, node: Any) -> None:
        if isinstance(node, list):
            for value in node:
                self._bind(value)
            return
        if not isinstance(node, dict):
            return
        if _is_node(node):
            kind, payload = next(iter(node.items()))
            if kind == "SomeIn" and isinstance(payload, dict):
                value = payload["value"]
                if self._is_items(payload["collection"]) and _kind(value)[0] == "Var":
                    self.items.add(_kind(value)[1]["value"])
                literals = self._literal_strings(payload["collection"])
                if literals is not None and _kind(value)[0] == "Var" and payload["key"] is None:
                    self.keys[_kind(value)[1]["value"]] = literals
            if kind == "AssignExpr" and isinstance(payload, dict):
                if self._is_item_ref(payload["rhs"]) and _kind(payload["lhs"])[0] == "Var":
                    self.items.add(_kind(payload["lhs"])[1]["value"])
        for value in node.values():
            self._bind(value)

    def _is_items(self, node: Any) -> bool:
        if _kind(node)[0] not in ("RefDot", "RefBrack"):
            return False
        base, accessors = _chain(node)
        return _kind(base)[0] == "Var" and _kind(base)[1]["value"] == "input" and accessors == [("field", "items")]

    def _is_item_ref(self, node: Any) -> bool:
        if _kind(node)[0] != "RefBrack":
            return False
        base, accessors = _chain(node)
        return (
            _kind(base)[0] == "Var"
            and _kind(base)[1]["value"] == "input"
            and len(accessors) == 2
            and accessors[0] == ("field", "items")
            and accessors[1][0] == "index"
        )

    @staticmethod
    def _literal_strings(node: Any) -> frozenset[str] | None:
        kind, payload = _kind(node)
        if kind not in ("Array", "Set"):
            return None
        values = []
        for item in payload["items"]:
            item_kind, item_payload = _kind(item)
            if item_kind != "String":
                return None
            values.append(str(item_payload["value"]))
        return frozenset(values)

    # -- uses

    def visit(self, node: Any, *, id_allowed: bool = False) -> None:
        if isinstance(node, list):
            for value in node:
                self.visit(value, id_allowed=id_allowed)
            return
        if not isinstance(node, dict):
            return
        if not _is_node(node):  # a part of a node (a query, a head's assignment): its own parts
            if node.get("with_mods"):
                self.fail(node, "`with` replaces the input or data")
            for value in node.values():
                self.visit(value, id_allowed=id_allowed)
            return
        kind, payload = next(iter(node.items()))
        if kind in ("RefDot", "RefBrack"):
            self.reference(node, id_allowed)
        elif kind == "Var":
            name = payload["value"]
            if name == "input":
                self.fail(node, "the whole input is read")
            if name in self.items:
                self.fail(node, "an item is used whole")
            if self.package == ITEMS_PACKAGE and name in ID_DOCUMENTS and name != self.name:
                self.fail(node, f"the document {name}, which holds item ids, is read")
        elif kind == "SomeIn":
            if payload["key"] is not None:
                self.visit(payload["key"])
            if not (self._is_items(payload["collection"]) or self._literal_strings(payload["collection"]) is not None):
                self.visit(payload["collection"])
            if _kind(payload["value"])[0] != "Var":
                self.visit(payload["value"])
        elif kind == "AssignExpr":
            if self._is_item_ref(payload["rhs"]) and _kind(payload["lhs"])[0] == "Var":
                self.index(payload["rhs"])
            else:
                self.visit(payload["lhs"])
                self.visit(payload["rhs"])
        elif kind == "Call":
            self.call(node, payload, id_allowed)
        elif kind in ("ArrayCompr", "SetCompr", "ObjectCompr"):
            for part in ("term", "key", "value"):
                if part in payload:
                    self.visit(payload[part], id_allowed=id_allowed)
            self.query(payload["query"])
        else:
            self.visit(payload, id_allowed=id_allowed)

    def call(self, node: Any, payload: Any, id_allowed: bool) -> None:
        function = payload["fcn"]
        params = payload["params"]
        name = _ref_name(function) if _kind(function)[0] in ("Var", "RefDot") else ""
        if (
            name == "object.get"
            and len(params) == 3
            and _kind(params[0])[0] == "Var"
            and _kind(params[0])[1].get("value") == "input"
        ):
            keys = self._key_of(params[1])
            if keys is None or "items" in keys:
                self.fail(node, "the input's items are read by object.get")
            self.visit(params[2])
            return
        if name == "object.get" and len(params) == 3 and self._is_item(params[0]):
            self.field(node, self._key_of(params[1]), id_allowed)
            self.visit(params[2])
            if _kind(params[0])[0] != "Var":
                self.index(params[0])
            return
        if name == "is_string" and len(params) == 1 and _kind(params[0])[0] in ("RefDot", "RefBrack"):
            self.reference(params[0], id_allowed=True)  # `is_string(item.id)`: the same answer for every string id
            return
        if _kind(function)[0] != "Var":
            self.visit(function)
        self.visit(params, id_allowed=id_allowed)

    def _is_item(self, node: Any) -> bool:
        kind, payload = _kind(node)
        return (kind == "Var" and payload["value"] in self.items) or self._is_item_ref(node)

    def _key_of(self, node: Any) -> frozenset[str] | None:
        kind, payload = _kind(node)
        if kind == "String":
            return frozenset({str(payload["value"])})
        if kind == "Var" and payload["value"] in self.keys:
            return self.keys[payload["value"]]
        return None

    def index(self, node: Any) -> None:
        """The index expressions of `input.items[i]`."""
        _, accessors = _chain(node)
        for what, value in accessors:
            if what == "index":
                self.visit(value)

    def reference(self, node: Any, id_allowed: bool) -> None:
        base, accessors = _chain(node)
        base_kind, base_payload = _kind(base)
        if base_kind != "Var":
            self.visit(base)
        elif base_payload["value"] == "input" and accessors[:1] == [("field", "items")]:
            if len(accessors) == 1:
                self.fail(node, "input.items is used whole")
            if accessors[1][0] != "index":
                self.fail(node, "input.items is read by a key")
            self.visit(accessors[1][1])
            if len(accessors) == 2:
                self.fail(node, "an item is used whole")
            self.accessor(node, accessors[2], id_allowed)
            accessors = accessors[3:]
        elif base_payload["value"] in self.items:
            self.accessor(node, accessors[0], id_allowed)
            accessors = accessors[1:]
        elif self.package == ITEMS_PACKAGE and base_payload["value"] in ID_DOCUMENTS and base_payload["value"] != self.name:
            self.fail(node, f"the document {base_payload['value']}, which holds item ids, is read")
        elif (
            base_payload["value"] == "data"
            and accessors[:2] == [("field", "gateway"), ("field", "items")]
            and (len(accessors) < 3 or accessors[2][0] != "field" or accessors[2][1] in ID_DOCUMENTS)
        ):
            self.fail(node, "data.gateway.items, which holds item ids, is read")
        for what, value in accessors:
            if what == "index":
                self.visit(value)

    def accessor(self, node: Any, accessor: tuple[str, Any], id_allowed: bool) -> None:
        what, value = accessor
        self.field(node, self._key_of(value) if what == "index" else frozenset({str(value)}), id_allowed)

    def field(self, node: Any, keys: frozenset[str] | None, id_allowed: bool) -> None:
        if keys is None:
            self.fail(node, "an item's field is read by a computed name")
        if "id" in keys and not id_allowed:
            self.fail(node, "an item's id is read")
