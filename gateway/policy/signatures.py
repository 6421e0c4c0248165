"""OPA bundle signatures: `.signatures.json` verified as OPA verifies it.

The file holds `{"signatures": [<one JWT>]}`; the JWT's payload lists every file of the bundle as
`{"name", "hash", "algorithm"}` (and may carry `scope`). The JWT is checked with the configured key
(pyjwt: HS*, RS*, PS*, ES*), then every file of the bundle must be listed with a matching hash and
every listed file must be in the bundle. JSON files are hashed as OPA hashes them: the parsed value,
objects with their keys in order, no whitespace; other files byte for byte.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from core.errors import ConfigurationError

SIGNATURES = ".signatures.json"
HASHES = {"SHA-256": hashlib.sha256, "SHA-384": hashlib.sha384, "SHA-512": hashlib.sha512}
ALGORITHMS = ("HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")


@dataclass(frozen=True, slots=True)
class VerificationKey:
    """The key bundles must be signed with: a PEM public key or an HMAC secret, its algorithm,
    and the scope the signature must carry (empty: none)."""

    key: str
    algorithm: str = "RS256"
    scope: str = ""

    @classmethod
    def load(cls, key: str, algorithm: str, scope: str = "") -> VerificationKey:
        """`key` is PEM text, a path to a PEM file, or (HS*) the secret itself."""
        if algorithm not in ALGORITHMS:
            raise ConfigurationError(f"GATEWAY_POLICY_BUNDLE_KEY_ALG: expected one of {', '.join(ALGORITHMS)}")
        if not algorithm.startswith("HS") and not key.lstrip().startswith("-----BEGIN"):
            path = Path(key)
            if not path.is_file():
                raise ConfigurationError("GATEWAY_POLICY_BUNDLE_KEY: neither a PEM key nor a readable file")
            key = path.read_text()
        return cls(key, algorithm, scope)


def verify_files(files: Mapping[str, bytes], key: VerificationKey) -> None:
    """Raise ConfigurationError unless `files` (bundle path -> content, `.signatures.json`
    included) carry a valid signature by `key` that covers exactly these files."""
    raw = files.get(SIGNATURES)
    if raw is None:
        raise ConfigurationError("bundle is not signed: no .signatures.json (a verification key is configured)")
    try:
        tokens = json.loads(raw).get("signatures")
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as exc:
        raise ConfigurationError(".signatures.json: not a JSON object") from exc
    if not isinstance(tokens, list) or len(tokens) != 1 or not isinstance(tokens[0], str):
        raise ConfigurationError(".signatures.json: expected exactly one JWT")
    try:
        payload = jwt.decode(tokens[0], key.key, algorithms=[key.algorithm], options={"require": [], "verify_aud": False})
    except jwt.PyJWTError as exc:
        raise ConfigurationError(f".signatures.json: signature not valid: {type(exc).__name__}") from exc
    if payload.get("scope", "") != key.scope:
        raise ConfigurationError(".signatures.json: scope mismatch")
    listed = payload.get("files")
    if not isinstance(listed, list):
        raise ConfigurationError(".signatures.json: the payload lists no files")
    expected: dict[str, dict[str, Any]] = {}
    for entry in listed:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ConfigurationError(".signatures.json: a file entry without a name")
        expected[entry["name"].lstrip("/")] = entry
    for name, content in files.items():
        if name == SIGNATURES:
            continue
        entry = expected.pop(name, None)
        if entry is None:
            raise ConfigurationError(f"{name}: not included in the bundle signature")
        if file_hash(name, content, str(entry.get("algorithm", ""))) != str(entry.get("hash", "")).lower():
            raise ConfigurationError(f"{name}: digest mismatch")
    if expected:
        raise ConfigurationError(f"{sorted(expected)[0]}: signed but missing from the bundle")


def file_hash(name: str, content: bytes, algorithm: str) -> str:
    """A bundle file's digest as OPA computes it (hex)."""
    hasher = HASHES.get(algorithm)
    if hasher is None:
        raise ConfigurationError(f"{name}: unsupported hashing algorithm {algorithm!r}")
    if name.endswith(".json") or name == ".manifest":
        try:
            value = json.loads(content)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"{name}: invalid JSON") from exc
        content = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return hasher(content).hexdigest()


def sign_files(files: Mapping[str, bytes], key: str, algorithm: str = "RS256", scope: str = "") -> bytes:
    """A `.signatures.json` for `files`, signed with `key` (a private PEM key or an HMAC secret):
    what `opa sign` writes, for `gateway policy bundle --signing-key` and the tests."""
    payload: dict[str, Any] = {
        "files": [
            {"name": name, "hash": file_hash(name, content, "SHA-256"), "algorithm": "SHA-256"}
            for name, content in sorted(files.items())
            if name != SIGNATURES
        ],
    }
    if scope:
        payload["scope"] = scope
    token = jwt.encode(payload, key, algorithm=algorithm, headers={"kid": "gateway"})
    return json.dumps({"signatures": [token]}).encode()
