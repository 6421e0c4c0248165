"""A witness of the audit checkpoints: a second party that cosigns each checkpoint only when it
extends the last one it cosigned for that chain, so a signer that was made to fork the trail (to
sign a rewritten chain after losing its checkpoints) is refused by someone who remembers.

The protocol is C2SP tlog-witness's `add-checkpoint` (https://c2sp.org/tlog-witness): the request
body is `old <size>`, the consistency proof from that size (one base64 hash a line, RFC 9162
§2.1.4), a blank line, and the signed checkpoint note. The answers: 200 with the witness's
signature line; 409 with the size it has cosigned when `old` is not it (the client retries from
there); 403 when the note is not signed by the log's key; 422 when the proof does not show the new
tree to extend the cosigned one (a fork, logged) or the checkpoint carries no Merkle root. Any
C2SP checkpoint (https://c2sp.org/tlog-checkpoint: origin, size, root hash, extension lines) is
held to its proof, the gateway's own and another log's alike (a gateway checkpoint of the form
before C2SP, with its root in a `tree` line, too). The cosignature is C2SP's timestamped
`cosignature/v1` line (audit.notes.cosign), what litewitness returns, so a C2SP verifier checks it.
`GET /checkpoint?origin=...` answers the latest cosigned note, for a signer recovering its state and
for an auditor's `verify --known`.

The witness keeps one file per chain (the latest cosigned note, replaced atomically) in its state
directory, which must not be the gateway's: that is the point of it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from audit.integrity.checkpoints import ORIGIN_PREFIX, Checkpoint
from audit.integrity.merkle import verify_consistency
from audit.integrity.notes import NoteError, Signer, Verifier, cosign, open_note

log = logging.getLogger("gateway.audit.witness")
WITNESS_NAME = "gateway.witness"
MAX_BODY = 64 * 1024
MAX_PROOF = 64  # hashes: a tree of 2^63 leaves needs fewer


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    text: str


class Witness:
    def __init__(self, state: Path, log_key: Verifier, signer: Signer) -> None:
        self.state, self.log_key, self.signer = state, log_key, signer
        self._lock = threading.Lock()
        state.mkdir(parents=True, exist_ok=True)

    def _path(self, origin: str) -> Path:
        return self.state / (hashlib.sha256(origin.encode()).hexdigest()[:32] + ".note")

    def latest(self, origin: str) -> str | None:
        try:
            return self._path(origin).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def add_checkpoint(self, body: str) -> Answer:
        if len(body) > MAX_BODY:
            return Answer(400, "body too large\n")
        head, sep, note = body.partition("\n\n")
        lines = head.split("\n")
        if not sep or not lines[0].startswith("old ") or not lines[0][4:].isdigit() or len(lines) - 1 > MAX_PROOF:
            return Answer(400, "expected: old <size>, the consistency proof, a blank line, the checkpoint note\n")
        old = int(lines[0][4:])
        try:
            proof = [base64.b64decode(line, validate=True) for line in lines[1:]]
            text = open_note(note, self.log_key)
            checkpoint = tree_head(text)
        except (binascii.Error, ValueError) as exc:
            if isinstance(exc, NoteError) and "not signed by this key" in str(exc) or "does not verify" in str(exc):
                return Answer(403, "the checkpoint is not signed by the log's key\n")
            return Answer(400, f"malformed: {exc}\n")
        if not checkpoint.root:
            return Answer(422, "the checkpoint carries no Merkle root: nothing to hold it to\n")
        origin = note.split("\n", 1)[0]
        with self._lock:
            stored = self.latest(origin)
            known = tree_head(open_note(stored, self.log_key)) if stored else None
            size = known.size if known is not None else 0
            if old != size:
                return Answer(409, f"{size}\n")
            if checkpoint.size < size:
                return Answer(409, f"{size}\n")
            old_root = bytes.fromhex(known.root) if known is not None and known.root else b""
            if known is not None and not known.root:
                return Answer(422, "the cosigned checkpoint carries no Merkle root\n")
            if not verify_consistency(size, checkpoint.size, old_root, bytes.fromhex(checkpoint.root), proof):
                log.error(
                    "witness: %s: a checkpoint of %s rows does not extend the cosigned one of %s: refused (a fork)",
                    origin,
                    checkpoint.size,
                    size,
                )
                return Answer(422, f"the checkpoint of {checkpoint.size} rows does not extend the cosigned one of {size} rows\n")
            signature = cosign(text, self.signer, int(time.time()))
            cosigned = note + signature
            path = self._path(origin)
            temporary = path.with_suffix(".tmp")
            temporary.write_text(cosigned, encoding="utf-8")
            with open(temporary, "rb") as handle:
                os.fsync(handle.fileno())
            temporary.replace(path)
        return Answer(200, signature)


@dataclass(frozen=True, slots=True)
class TreeHead:
    """What a witness needs of a checkpoint: its origin, size and Merkle root (hex; "" when none)."""

    origin: str
    size: int
    root: str


def tree_head(text: str) -> TreeHead:
    """A C2SP checkpoint's origin, size and root hash (NoteError when it is not one). A gateway
    checkpoint of the form before C2SP (the head third, the root in `tree`) gives its `tree`."""
    lines = text.split("\n")
    if len(lines) < 4 or text[-1:] != "\n" or not lines[0] or not lines[1].isdigit() or lines[1] != str(int(lines[1])):
        raise NoteError("not a checkpoint (origin, size, root hash)")
    if lines[0].startswith(ORIGIN_PREFIX):
        gateway = Checkpoint.parse(text)
        return TreeHead(lines[0], gateway.size, gateway.tree)
    try:
        root = base64.b64decode(lines[2], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise NoteError("the root hash is not base64") from exc
    if len(root) != 32 or any(not line for line in lines[3:-1]):
        raise NoteError("not a checkpoint: a root hash of 32 bytes, then non-empty extension lines")
    return TreeHead(lines[0], int(lines[1]), root.hex())


def cosignature(note: str, signer: Signer) -> str:
    """The witness's cosignature/v1 line over the note's text (now)."""
    return cosign(note[: note.rfind("\n\n") + 1], signer, int(time.time()))


def witness_signer(log_signer: Signer) -> Signer:
    """A key file made by `gateway audit keygen`, as the witness's signer (its own name)."""
    return Signer(WITNESS_NAME, log_signer.private)


class WitnessClient:
    """The checkpointer's side: submit each checkpoint with its consistency proof; read back the
    latest cosigned one (recovery)."""

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url, self.timeout_s = url.rstrip("/"), timeout_s

    def add(self, old: int, proof: list[bytes], note: str) -> Answer:
        import httpx

        body = f"old {old}\n" + "".join(base64.b64encode(h).decode() + "\n" for h in proof) + "\n" + note
        try:
            response = httpx.post(
                f"{self.url}/add-checkpoint",
                content=body.encode(),
                timeout=self.timeout_s,
                headers={"Content-Type": "text/plain"},
            )
        except httpx.HTTPError as exc:
            return Answer(0, f"unreachable: {type(exc).__name__}")
        return Answer(response.status_code, response.text)

    def latest(self, origin: str) -> str | None:
        import httpx

        try:
            response = httpx.get(f"{self.url}/checkpoint", params={"origin": origin}, timeout=self.timeout_s)
        except httpx.HTTPError:
            return None
        return response.text if response.status_code == 200 else None
