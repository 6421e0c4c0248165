"""C2SP signed notes (https://c2sp.org/signed-note) with Ed25519 signatures.

A note is UTF-8 text ending in a newline, a blank line, then signature lines
`— <key name> <base64(key id || signature)>`. The key id is the first four bytes of
SHA-256(key name || 0x0A || 0x01 || public key); the signature covers the text with its final
newline. Our own ~100 lines because no maintained Python package implements the format; the
cryptography is `cryptography`'s Ed25519, and tests/audit/test_notes.py checks the result against
the test vector of Go's reference implementation (golang.org/x/mod/sumdb/note).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ED25519 = 0x01
SIGNATURE_PREFIX = "\u2014 "  # an em dash and a space
MAX_SIGNATURES = 100


class NoteError(ValueError):
    """A note that is malformed, or not signed (validly) by the key it is checked with."""


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def _check_name(name: str) -> None:
    if not name or any(c.isspace() or c == "+" for c in name):
        raise NoteError(f"key name {name!r}: must be non-empty, without spaces or '+'")


def key_id(name: str, public: Ed25519PublicKey) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([ED25519]) + raw_public(public)).digest()[:4]


def verifier_key(name: str, public: Ed25519PublicKey) -> str:
    """The text form a verifier shares: `<name>+<hex key id>+<base64(0x01 || public key)>`."""
    _check_name(name)
    return f"{name}+{key_id(name, public).hex()}+{base64.b64encode(bytes([ED25519]) + raw_public(public)).decode()}"


def parse_verifier_key(text: str) -> tuple[str, Ed25519PublicKey]:
    name, _, rest = text.strip().partition("+")
    hex_id, _, material = rest.partition("+")
    try:
        raw = base64.b64decode(material, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise NoteError("verifier key: the key material is not base64") from exc
    if len(raw) != 33 or raw[0] != ED25519:
        raise NoteError("verifier key: not an Ed25519 key")
    public = Ed25519PublicKey.from_public_bytes(raw[1:])
    _check_name(name)
    if key_id(name, public).hex() != hex_id.lower():
        raise NoteError("verifier key: the key id does not match the key")
    return name, public


@dataclass(frozen=True, slots=True)
class Signer:
    name: str
    private: Ed25519PrivateKey

    def __post_init__(self) -> None:
        _check_name(self.name)

    @property
    def verifier(self) -> Verifier:
        return Verifier(self.name, self.private.public_key())


@dataclass(frozen=True, slots=True)
class Verifier:
    name: str
    public: Ed25519PublicKey

    @property
    def id(self) -> bytes:
        return key_id(self.name, self.public)


def sign(text: str, signer: Signer) -> str:
    """The signed note of `text` (non-empty, newline-terminated, no blank line inside)."""
    if not text.endswith("\n") or "\n\n" in text or text.startswith("\n"):
        raise NoteError("note text: must be non-empty lines, each ending in a newline")
    signature = signer.private.sign(text.encode())
    blob = base64.b64encode(key_id(signer.name, signer.private.public_key()) + signature).decode()
    return f"{text}\n{SIGNATURE_PREFIX}{signer.name} {blob}\n"


def open_note(note: str, verifier: Verifier) -> str:
    """The note's text, once its signature by `verifier` checks; NoteError otherwise. Signatures by
    other keys are ignored, but a note with none by this key is refused."""
    split = note.rfind("\n\n")
    if split < 0 or not note.endswith("\n"):
        raise NoteError("malformed note: no blank line before the signatures")
    text, lines = note[: split + 1], note[split + 2 :].splitlines()
    if not lines or len(lines) > MAX_SIGNATURES:
        raise NoteError("malformed note: no signature lines")
    for line in lines:
        if not line.startswith(SIGNATURE_PREFIX):
            raise NoteError("malformed note: a signature line does not start with an em dash")
        name, _, blob = line[len(SIGNATURE_PREFIX) :].partition(" ")
        try:
            raw = base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise NoteError("malformed note: a signature is not base64") from exc
        if name != verifier.name or raw[:4] != verifier.id:
            continue
        try:
            verifier.public.verify(raw[4:], text.encode())
        except InvalidSignature as exc:
            raise NoteError("the signature does not verify (the note was altered)") from exc
        return text
    raise NoteError("not signed by this key (signed by another key, or by none)")
