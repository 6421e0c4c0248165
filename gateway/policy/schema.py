"""The policy contract as JSON Schemas (gateway/policy/contract/, shipped with the package): load them and validate a document."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SCHEMA_DIR = Path(__file__).resolve().parent / "contract"
NAMES = ("request.input", "request.result", "items.input", "items.result", "data")


@cache
def _registry() -> Registry[Any]:
    resources = []
    for path in sorted(SCHEMA_DIR.glob("*.schema.json")):
        document = json.loads(path.read_text(encoding="utf-8"))
        resources.append((document["$id"], Resource.from_contents(document)))
    return Registry[Any]().with_resources(resources)


@cache
def validator(name: str) -> Draft202012Validator:
    """The validator of one schema, by name ("request.input", "data", ...)."""
    if name not in NAMES:
        raise ValueError(f"no policy schema named {name!r}; expected one of {', '.join(NAMES)}")
    document = json.loads(schema_path(name).read_text(encoding="utf-8"))
    return Draft202012Validator(document, registry=_registry())


def schema_path(name: str) -> Path:
    return SCHEMA_DIR / f"{name}.schema.json"


def validate(instance: Any, name: str) -> list[str]:
    """Every violation of the schema `name`, each as "<JSON pointer>: <message>"; empty when valid."""
    errors = sorted(validator(name).iter_errors(instance), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [f"{pointer(error.absolute_path)}: {error.message}" for error in errors]


def pointer(path: Any) -> str:
    """An RFC 6901 JSON pointer ("" is the whole document)."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path) or "/"
