"""C2SP signed notes (https://c2sp.org/signed-note) with Ed25519 signatures, and C2SP
timestamped cosignatures (https://c2sp.org/tlog-cosignature, `cosignature/v1`).

A note is UTF-8 text ending in a newline, a blank line, then signature lines
`— <key name> <base64(key id || signature)>`. The key id is the first four bytes of
SHA-256(key name || 0x0A || <algorithm> || public key). An Ed25519 signature (algorithm 0x01)
covers the text with its final newline. A cosignature (algorithm 0x04, what a C2SP witness such as
litewitness returns) is an 8-byte big-endian UNIX time followed by an Ed25519 signature over
`cosignature/v1\ntime <time>\n` and the text. Our own ~100 lines because no maintained Python package implements the format; the
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
COSIGNATURE_V1 = 0x04
SIGNATURE_PREFIX = "\u2014 "  # an em dash and a space
MAX_SIGNATURES = 100


class NoteError(ValueError):
    """A note that is malformed, or not signed (validly) by the key it is checked with."""


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def _check_name(name: str) -> None:
    if not name or any(c.isspace() or c == "+" for c in name):
        raise NoteError(f"key name {name!r}: must be non-empty, without spaces or '+'")


def key_id(name: str, public: Ed25519PublicKey, algorithm: int = ED25519) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([algorithm]) + raw_public(public)).digest()[:4]


def verifier_key(name: str, public: Ed25519PublicKey, algorithm: int = ED25519) -> str:
    """The text form a verifier shares: `<name>+<hex key id>+<base64(algorithm || public key)>`."""
    _check_name(name)
    material = base64.b64encode(bytes([algorithm]) + raw_public(public)).decode()
    return f"{name}+{key_id(name, public, algorithm).hex()}+{material}"


def parse_verifier(text: str) -> Verifier:
    """A verifier key of either kind: Ed25519 note signatures (0x01) or cosignatures (0x04)."""
    name, _, rest = text.strip().partition("+")
    material = rest.partition("+")[2]
    try:
        algorithm = base64.b64decode(material, validate=True)[:1]
    except (binascii.Error, ValueError) as exc:
        raise NoteError("verifier key: the key material is not base64") from exc
    if algorithm == bytes([COSIGNATURE_V1]):
        return Verifier(*parse_verifier_key(text, COSIGNATURE_V1), COSIGNATURE_V1)
    return Verifier(*parse_verifier_key(text))


def parse_verifier_key(text: str, algorithm: int = ED25519) -> tuple[str, Ed25519PublicKey]:
    name, _, rest = text.strip().partition("+")
    hex_id, _, material = rest.partition("+")
    try:
        raw = base64.b64decode(material, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise NoteError("verifier key: the key material is not base64") from exc
    if len(raw) != 33 or raw[0] != algorithm:
        raise NoteError("verifier key: not an Ed25519 key" if algorithm == ED25519 else "verifier key: not a cosignature/v1 key")
    public = Ed25519PublicKey.from_public_bytes(raw[1:])
    _check_name(name)
    if key_id(name, public, algorithm).hex() != hex_id.lower():
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
    algorithm: int = ED25519  # COSIGNATURE_V1: a witness's timestamped cosignatures

    @property
    def id(self) -> bytes:
        return key_id(self.name, self.public, self.algorithm)

    def checks(self, text: str, raw: bytes) -> bool:
        """Whether `raw` (a signature line's bytes after the key id) signs `text` under this key."""
        if self.algorithm == COSIGNATURE_V1:
            if len(raw) != 8 + 64:
                return False
            message = cosigned_message(int.from_bytes(raw[:8], "big"), text)
            raw = raw[8:]
        else:
            message = text.encode()
        try:
            self.public.verify(raw, message)
        except InvalidSignature:
            return False
        return True


def cosigned_message(timestamp: int, text: str) -> bytes:
    """What a cosignature/v1 signs: the header, the time, then the checkpoint text."""
    return f"cosignature/v1\ntime {timestamp}\n".encode() + text.encode()


def cosign(text: str, signer: Signer, timestamp: int) -> str:
    """A witness's cosignature/v1 line (`— <name> <base64(key id || time || signature)>\n`) over
    checkpoint `text`, as C2SP tlog-cosignature defines it."""
    public = signer.private.public_key()
    signature = signer.private.sign(cosigned_message(timestamp, text))
    blob = key_id(signer.name, public, COSIGNATURE_V1) + timestamp.to_bytes(8, "big") + signature
    return f"{SIGNATURE_PREFIX}{signer.name} {base64.b64encode(blob).decode()}\n"


def sign(text: str, signer: Signer, *more: Signer) -> str:
    """The signed note of `text` (non-empty, newline-terminated, no blank line inside), signed by
    `signer` and then by each of `more`."""
    if not text.endswith("\n") or "\n\n" in text or text.startswith("\n"):
        raise NoteError("note text: must be non-empty lines, each ending in a newline")
    lines = []
    for each in (signer, *more):
        blob = base64.b64encode(key_id(each.name, each.private.public_key()) + each.private.sign(text.encode())).decode()
        lines.append(f"{SIGNATURE_PREFIX}{each.name} {blob}\n")
    return f"{text}\n" + "".join(lines)


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
        if not verifier.checks(text, raw[4:]):
            raise NoteError("the signature does not verify (the note was altered)")
        return text
    raise NoteError("not signed by this key (signed by another key, or by none)")
