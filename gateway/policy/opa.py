"""The OPA server engine: the same policies, evaluated by a running OPA over its REST API."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import httpx

from core.errors import ConfigurationError, PolicyUnavailable
from gateway.policy.base import ENTRYPOINTS
from gateway.policy.bundle import PolicyBundle
from gateway.settings import Settings


class OpaServerEngine:
    name = "opa"

    def __init__(self, client: httpx.AsyncClient, revision: str) -> None:
        self._client = client
        self.revision = revision
        self.loaded_at = datetime.now(timezone.utc)

    @classmethod
    async def connect(cls, settings: Settings, bundle: PolicyBundle) -> "OpaServerEngine":
        """Connect, push the bundle through the policy API unless told OPA loads it itself."""
        assert settings.opa_url
        client = httpx.AsyncClient(base_url=settings.opa_url.rstrip("/"), timeout=settings.opa_timeout_ms / 1000)
        try:
            if settings.opa_push_policies:
                await cls._push(client, bundle)
                revision = bundle.revision
            else:
                revision = await cls._bundle_revision(client)
        except (httpx.HTTPError, ConfigurationError) as exc:
            await client.aclose()
            if isinstance(exc, ConfigurationError):
                raise
            raise ConfigurationError(f"OPA at {settings.opa_url} unreachable: {type(exc).__name__}") from exc
        return cls(client, revision)

    @staticmethod
    async def _push(client: httpx.AsyncClient, bundle: PolicyBundle) -> None:
        """PUT data, then modules; OPA compiles each module against those already loaded, so a
        module whose imports are not there yet is retried after the others."""
        for top, document in bundle.data.items():
            response = await client.put(f"/v1/data/{top}", json=document)
            if response.status_code >= 400:
                raise ConfigurationError(f"OPA rejected data {top}: {response.text[:500]}")
        pending = list(bundle.modules)
        while pending:
            rejected: list[tuple[str, str, str]] = []
            for path, source in pending:
                response = await client.put(
                    f"/v1/policies/{path}", content=source.encode(), headers={"Content-Type": "text/plain"}
                )
                if response.status_code >= 400:
                    rejected.append((path, source, response.text[:500]))
            if len(rejected) == len(pending):
                raise ConfigurationError(f"OPA rejected {rejected[0][0]}: {rejected[0][2]}")
            pending = [(path, source) for path, source, _ in rejected]

    @staticmethod
    async def _bundle_revision(client: httpx.AsyncClient) -> str:
        response = await client.post("/v1/data/gateway/request?provenance", json={"input": {}})
        bundles = response.json().get("provenance", {}).get("bundles", {})
        revisions = sorted(f"{name}@{info.get('revision', '')}" for name, info in bundles.items())
        return "opa:" + (",".join(revisions) or "unknown")

    async def evaluate(self, entrypoint: str, policy_input: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await self._client.post(f"/v1/data/{ENTRYPOINTS[entrypoint]}", json={"input": policy_input})
        except httpx.TimeoutException as exc:
            raise PolicyUnavailable("OPA did not answer within the deadline") from exc
        except httpx.HTTPError as exc:
            raise PolicyUnavailable(f"OPA unreachable: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise PolicyUnavailable(f"OPA answered {response.status_code}")
        try:
            body = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise PolicyUnavailable("OPA answered with a body that is not JSON") from exc
        if not isinstance(body, dict) or "result" not in body:
            raise PolicyUnavailable("policy document is undefined on OPA")
        value = body["result"]
        if not isinstance(value, dict):
            raise PolicyUnavailable("OPA result is not an object")
        return value

    async def ready(self) -> bool:
        try:
            response = await self._client.get("/health")
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def aclose(self) -> None:
        await self._client.aclose()
