"""Where policy revisions come from: a directory, an OPA bundle file, or a bundle server URL."""

from __future__ import annotations

from pathlib import Path

import anyio.to_thread
import httpx

from core.errors import ConfigurationError
from gateway.policy.bundle import PolicyBundle, read_archive, read_bundle
from gateway.policy.signatures import VerificationKey

FETCH_TIMEOUT_S = 10.0
MAX_DOWNLOAD_BYTES = 16 * 1024 * 1024


class PolicySource:
    """`fetch` reads the current revision: a directory or a `.tar.gz` bundle file is read again; a
    bundle URL is asked with the last `ETag` (`If-None-Match`), and a 304 means unchanged (None)."""

    def __init__(self, location: str, key: VerificationKey | None = None) -> None:
        self.location = location
        self.key = key
        self.remote = location.startswith(("http://", "https://"))
        self._etag: str | None = None

    async def fetch(self) -> PolicyBundle | None:
        """The bundle at the source now, or None when a bundle server says it has not changed;
        ConfigurationError when it cannot be read, does not verify, or is malformed."""
        if not self.remote:
            return await anyio.to_thread.run_sync(read_bundle, Path(self.location), self.key)
        headers = {"If-None-Match": self._etag} if self._etag else {}
        try:
            async with httpx.AsyncClient(timeout=FETCH_TIMEOUT_S) as client:
                async with client.stream("GET", self.location, headers=headers) as response:
                    if response.status_code == 304:
                        return None
                    if response.status_code != 200:
                        raise ConfigurationError(f"bundle server answered {response.status_code}")
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > MAX_DOWNLOAD_BYTES:
                            raise ConfigurationError(f"bundle larger than {MAX_DOWNLOAD_BYTES} bytes")
                    etag = response.headers.get("etag")
        except httpx.HTTPError as exc:
            raise ConfigurationError(f"bundle server unreachable: {type(exc).__name__}") from exc
        self._etag = etag  # a bundle that fails to verify or compile is rejected once, not at every poll
        name = Path(self.location.rsplit("/", 1)[-1] or "bundle")
        return await anyio.to_thread.run_sync(read_archive, bytes(body), name, self.key)
