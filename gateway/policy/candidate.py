"""A candidate policy, compiled and probed on its own: for explain, impact and reload.

A candidate never serves a call: it runs in a policy process of its own (the embedded engine, one
process), so a broken or runaway candidate fails there, never in the engine in force.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio.to_thread

from core.errors import BadRequest, ConfigurationError
from gateway.policy.base import self_check
from gateway.policy.bundle import PolicyBundle, bundle_from_files, read_bundle
from gateway.policy.embedded import EmbeddedEngine

INLINE_ROOT = Path("candidate")
MAX_INLINE_BYTES = 1024 * 1024  # modules and data of an inline candidate, together
CANDIDATE_NICE = 10  # a candidate's policy process runs this much below the service (os.setpriority)


def inline_bundle(policies: Any) -> PolicyBundle:
    """A candidate sent in a request body: `{"modules": {path: source}, "data": {...}}`, where
    `data` is mounted at the root as a top-level `data.json` would be. Malformed is a 400."""
    if not isinstance(policies, Mapping):
        raise BadRequest("policies: expected an object {modules, data}")
    modules, data = policies.get("modules"), policies.get("data", {})
    if not isinstance(modules, Mapping) or not modules:
        raise BadRequest("policies.modules: expected an object of path -> Rego source")
    if not isinstance(data, Mapping):
        raise BadRequest("policies.data: expected an object")
    files: dict[str, str] = {}
    for path, source in modules.items():
        if not isinstance(path, str) or not path.endswith(".rego") or path.startswith("/") or ".." in path.split("/"):
            raise BadRequest("policies.modules: each key must be a relative path ending in .rego")
        if not isinstance(source, str):
            raise BadRequest(f"policies.modules[{path!r}]: expected Rego source text")
        files[path] = source
    files["data.json"] = json.dumps(data)
    if sum(len(v) for v in files.values()) > MAX_INLINE_BYTES:
        raise BadRequest(f"policies: larger than {MAX_INLINE_BYTES} bytes")
    try:
        return bundle_from_files(INLINE_ROOT, files)
    except ConfigurationError as exc:
        raise BadRequest(f"policies: {exc.message}") from exc


def read_candidate(source: Path) -> PolicyBundle:
    """A candidate from a policy directory or an OPA bundle file (`.tar.gz`)."""
    return read_bundle(source)


async def open_candidate(bundle: PolicyBundle) -> EmbeddedEngine:
    """The candidate compiled in a policy process of its own and probed on both entry points;
    ConfigurationError (with file:line) when it does not compile or fails the probe. The caller
    closes it (`aclose`)."""
    # Below the service's priority: a replay's CPU goes to whatever the service's calls leave.
    engine = await anyio.to_thread.run_sync(lambda: EmbeddedEngine(bundle, workers=1, nice=CANDIDATE_NICE))
    try:
        await self_check(engine)
    except BaseException:
        await engine.aclose()
        raise
    return engine
