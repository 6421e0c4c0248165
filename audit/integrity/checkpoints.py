"""Signed checkpoints of the audit chains, kept outside the database.

A checkpoint is the C2SP tlog-checkpoint body (https://c2sp.org/tlog-checkpoint) of one tenant's
chain: its origin (`gateway.audit/<tenant>`), its size (the position of its head row), the head's
hash (base64), then extension lines: `time`, `oldest` (the oldest position a signed prune kept),
and, when the signer found a row it would not vouch for, `refused <position> <why>`. Each is a
signed note (audit.integrity.notes), appended to a file the database's writer cannot reach.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import hashlib
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol
from urllib.parse import quote, unquote

from audit.integrity.keys import KEY_NAME
from audit.integrity.merkle import Range
from audit.integrity.notes import SIGNATURE_PREFIX, NoteError, Signer, Verifier, open_note
from core.instants import to_utc

log = logging.getLogger("gateway.audit.checkpoints")
ORIGIN_PREFIX = KEY_NAME + "/"


@dataclass(frozen=True, slots=True)
class Adoption:
    """An operator's `--adopt`: rows 1 to `size` of a chain were signed as found, on `time`."""

    size: int
    time: str

    def text(self) -> str:
        return f"adopted at row {self.size} on {self.time}; rows before it are not covered by earlier checkpoints"

    def as_dict(self) -> dict[str, object]:
        return {"size": self.size, "time": self.time, "what": self.text()}


@dataclass(frozen=True, slots=True)
class Checkpoint:
    chain: str
    size: int
    head: str  # hex SHA-256 of the head row (GENESIS for an empty chain)
    time: str  # RFC 3339, UTC
    oldest: int = 1
    refused: tuple[int, str] | None = None
    line: int = 0  # where it starts in its file (0: not read from one)
    adopted: Adoption | None = None  # the chain's adoption (`--adopt`), carried by every checkpoint after it
    tree: str = ""  # hex RFC 6962 root of the chain's Merkle tree at `size` (audit.integrity.merkle); "" before trees
    range: tuple[str, ...] = ()  # a prune's: hex nodes of the compact range of what it removed (size leaves)

    def text(self) -> str:
        """The note's text. With a Merkle root it is a C2SP checkpoint: the root on the third line,
        the head row's hash in a `head` extension line, so a C2SP witness (litewitness) can hold it
        to a consistency proof. Without one (chains pruned before trees), the head on the third
        line, as before trees."""
        lines = [origin_of(self.chain), str(self.size), _b64(self.tree or self.head)]
        if self.tree:
            lines.append(f"head {_b64(self.head)}")
        lines += [f"time {self.time}", f"oldest {self.oldest}"]
        if self.refused is not None:
            lines.append(f"refused {self.refused[0]} {self.refused[1]}")
        if self.range:
            lines.append("range " + " ".join(_b64(h) for h in self.range))
        if self.adopted is not None:
            lines.append(f"adopted {self.adopted.size} {self.adopted.time}")
        return "\n".join(lines) + "\n"

    @classmethod
    def parse(cls, text: str, line: int = 0) -> Checkpoint:
        lines = text.rstrip("\n").split("\n")
        if len(lines) < 3 or not lines[0].startswith(ORIGIN_PREFIX) or not lines[1].isdigit():
            raise NoteError("not a checkpoint of a gateway audit chain")
        extensions = dict(part.partition(" ")[::2] for part in lines[3:])
        try:
            third = base64.b64decode(lines[2], validate=True).hex()
            # C2SP form: the Merkle root third and the head in `head`; before it, the head third and the root in `tree`
            head = base64.b64decode(extensions["head"], validate=True).hex() if "head" in extensions else third
        except (binascii.Error, ValueError) as exc:
            raise NoteError("the root or head hash is not base64") from exc
        refused = None
        if "refused" in extensions:
            position, _, reason = extensions["refused"].partition(" ")
            refused = (int(position), reason) if position.isdigit() else None
        oldest = extensions.get("oldest", "1")
        try:
            tree = third if "head" in extensions else base64.b64decode(extensions.get("tree", ""), validate=True).hex()
            cut = tuple(base64.b64decode(h, validate=True).hex() for h in extensions.get("range", "").split())
        except (binascii.Error, ValueError) as exc:
            raise NoteError("a tree or range hash is not base64") from exc
        return cls(
            chain=unquote(lines[0][len(ORIGIN_PREFIX) :]),
            size=int(lines[1]),
            head=head,
            time=extensions.get("time", ""),
            oldest=int(oldest) if oldest.isdigit() else 1,
            refused=refused,
            line=line,
            adopted=_adoption(extensions.get("adopted"), int(lines[1]), extensions.get("time", "")),
            tree=tree,
            range=cut,
        )

    def cut(self) -> Range | None:
        """The Merkle range of what a prune removed (positions 1..size), when this note carries it."""
        if not self.range:
            return None
        try:
            return Range.of(self.size, [bytes.fromhex(h) for h in self.range])
        except ValueError:
            return None

    def as_dict(self) -> dict[str, object]:
        body: dict[str, object] = {"size": self.size, "head": self.head, "time": self.time, "line": self.line}
        if self.refused is not None:
            body["refused"] = {"seq": self.refused[0], "reason": self.refused[1]}
        if self.adopted is not None:
            body["adopted"] = self.adopted.as_dict()
        if self.tree:
            body["tree"] = self.tree
        return body


def _adoption(value: str | None, size: int, time: str) -> Adoption | None:
    """The `adopted` extension: `<position> <time>`, or `as found` (notes before the mark was carried:
    this checkpoint is the adoption)."""
    if value is None:
        return None
    position, _, when = value.partition(" ")
    if position.isdigit() and when:
        return Adoption(int(position), when)
    return Adoption(size, time)


def cosigned_log(log: CheckpointLog) -> CheckpointLog:
    """Where the notes a witness cosigned are kept, with their cosignatures: beside the checkpoint file."""
    return CheckpointLog(log.path.with_name(log.path.name + ".cosigned"))


def origin_of(chain: str) -> str:
    """A chain's C2SP origin line: `gateway.audit/<tenant, percent-encoded>`."""
    return ORIGIN_PREFIX + quote(chain, safe="")


def origin_signer(signer: Signer, chain: str) -> Signer:
    """The gateway's key under the chain's origin name (a C2SP log's key is named as its origin)."""
    return Signer(origin_of(chain), signer.private)


def origin_verifier(verifier: Verifier, chain: str) -> Verifier:
    return Verifier(origin_of(chain), verifier.public)


def _b64(hex_hash: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_hash)).decode()


class CheckpointLog:
    """The checkpoint file: signed notes, each followed by a blank line, only ever appended (under an
    exclusive lock, so processes sharing the file never interleave) and synced to disk."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, notes: Iterable[str]) -> None:
        text = "".join(note + "\n" for note in notes)
        if not text:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())

    def notes(self) -> list[tuple[int, str]]:
        """Each note with the line it starts on; a note cut short comes back as it is (verify names it)."""
        try:
            lines = self.path.read_text(encoding="utf-8").split("\n")
        except FileNotFoundError:
            return []
        found: list[tuple[int, str]] = []
        i = 0
        while i < len(lines):
            if not lines[i]:
                i += 1
                continue
            start, text = i + 1, []
            while i < len(lines) and lines[i]:
                text.append(lines[i])
                i += 1
            i += 1  # the blank line between the text and its signatures
            signatures: list[str] = []
            # Signature lines start with an em dash; any other line starts the next note (notes pasted
            # one after another without a blank line between them, as witnesses hand them out).
            while i < len(lines) and lines[i] and (not signatures or lines[i].startswith(SIGNATURE_PREFIX)):
                signatures.append(lines[i])
                i += 1
            found.append((start, "\n".join(text) + "\n\n" + "".join(s + "\n" for s in signatures)))
        return found


@dataclass(slots=True)
class Attested:
    """The checkpoints of a file that verify with the given key, by chain, and every note that did not."""

    file: str
    by_chain: dict[str, list[Checkpoint]] = field(default_factory=dict)
    problems: list[tuple[int, str]] = field(default_factory=list)  # (line, what is wrong)
    notes: int = 0
    newest: str = ""  # the time of the newest checkpoint that verifies, of any chain (read for one chain too)

    def last(self, chains: Iterable[str] | None = None) -> Checkpoint | None:
        names = self.by_chain if chains is None else chains
        found = [c for name in names for c in self.by_chain.get(name, [])]
        return max(found, key=lambda c: (c.time, c.line)) if found else None


def open_by_any(note: str, verifiers: Verifier | Sequence[Verifier]) -> str:
    """The note's text once one of `verifiers` (the signing key, and the keys it replaced) checks
    its signature; NoteError otherwise."""
    keys = [verifiers] if isinstance(verifiers, Verifier) else list(verifiers)
    problem: NoteError | None = None
    for verifier in keys:
        try:
            return open_note(note, verifier)
        except NoteError as exc:
            problem = problem or exc
            if "altered" in str(exc):
                raise
    raise problem or NoteError("no key to check the note with")


def read_checkpoints(path: Path, verifier: Verifier | Sequence[Verifier], tenant_chain: str | None = None) -> Attested:
    """Every checkpoint in `path` (of one chain only, when `tenant_chain` is given), its signature
    checked with `verifier` (or any of several: the signing key and the keys it replaced). A note
    that does not verify is a problem, never a checkpoint."""
    attested = Attested(str(path))
    for line, note in CheckpointLog(path).notes():
        try:
            chain = Checkpoint.parse(note.partition("\n\n")[0] + "\n", line).chain
        except NoteError:
            chain = None
        if tenant_chain is not None and chain != tenant_chain:
            if chain is None:
                attested.problems.append((line, "malformed checkpoint"))
                continue
            with contextlib.suppress(NoteError):  # another tenant's: only its time, how far the signer got
                attested.newest = max(attested.newest, Checkpoint.parse(open_by_any(note, verifier), line).time)
            continue
        attested.notes += 1
        try:
            checkpoint = Checkpoint.parse(open_by_any(note, verifier), line)
        except NoteError as exc:
            attested.problems.append((line, f"checkpoint {chain or '?'}: {exc}"))
            continue
        attested.by_chain.setdefault(checkpoint.chain, []).append(checkpoint)
        attested.newest = max(attested.newest, checkpoint.time)
    return attested


def chain_tag(chain: str) -> str:
    """How `/readyz` names a chain to anyone who asks: the first 12 hex digits of the SHA-256 of its id
    (`printf %s acme | sha256sum`), which an operator can match and a passer-by cannot read a tenant from."""
    return "chain " + hashlib.sha256(chain.encode()).hexdigest()[:12]


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def impossible_mark(checkpoint: Checkpoint) -> str | None:
    """Why the adoption mark a checkpoint carries cannot be true, or None: a chain is adopted at the
    rows it had then, so the mark lies at or before the checkpoint's own size and time (a mark past
    the chain's rows, or after the checkpoint that carries it, was written, not seen)."""
    mark = checkpoint.adopted
    if mark is None:
        return None
    if mark.size > checkpoint.size:
        return f"its adoption mark names row {mark.size}, past the {checkpoint.size} rows it signs"
    when, signed = instant_of(mark.time), instant_of(checkpoint.time)
    if when is None:
        return f"its adoption mark's time {mark.time!r} is not an RFC 3339 instant"
    if signed is None or when > signed:
        return f"its adoption mark's time {mark.time} is after the checkpoint's own ({checkpoint.time})"
    return None


def signed_since(checkpoint: Checkpoint, instant: datetime) -> bool:
    """Whether `checkpoint` was signed at or after `instant` (a time that cannot be read: no)."""
    signed = instant_of(checkpoint.time)
    return signed is not None and signed >= instant


def instant_of(text: str) -> datetime | None:
    """A note's time (its `time`, an adoption mark's) as an instant, whatever its year; None when it
    is not RFC 3339 with an offset."""
    try:
        value = datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00")) if "T" in text.upper() else None
    except ValueError:
        return None
    return to_utc(value) if value is not None and value.tzinfo is not None else None


def unfiled_marks(held: Iterable[Checkpoint], filed: Iterable[Checkpoint]) -> list[Adoption]:
    """The adoption marks of checkpoints the auditor holds that no filed checkpoint carries exactly
    (row and time): a mark altered, moved or dropped since the auditor saw it."""
    carried = {c.adopted for c in filed if c.adopted is not None}
    return sorted({c.adopted for c in held if c.adopted is not None} - carried, key=lambda a: (a.size, a.time))


def adoption_of(checkpoints: Iterable[Checkpoint]) -> Adoption | None:
    """The latest adoption any of a chain's checkpoints carries (None: the chain was never adopted)."""
    marks = [c.adopted for c in checkpoints if c.adopted is not None]
    return max(marks, key=lambda a: (a.time, a.size)) if marks else None


def cut_of(checkpoints: Iterable[Checkpoint], oldest: int) -> Range | None:
    """The Merkle range a signed prune kept of positions 1..oldest-1, among a chain's checkpoints."""
    for c in checkpoints:
        if c.size == oldest - 1 and c.range:
            return c.cut()
    return None


class WitnessAnswer(Protocol):
    @property
    def status(self) -> int: ...
    @property
    def text(self) -> str: ...


class WitnessSubmission(Protocol):
    """What the signer needs of a witness (audit.integrity.witness.WitnessClient): submit a checkpoint, read
    back the latest cosigned one. Named here, so this module never imports audit.integrity.witness, which
    imports it."""

    def add(self, old: int, proof: list[bytes], note: str) -> WitnessAnswer: ...
    def latest(self, origin: str) -> str | None: ...


@dataclass(slots=True)
class Signed:
    """What a signer last signed of one chain (audit.integrity.checkpointer)."""

    size: int
    head: str
    oldest: int
    tree: str = ""  # its Merkle root, when the checkpoint carried one
    time: str = ""  # when it was signed (RFC 3339)
    adopted: Adoption | None = None  # carried into every later checkpoint of the chain
