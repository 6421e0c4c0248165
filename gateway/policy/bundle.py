"""Reads a policies directory as OPA would read a bundle: Rego modules plus data.json documents."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class PolicyBundle:
    root: Path
    modules: tuple[tuple[str, str], ...]  # (relative path, source), tests excluded
    tests: tuple[tuple[str, str], ...]
    data: dict[str, Any]
    revision: str


def _mount(data: dict[str, Any], parts: tuple[str, ...], document: Any) -> None:
    node = data
    for part in parts:
        node = node.setdefault(part, {})
    if not isinstance(document, dict):
        raise ConfigurationError(f"{'/'.join(parts) or '.'}/data.json: the document must be a JSON object")
    node.update(document)


def read_bundle(root: Path) -> PolicyBundle:
    """Load every .rego and data.json under root; the revision is a hash of their contents."""
    if not root.is_dir():
        raise ConfigurationError(f"policies directory not found: {root}")
    digest = hashlib.sha256()
    modules: list[tuple[str, str]] = []
    tests: list[tuple[str, str]] = []
    data: dict[str, Any] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in {".rego", ".json"}):
        relative = path.relative_to(root).as_posix()
        content = path.read_text(encoding="utf-8")
        if path.suffix == ".rego":
            (tests if path.name.endswith("_test.rego") else modules).append((relative, content))
            if path.name.endswith("_test.rego"):
                continue
        elif path.name == "data.json":
            try:
                document = json.loads(content)
            except json.JSONDecodeError as exc:
                raise ConfigurationError(f"{relative}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
            _mount(data, path.relative_to(root).parent.parts, document)
        else:
            continue
        digest.update(relative.encode() + b"\0" + content.encode() + b"\0")
    if not modules:
        raise ConfigurationError(f"no Rego modules under {root}")
    return PolicyBundle(root, tuple(modules), tuple(tests), data, "sha256:" + digest.hexdigest()[:16])
