"""Checks shared by every input a caller sends: validation messages that name the field, NUL bytes."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


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


def has_nul(value: Any) -> bool:
    """True when a NUL character hides anywhere in a JSON value (PostgreSQL cannot store or compare it)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_nul(v) for v in value)
    return False
