"""The audit signing key: Ed25519 key files, the note signer made from them, and the key of the row seal (audit.chain.rows.seal).

The private key lives outside the database (a file the service reads at start, mounted from a
secret); the store never holds it. Two things are derived from it: the signer of checkpoints
(audit.integrity.checkpoints), and the seal key, whose HMAC over a row's hash proves the gateway wrote the row
(someone who can write the database but not read the key cannot make a row that the checkpointer
will sign).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)

from audit.integrity.notes import NoteError, Signer, Verifier, parse_verifier_key, verifier_key
from core.errors import ConfigurationError

KEY_NAME = "gateway.audit"  # the signer's name in every signature line
PRIVATE_FILE, PUBLIC_FILE, VERIFIER_FILE = "audit-signing.pem", "audit-signing.pub.pem", "audit-signing.vkey"
SEAL_PURPOSE = b"gateway audit row seal\n"


def generate(directory: Path) -> dict[str, Path]:
    """A new key pair in `directory`: the private key (mode 0600), the public key (PEM) and the
    verifier key (the signed-note text form). Refuses to overwrite a key."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {"private": directory / PRIVATE_FILE, "public": directory / PUBLIC_FILE, "verifier": directory / VERIFIER_FILE}
    existing = [str(p) for p in paths.values() if p.exists()]
    if existing:
        raise ConfigurationError(f"--out: {existing[0]} exists; choose an empty directory")
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    descriptor = os.open(paths["private"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(pem)
    public = private.public_key()
    paths["public"].write_bytes(public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    paths["verifier"].write_text(verifier_key(KEY_NAME, public) + "\n")
    return paths


def load_signer(path: Path) -> Signer:
    """The signer of the Ed25519 private key (PEM) at `path`; ConfigurationError names the problem."""
    try:
        key = load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigurationError(f"GATEWAY_AUDIT_SIGNING_KEY: {path} is not a readable, unencrypted PEM private key") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigurationError("GATEWAY_AUDIT_SIGNING_KEY: expected an Ed25519 key (gateway audit keygen makes one)")
    return Signer(KEY_NAME, key)


def load_verifier(path: Path) -> Verifier:
    """The verifier of a public key file: PEM, or the verifier key text (`gateway.audit+id+key`)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigurationError(f"--public-key: {path} cannot be read") from exc
    if raw.lstrip().startswith(b"-----BEGIN"):
        try:
            key = load_pem_public_key(raw)
        except ValueError as exc:
            raise ConfigurationError(f"--public-key: {path} is not a PEM public key") from exc
        if not isinstance(key, Ed25519PublicKey):
            raise ConfigurationError("--public-key: expected an Ed25519 key")
        return Verifier(KEY_NAME, key)
    try:
        return Verifier(*parse_verifier_key(raw.decode("utf-8", "replace")))
    except NoteError as exc:
        raise ConfigurationError(f"--public-key: {exc}") from exc


def seal_key(signer: Signer) -> bytes:
    raw = signer.private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    return hashlib.sha256(SEAL_PURPOSE + raw).digest()
