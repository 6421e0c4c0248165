"""Where policy revisions come from: a directory, an OPA bundle file, or a bundle server URL."""

from __future__ import annotations

import hashlib
from pathlib import Path

import anyio.to_thread
import httpx

from core.errors import ConfigurationError
from gateway.policy.archive import MAX_BUNDLE_BYTES, read_bundle_file
from gateway.policy.bundle import ARCHIVE_SUFFIXES, PolicyBundle, read_archive, read_bundle
from gateway.policy.signatures import VerificationKey

FETCH_TIMEOUT_S = 10.0


class PolicySource:
    """`fetch` reads the current revision: a directory or a `.tar.gz` bundle file is read again; a
    bundle URL is asked with the last `ETag` (`If-None-Match`), and a 304 means unchanged (None).
    A bundle's bytes are unpacked (a child process, gateway/policy/archive.py) only when their
    SHA-256 differs from the last ones read: the same bytes give the same bundle, or the same
    refusal, without being unpacked again."""

    def __init__(self, location: str, key: VerificationKey | None = None) -> None:
        self.location = location
        self.key = key
        self.remote = location.startswith(("http://", "https://"))
        self._etag: str | None = None
        self._last: tuple[bytes, PolicyBundle | str] | None = None  # the digest of the last archive read, its bundle or refusal

    async def fetch(self) -> PolicyBundle | None:
        """The bundle at the source now, or None when a bundle server says it has not changed;
        ConfigurationError when it cannot be read, does not verify, or is malformed."""
        if not self.remote:
            return await anyio.to_thread.run_sync(self._read_local)
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
                        if len(body) > MAX_BUNDLE_BYTES:
                            raise ConfigurationError(f"bundle larger than {MAX_BUNDLE_BYTES} bytes")
                    etag = response.headers.get("etag")
        except httpx.HTTPError as exc:
            raise ConfigurationError(f"bundle server unreachable: {type(exc).__name__}") from exc
        self._etag = etag  # a bundle that fails to verify or compile is rejected once, not at every poll
        name = Path(self.location.rsplit("/", 1)[-1] or "bundle")
        return await anyio.to_thread.run_sync(self._read_archive, bytes(body), name)

    def _read_local(self) -> PolicyBundle:
        root = Path(self.location)
        if root.name.endswith(ARCHIVE_SUFFIXES) and root.is_file():
            return self._read_archive(read_bundle_file(root), root)
        return read_bundle(root, self.key)

    def _read_archive(self, archive: bytes, name: Path) -> PolicyBundle:
        """`read_archive`, unless these are the bytes read last time: then what they gave then."""
        digest = hashlib.sha256(archive).digest()
        if self._last is not None and self._last[0] == digest:
            outcome = self._last[1]
            if isinstance(outcome, str):
                raise ConfigurationError(outcome)
            return outcome
        try:
            bundle = read_archive(archive, name, self.key)
        except ConfigurationError as exc:
            self._last = (digest, exc.message)
            raise
        self._last = (digest, bundle)
        return bundle
