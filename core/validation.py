"""Checks shared by every input a caller sends: validation messages that name the field, NUL bytes,
JSON numbers that must be finite, whole numbers in query parameters, tenant and principal names."""

from __future__ import annotations

import json
import math
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from core.errors import BadRequest


def describe_validation_error(exc: ValidationError, root: str = "body") -> str:
    """One line per problem, naming the field; never echoes the submitted value."""
    parts = []
    for error in exc.errors(include_input=False, include_url=False)[:10]:
        location = ".".join(str(p) for p in error["loc"]) or root
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field"
        parts.append(f"{location}: {message}")
    return "; ".join(parts)


M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], body: Any) -> M:
    """A parsed JSON body as the contract's `model` (api/): not an object, a NUL anywhere, or a value
    the model refuses is a 400 whose message names the field (never the value)."""
    if not isinstance(body, dict):
        raise BadRequest("body: expected a JSON object")
    try:
        value = model.model_validate(body)
    except ValidationError as exc:
        raise BadRequest(describe_validation_error(exc)) from exc
    where = nul_at(body)
    if where is not None:  # one the model's own rules let through (a free-text comment, say)
        raise BadRequest(f"{where}: strings must not contain the NUL character")
    return value


def nul_at(value: Any, path: str = "body") -> str | None:
    """Where a NUL character hides in a JSON value (`body.comment`, `body.used.3`), or None."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        if isinstance(key, str) and "\x00" in key:
            return path
        found = nul_at(inner, f"{key}" if path == "body" else f"{path}.{key}")
        if found is not None:
            return found
    return None


def has_nul(value: Any) -> bool:
    """True when a NUL character hides anywhere in a JSON value (PostgreSQL cannot store or compare it).
    `repr` writes every NUL of every string, key or value, as `\\x00`: one scan at C speed rules most
    values out (a bulk load's items), and only a value whose repr shows the sequence is walked."""
    return "\\x00" in repr(value) and _walk_for_nul(value)


def _walk_for_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_walk_for_nul(k) or _walk_for_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_walk_for_nul(v) for v in value)
    return False


# --- JSON numbers ----------------------------------------------------------------------------------

NON_FINITE = "numbers must be finite (no NaN or Infinity, nothing beyond ±1.7976931348623157e308)"


class _NonFinite:
    """Stands in, while a body is parsed, for a number JSON cannot carry back out (NaN, ±Infinity,
    1e999); the parse then names where it was."""


def loads_json(raw: str | bytes, at: str = "") -> Any:
    """`json.loads`, refusing what a later answer could not render: the literals NaN, Infinity and
    -Infinity, and numbers that overflow a double (`1e999` would parse as infinity). Raises
    BadRequest naming the field (`at` prefixes the path, such as `[3]` for one NDJSON line); malformed
    JSON is still the ValueError or RecursionError of `json.loads`."""
    seen: list[bool] = []

    def constant(_: str) -> _NonFinite:
        seen.append(True)
        return _NonFinite()

    def number(text: str) -> float | _NonFinite:
        value = float(text)
        return value if math.isfinite(value) else constant(text)

    value = json.loads(raw, parse_constant=constant, parse_float=number)
    if seen:
        raise BadRequest(f"{_path_of_non_finite(value, at) or 'body'}: {NON_FINITE}")
    return value


def _path_of_non_finite(value: Any, at: str) -> str:
    """Where the first non-finite number sits, in document order (`budget.bytes`, `[0].weight`).
    Iterative: a body nested as deep as the parser allows must not exhaust the stack here."""
    stack: list[tuple[str, Any]] = [(at, value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, _NonFinite):
            return path
        if isinstance(node, dict):
            children = [(f"{path}.{str(key)[:64]}" if path else str(key)[:64], child) for key, child in node.items()]
        elif isinstance(node, list):
            children = [(f"{path}[{index}]", child) for index, child in enumerate(node)]
        else:
            continue
        stack.extend(reversed(children))
    return at


# --- query and path parameters ---------------------------------------------------------------------

_DIGITS = re.compile(r"[0-9]{1,18}", re.ASCII)


def ascii_int(name: str, text: str, low: int, high: int) -> int:
    """A whole number from a query or path parameter: ASCII digits only (`'²'.isdigit()` is true in
    Python, and int() takes Arabic-Indic digits), at most 18 of them, from `low` to `high`. Raises
    BadRequest naming the parameter and the rule, never the value."""
    if not _DIGITS.fullmatch(text) or not low <= int(text) <= high:
        raise BadRequest(f"{name}: expected a whole number from {low} to {high}, in ASCII digits")
    return int(text)


# --- tenant and principal names --------------------------------------------------------------------

TENANT_RULE = "1 to 63 lower-case letters, digits and . _ -, starting with a letter or digit"
PRINCIPAL_ID_RULE = "1 to 200 letters, digits and . _ @ : -, starting with a letter or digit"
TENANT = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}", re.ASCII)
PRINCIPAL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:-]{0,199}", re.ASCII)
# Names the gateway uses itself: `-` is the audit chain of calls with no tenant (audit.chain.NO_TENANT).
# The character set already excludes it; the list says so, and stays checked if the set ever widens.
RESERVED_TENANTS = frozenset({"-"})


def tenant_problem(tenant: object) -> str | None:
    """Why `tenant` cannot name a tenant, or None when it can."""
    if not isinstance(tenant, str) or not TENANT.fullmatch(tenant):
        return f"expected {TENANT_RULE}"
    if tenant in RESERVED_TENANTS:
        return "this name is reserved for the gateway's own use"
    return None


def principal_id_problem(user_id: object) -> str | None:
    """Why `user_id` cannot be the id of a principal `user:<id>`, or None when it can."""
    if not isinstance(user_id, str) or not PRINCIPAL_ID.fullmatch(user_id):
        return f"expected {PRINCIPAL_ID_RULE}"
    return None


def check_tenant(tenant: str, field: str = "tenant") -> str:
    """The tenant, or BadRequest naming `field` and the rule (never the value)."""
    problem = tenant_problem(tenant)
    if problem:
        raise BadRequest(f"{field}: {problem}")
    return tenant


def check_principal(principal: str, field: str = "principal") -> str:
    """A principal `user:<id>`, or BadRequest naming `field` and the rule (never the value)."""
    if not principal.startswith("user:") or principal_id_problem(principal.removeprefix("user:")):
        raise BadRequest(f"{field}: expected user:ID, the ID {PRINCIPAL_ID_RULE}")
    return principal
