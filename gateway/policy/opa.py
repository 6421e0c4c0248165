"""The OPA server engine: the same policies, evaluated by a running OPA over its REST API.

The client is opa-python-client's AsyncOpaClient: one aiohttp session (one connection pool) for the
engine's life, a total deadline of GATEWAY_OPA_TIMEOUT_MS on every call and no retries, so a hung
OPA costs one deadline. Its errors (aiohttp's, a timeout, a body that is not JSON, its own) are
turned into ours here, at the boundary: a policy call that fails is PolicyUnavailable, never a
decision.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from opa_client import AsyncOpaClient
from opa_client.errors import RegoParseError

from core.errors import ConfigurationError, PolicyUnavailable
from gateway.policy.base import ENTRYPOINTS
from gateway.policy.bundle import PolicyBundle
from gateway.settings import PolicySettings

# What the client raises when a call fails: aiohttp's errors, the deadline, a body that is not JSON
# (ValueError covers json's error), and the client's own (a rejected module or document).
CLIENT_ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientError, TimeoutError, ValueError, RegoParseError)


def opa_client(url: str, timeout_s: float) -> AsyncOpaClient:
    """A client for the OPA at `url` (`http[s]://host[:port][/prefix]`), without retries."""
    split = urlsplit(url.rstrip("/"))
    if split.scheme not in ("http", "https") or not split.hostname:
        raise ConfigurationError(f"GATEWAY_OPA_URL must be an http(s) URL, got {url!r}")
    host = f"[{split.hostname}]" if ":" in split.hostname else split.hostname
    port = split.port or (443 if split.scheme == "https" else 80)
    # The client builds <scheme><host>:<port>/<version>/...; a path prefix (OPA behind a proxy)
    # goes in front of the API version.
    version = f"{split.path.strip('/')}/v1".lstrip("/")
    return AsyncOpaClient(host=host, port=port, version=version, ssl=split.scheme == "https", retries=0, timeout=timeout_s)


class OpaServerEngine:
    name = "opa"

    def __init__(self, client: AsyncOpaClient, revision: str, health_url: str) -> None:
        self._client = client
        self._health_url = health_url
        self.revision = revision
        self.loaded_at = datetime.now(timezone.utc)

    @classmethod
    async def connect(cls, settings: PolicySettings, bundle: PolicyBundle) -> "OpaServerEngine":
        """Connect, push the bundle through the policy API unless told OPA loads it itself."""
        assert settings.opa_url
        client = opa_client(settings.opa_url, settings.opa_timeout_ms / 1000)
        await client._init_session()  # the pool; AsyncOpaClient opens it only on `async with`
        try:
            if settings.opa_push_policies:
                await cls._push(client, bundle)
                revision = bundle.revision
            else:
                revision = await cls._bundle_revision(client)
        except ConfigurationError:
            await client.close_connection()
            raise
        except CLIENT_ERRORS as exc:
            await client.close_connection()
            raise ConfigurationError(f"OPA at {settings.opa_url} unreachable: {type(exc).__name__}") from exc
        return cls(client, revision, settings.opa_url.rstrip("/") + "/health")

    @staticmethod
    async def _push(client: AsyncOpaClient, bundle: PolicyBundle) -> None:
        """PUT data, then modules; OPA compiles each module against those already loaded, so a
        module whose imports are not there yet is retried after the others."""
        for top, document in bundle.data.items():
            try:
                await client.update_or_create_data(document, top)
            except RegoParseError as exc:
                raise ConfigurationError(f"OPA rejected data {top}: {_rejection(exc)}") from exc
        pending = list(bundle.modules)
        while pending:
            rejected: list[tuple[str, str, str]] = []
            for path, source in pending:
                try:  # rego_compat=False: the client would otherwise rewrite a rejected module and retry
                    await client.update_policy_from_string(source, path, rego_compat=False)
                except RegoParseError as exc:
                    rejected.append((path, source, _rejection(exc)))
            if len(rejected) == len(pending):
                raise ConfigurationError(f"OPA rejected {rejected[0][0]}: {rejected[0][2]}")
            pending = [(path, source) for path, source, _ in rejected]

    @staticmethod
    async def _bundle_revision(client: AsyncOpaClient) -> str:
        body = await client.query_rule({}, "gateway", "request", query_params={"provenance": True})
        bundles = body.get("provenance", {}).get("bundles", {}) if isinstance(body, dict) else {}
        revisions = sorted(f"{name}@{info.get('revision', '')}" for name, info in bundles.items())
        return "opa:" + (",".join(revisions) or "unknown")

    async def evaluate(self, entrypoint: str, policy_input: dict[str, Any]) -> dict[str, Any]:
        package, _, rule = ENTRYPOINTS[entrypoint].rpartition("/")
        try:
            body = await self._client.query_rule(policy_input, package, rule)
        except TimeoutError as exc:
            raise PolicyUnavailable("OPA did not answer within the deadline") from exc
        except (aiohttp.ContentTypeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise PolicyUnavailable("OPA answered with a body that is not JSON") from exc
        except aiohttp.ClientResponseError as exc:  # any status but 2xx
            raise PolicyUnavailable(f"OPA answered {exc.status}") from exc
        except CLIENT_ERRORS as exc:
            raise PolicyUnavailable(f"OPA unreachable: {type(exc).__name__}") from exc
        if not isinstance(body, dict) or "result" not in body:
            raise PolicyUnavailable("policy document is undefined on OPA")
        value = body["result"]
        if not isinstance(value, dict):
            raise PolicyUnavailable("OPA result is not an object")
        return value

    async def ready(self) -> bool:
        return bool(await self._client.check_health(diagnostic_url=self._health_url))

    async def aclose(self) -> None:
        await self._client.close_connection()


def _rejection(exc: RegoParseError) -> str:
    """OPA's rejection as `file:row: message` lines, or its message."""
    details = []
    for error in exc.errors:
        if isinstance(error, dict):
            location = error.get("location") or {}
            where = f"{location.get('file', '')}:{location.get('row', '')}: " if location else ""
            details.append(f"{where}{error.get('message', '')}")
    return ("; ".join(details) or str(exc.message))[:500]
