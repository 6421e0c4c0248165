"""Signed checkpoints of the audit chains, kept outside the database.

A checkpoint is the C2SP tlog-checkpoint body (https://c2sp.org/tlog-checkpoint) of one tenant's
chain: its origin (`gateway.audit/<tenant>`), its size (the position of its head row), the head's
hash (base64), then extension lines: `time`, `oldest` (the oldest position a signed prune kept),
and, when the signer found a row it would not vouch for, `refused <position> <why>`. Each is a
signed note (audit.integrity.notes), appended to a file the database's writer cannot reach.

The `Checkpointer` signs what it has checked: the rows since its last checkpoint must link, match
their hashes and carry the gateway's seal (audit.integrity.keys). A row that does not is never signed; the
checkpoint that stops before it says so (`refused`), which verify reports as a failure.

No trust on first use: a chain is signed from its start only when this process wrote its first row
(its genesis, sealed like every row), and every one of its rows must carry the seal. A chain found in
the store without a checkpoint of it (the checkpoint file lost, another replica's chain) is signed
only from a checkpoint published before: the checkpoint file, read again when such a chain is met.
Otherwise it is refused, in the log and in `/readyz` (`readiness`), until its checkpoint is restored
or an operator adopts it as found (`gateway audit checkpoint --adopt`). An adoption is a signed,
dated record that stays: the adopting checkpoint and every later checkpoint of the chain carry
`adopted <position> <time>` (rows up to that position were signed as found, not as seen written),
so a witness cosigns the mark with each checkpoint and an auditor's earlier notes keep it; verify,
the audit pages, the compliance overview and `verify-pack` all name it (`Adoption`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol
from urllib.parse import quote, unquote

import anyio
import anyio.to_thread
from sqlalchemy import func, select
from sqlalchemy.engine import Connection, Engine

from audit.chain.rows import Appended, Walk, anchor_of, audit_trace, row_hashes, walk_chain, walk_links
from audit.integrity.keys import KEY_NAME, seal_key
from audit.integrity.merkle import Range, consistency_proof, leaf_hash
from audit.integrity.notes import SIGNATURE_PREFIX, NoteError, Signer, Verifier, open_note, sign

log = logging.getLogger("gateway.audit.checkpoints")
ORIGIN_PREFIX = KEY_NAME + "/"


class WitnessAnswer(Protocol):
    @property
    def status(self) -> int: ...
    @property
    def text(self) -> str: ...


class WitnessSubmission(Protocol):
    """What the signer needs of a witness (audit.witness.WitnessClient): submit a checkpoint, read
    back the latest cosigned one. Named here, so this module never imports audit.integrity.witness, which
    imports it."""

    def add(self, old: int, proof: list[bytes], note: str) -> WitnessAnswer: ...
    def latest(self, origin: str) -> str | None: ...


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


@dataclass(slots=True)
class _Signed:
    size: int
    head: str
    oldest: int
    tree: str = ""  # its Merkle root, when the checkpoint carried one
    time: str = ""  # when it was signed (RFC 3339)
    adopted: Adoption | None = None  # carried into every later checkpoint of the chain


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


class Checkpointer:
    """Signs a checkpoint of the chains that grew, every `rows` appended rows or `seconds` seconds,
    whichever comes first, once at start (to catch up) and once at shutdown. Knows what it signed
    before from its own file, so a restart continues from there."""

    def __init__(
        self,
        engine: Engine,
        signer: Signer,
        log_file: CheckpointLog,
        rows: int = 100,
        seconds: int = 60,
        clock: Callable[[], float] = time.monotonic,
        witness: WitnessSubmission | None = None,
        previous: Sequence[Verifier] = (),
    ) -> None:
        self.engine, self.signer, self.log = engine, signer, log_file
        # The signing key, then the keys it replaced: checkpoints they signed are this signer's history.
        self.verifiers: list[Verifier] = [signer.verifier, *previous]
        self.witness = witness
        # Each note a witness cosigned, with its cosignature line(s): what an auditor takes as `--known`.
        self.cosigned = cosigned_log(log_file)
        self._witnessed: dict[str, int] = {}  # the size the witness last cosigned, per chain
        self.witness_refused: dict[str, str] = {}  # chains whose checkpoint the witness refused as a fork
        self.rows, self.seconds, self.clock = rows, seconds, clock
        self.seal_key = seal_key(signer)
        self._signed: dict[str, _Signed] = {}
        self._refused: set[tuple[str, int]] = set()
        self._stuck: set[str] = set()  # chains with a refused row: nothing past it is ever signed
        self._grown: set[str] = set()
        self._born: set[str] = set()  # chains whose first row this process wrote: signed from their genesis
        self._trees: dict[str, Range] = {}  # each chain's Merkle tree at its signed size, as far as this signer built it
        self._cuts: dict[str, list[Checkpoint]] = {}  # each chain's checkpoints that carry a prune's range
        self._pending_cuts: dict[str, Range] = {}  # ranges of what a prune is removing, for its checkpoint
        self.refusing: dict[str, str] = {}  # chains found without a checkpoint of them, and why they are not signed
        self.started_without_checkpoints = False  # the file held none when chains were found (see `readiness`)
        self.started_at = datetime.now(timezone.utc)
        self._fresh = 0
        self.signed_count = 0  # checkpoints this process signed (the gateway's metrics read it)
        self._last = clock()
        self._counter = threading.Lock()
        self._turn = threading.Lock()
        self.caught_up = threading.Event()  # set once the start-up catch-up has signed (or failed)
        self._load()

    def _load(self, chain: str | None = None) -> None:
        """What this signer signed before, from its published checkpoints (every chain, or one)."""
        attested = read_checkpoints(self.log.path, self.verifiers, chain)
        for name, checkpoints in attested.by_chain.items():
            newest = max(checkpoints, key=lambda c: c.size)
            known = self._signed.get(name)
            if known is None or newest.size > known.size:
                self._signed[name] = _Signed(
                    newest.size,
                    newest.head,
                    max(c.oldest for c in checkpoints),
                    newest.tree,
                    newest.time,
                    adoption_of(checkpoints),
                )
            self._refused.update((name, c.refused[0]) for c in checkpoints if c.refused)
            self._cuts[name] = [c for c in checkpoints if c.range]

    def appended(self, rows: Iterable[Appended]) -> None:
        """Called after a commit (from the writer's thread): counts towards the next checkpoint. A
        chain whose first row this process wrote is born here: it is signed from its genesis (a
        process that ends without signing, killed before its shutdown checkpoint, leaves the chain
        to be found without a checkpoint by the next)."""
        with self._counter:
            for row in rows:
                self._grown.add(row.chain)
                self._fresh += 1
                if row.seq == 1:
                    self._born.add(row.chain)

    def state(self, chain: str) -> dict[str, object]:
        """What this signer knows of one chain: its last signed checkpoint (size and time), whether
        a witness is configured, the size it last cosigned here, and why it refused, if it did."""
        signed = self._signed.get(chain)
        return {
            "signed_size": signed.size if signed else 0,
            "signed_at": signed.time if signed else None,
            "witness": self.witness is not None,
            "cosigned_size": self._witnessed.get(chain, 0),
            "witness_refused": self.witness_refused.get(chain),
            "refusing": self.refusing.get(chain),
            "adopted": signed.adopted.as_dict() if signed is not None and signed.adopted is not None else None,
        }

    @property
    def unsigned(self) -> int:
        """Rows appended here since the last checkpoint (the gateway's metrics read it)."""
        return self._fresh

    def due(self) -> bool:
        with self._counter:
            return self._fresh >= self.rows or (self._fresh > 0 and self.clock() - self._last >= self.seconds)

    def readiness(self) -> str:
        """ "ok", or why this signer cannot vouch for the trail now (`/readyz`): the chains it refuses to
        sign (found without a checkpoint of them, or stopped at a row it refused) and those whose
        checkpoint the witness refused as a fork. /readyz answers anyone, so a chain is named by
        `chain_tag` (a digest of its id: no tenant's name, no row; the log names the chain). Asking
        also has the next tick look again for the checkpoints of chains found without one, so a
        checkpoint restored, published by another process or adopted since clears the refusal."""
        refusing, stuck, forked = dict(self.refusing), set(self._stuck), sorted(self.witness_refused)
        if refusing:
            with self._counter:
                self._grown.update(refusing)
                self._fresh = max(self._fresh, 1)
        reasons = []
        why = {**dict.fromkeys(stuck, "stopped at a row it refused"), **refusing}
        if why:
            named = ", ".join(f"{chain_tag(c)} ({why[c]})" for c in sorted(why)[:10]) + (" and more" if len(why) > 10 else "")
            reasons.append(
                f"refusing to sign {len(why)} audit chain(s): {named}; restore the checkpoint file (GATEWAY_AUDIT_CHECKPOINTS) "
                "or adopt a chain found without one with `gateway audit checkpoint --adopt`; `gateway audit verify` names a refused row"
            )
        if forked:
            named = ", ".join(chain_tag(c) for c in forked[:10]) + (" and more" if len(forked) > 10 else "")
            reasons.append(f"the audit witness refused the checkpoints of {len(forked)} chain(s) as a fork: {named}")
        return "; ".join(reasons) or "ok"

    def checkpoint(self, every_chain: bool = False, adopt: bool = False) -> list[Checkpoint]:
        """Sign the chains that grew since the last checkpoint (or, with `every_chain`, any chain
        whose head is past what this signer signed: rows of other replicas, or from before a
        restart). `adopt` (an operator's decision): sign chains found without a checkpoint as they
        are, marked `adopted`. Returns what was appended to the file."""
        with self._turn:
            with self._counter:
                grown, self._grown, self._fresh, self._last = self._grown, set(), 0, self.clock()
            if not every_chain and not grown:
                return []
            with self.engine.connect() as conn:
                if every_chain:
                    heads = {
                        str(chain): int(head)
                        for chain, head in conn.execute(
                            select(audit_trace.c.chain, func.max(audit_trace.c.seq))
                            .where(audit_trace.c.chain.is_not(None))
                            .group_by(audit_trace.c.chain)
                        )
                    }
                else:  # the heads of the chains that grew only: one index seek each, not a scan of each chain
                    heads = {
                        chain: int(
                            conn.execute(select(func.max(audit_trace.c.seq)).where(audit_trace.c.chain == chain)).scalar_one()
                            or 0
                        )
                        for chain in sorted(grown)
                    }
                chains = sorted(
                    c
                    for c, head in heads.items()
                    if (every_chain or c in grown) and head > self._size(c) and c not in self._stuck
                )
                if every_chain and not self._signed and any(c not in self._born for c in chains):
                    self.started_without_checkpoints = True
                made = [c for c in (self._segment(conn, chain, adopt) for chain in chains) if c is not None]
            notes = [self._sign(c) for c in made]
            self.log.append(notes)
            self.signed_count += len(notes)
            for c in made:
                self._signed[c.chain] = _Signed(c.size, c.head, c.oldest, c.tree, c.time, c.adopted)
            if self.witness is not None:
                self._submit(made, notes)
            return made

    def _sign(self, checkpoint: Checkpoint) -> str:
        """The checkpoint's note, signed by the gateway's key and again by the same key under the
        chain's origin: C2SP witnesses (litewitness) know a log by a key named as its origin."""
        return sign(checkpoint.text(), self.signer, origin_signer(self.signer, checkpoint.chain))

    def _submit(self, made: list[Checkpoint], notes: list[str]) -> None:
        """Each new checkpoint with a Merkle root to the witness, with the consistency proof from
        the size it last cosigned (asked for when unknown: its 409 names it). A refusal for
        inconsistency is a fork: logged, and `readiness` says so; an unreachable witness is logged
        and tried again with the next checkpoint."""
        assert self.witness is not None
        for c, note in zip(made, notes):
            if not c.tree or c.refused is not None:
                continue
            old = self._witnessed.get(c.chain, 0)
            answer = None
            for _ in range(2):
                try:
                    with self.engine.connect() as conn:
                        proof = self._consistency(conn, c.chain, old, c.size)
                except ValueError as exc:  # the witness holds more than this chain has: it was cut back
                    answer = None
                    self.witness_refused[c.chain] = (
                        f"the witness cosigned {old} rows; this chain's checkpoint has {c.size} ({exc})"
                    )
                    log.error("audit chain %s: %s", c.chain, self.witness_refused[c.chain])
                    break
                answer = self.witness.add(old, proof, note)
                if answer.status == 409 and answer.text.strip().isdigit():
                    old = int(answer.text.strip())
                    continue
                break
            if answer is None:
                continue
            if answer.status == 0:  # unreachable: the other chains wait for the next checkpoint, not a timeout each
                log.warning("audit witness unreachable (%s): checkpoints not cosigned this time", answer.text)
                return
            if answer.status == 200:
                self._witnessed[c.chain] = c.size
                self.witness_refused.pop(c.chain, None)
                self.cosigned.append([note + answer.text])  # the note with the witness's cosignature, for auditors
            elif answer.status == 422:
                self.witness_refused[c.chain] = answer.text.strip()
                log.error(
                    "audit chain %s: the witness refused the checkpoint of %s rows: %s", c.chain, c.size, answer.text.strip()
                )
            else:
                log.warning(
                    "audit chain %s: the witness did not cosign (%s): %s", c.chain, answer.status, answer.text.strip()[:200]
                )

    def _consistency(self, conn: Connection, chain: str, old: int, size: int) -> list[bytes]:
        oldest = anchor_of(conn, chain)
        cut = cut_of(self._cuts.get(chain, ()), oldest) if oldest > 1 else None

        def leaves(start: int, end: int) -> list[bytes]:
            found = row_hashes(conn, chain, start + 1, end)
            if len(found) != end - start:
                raise ValueError(f"positions {start + 1} to {end} are not all in the store")
            return [leaf_hash(h) for h in found]

        return consistency_proof(old, size, leaves, cut)

    def _recover(self, chain: str) -> None:
        """A chain without a checkpoint in the file: the latest one the witness cosigned, when it
        verifies with this signer's key, is where this signer goes on from."""
        if self.witness is None:
            return
        note = self.witness.latest(ORIGIN_PREFIX + quote(chain, safe=""))
        if note is None:
            return
        try:
            found = Checkpoint.parse(open_by_any(note, self.verifiers))
        except NoteError:
            log.error("audit chain %s: the witness's checkpoint does not verify with this signer's keys", chain)
            return
        if found.chain == chain and found.refused is None:
            self._signed[chain] = _Signed(found.size, found.head, found.oldest, found.tree, found.time, found.adopted)
            self._witnessed[chain] = found.size
            log.warning("audit chain %s: recovered from the witness at %s rows", chain, found.size)

    def _size(self, chain: str) -> int:
        signed = self._signed.get(chain)
        return signed.size if signed else 0

    def _segment(self, conn: Connection, chain: str, adopt: bool = False) -> Checkpoint | None:
        """The checkpoint of one chain's rows since the last one, stopping before the first row this
        signer will not vouch for (and saying so, once). Past a signed position only links and seals
        are read (a narrow query): verify binds each row's content to its hash. A chain without a
        signed position is signed from its start only when it was born here (every row sealed) or
        adopted; otherwise it is refused (see the module doc)."""
        signed = self._signed.get(chain)
        if signed is None and chain not in self._born:
            self._load(chain)  # published since this signer read its file: another process of the same file
            if chain not in self._signed:
                self._recover(chain)  # or by the witness
            signed = self._signed.get(chain)
        if signed is not None:
            self.refusing.pop(chain, None)
            walk = walk_links(conn, chain, (signed.size, signed.head), self.seal_key, collect=True)
        elif chain in self._born:  # its genesis was written here: the whole chain, every row sealed
            walk = walk_chain(conn, chain, seal_key=self.seal_key, sealed_after=0, collect=True)
        elif adopt:  # an operator's trust on first use, said in the note
            log.warning("audit chain %s: adopted as found, without a checkpoint of it", chain)
            walk = walk_chain(conn, chain, seal_key=self.seal_key, collect=True)
        else:
            if chain not in self.refusing:
                log.error(
                    "audit chain %s: found without a checkpoint of it; not signing rows this signer did not see "
                    "written (restore the checkpoint file, or adopt it with `gateway audit checkpoint --adopt`)",
                    chain,
                )
            self.refusing[chain] = "found without a checkpoint of it"
            return None
        problem = walk.unsealed or walk.broken  # an unsealed row, when there is one, comes first
        size, head = (walk.head, walk.head_hash) if walk.unsealed is None else walk.before_unsealed
        oldest = signed.oldest if signed else walk.first
        refused = None
        if problem is not None:
            self._stuck.add(chain)  # walked again only after a restart (an operator looked)
        if problem is not None and problem.seq is not None and (chain, problem.seq) not in self._refused:
            self._refused.add((chain, problem.seq))
            refused = (problem.seq, problem.reason)
            log.error("audit chain %s: not signing row %s: %s", chain, problem.seq, problem.reason)
        if refused is None and size <= (signed.size if signed else 0):
            return None
        self.refusing.pop(chain, None)
        tree = self._grown_tree(conn, chain, signed, walk, size)
        time = now_rfc3339()
        adopted = signed.adopted if signed is not None else None if chain in self._born else Adoption(size, time)
        return Checkpoint(
            chain, size, head, time, oldest, refused, adopted=adopted, tree=tree.root().hex() if tree is not None else ""
        )

    trees = True  # False: checkpoints without a Merkle root, as before trees (bench/audit_integrity_bench.py's baseline)

    def _grown_tree(self, conn: Connection, chain: str, signed: _Signed | None, walk: Walk, size: int) -> Range | None:
        """The chain's Merkle tree at `size`: the one at its signed size (kept, or built again from
        the rows and checked against the signed root) extended by the rows walked. None when it
        cannot be built (a pruned chain without its prune's range, or rows that no longer give the
        signed root, which is logged)."""
        if not self.trees:
            return None
        start = signed.size if signed is not None else walk.first - 1
        tree = self._tree_at(conn, chain, start, signed.tree if signed is not None else "")
        if tree is None or walk.leaves is None:
            return None
        grown = Range(tree.size, list(tree.nodes))
        grown.extend(leaf_hash(h) for h in walk.leaves[: max(0, size - start)])
        if grown.size != size:
            return None
        self._trees[chain] = grown
        return grown

    def _tree_at(self, conn: Connection, chain: str, size: int, signed_root: str) -> Range | None:
        kept = self._trees.get(chain)
        if kept is not None and kept.size == size:
            return kept
        oldest = anchor_of(conn, chain)
        if oldest > 1:
            cut = cut_of(self._cuts.get(chain, ()), oldest)
            if cut is None:
                return None  # pruned before trees, or the prune's checkpoint is not in this file
            tree = Range(cut.size, list(cut.nodes))
        else:
            tree = Range()
        if size > tree.size:
            tree.extend(leaf_hash(h) for h in row_hashes(conn, chain, tree.size + 1, size))
        if tree.size != size:
            return None
        if signed_root and tree.root().hex() != signed_root:
            log.error("audit chain %s: the rows up to %s no longer give the Merkle root signed for them", chain, size)
            return None
        return tree

    def cut_before(self, conn: Connection, chain: str, oldest: int) -> None:
        """Before a prune removes positions below `oldest`: keep the Merkle range of them, for the
        prune's checkpoint (`pruned`)."""
        signed = self._signed.get(chain)
        tree = self._tree_at(conn, chain, oldest - 1, signed.tree if signed is not None and signed.size == oldest - 1 else "")
        if tree is not None:
            self._pending_cuts[chain] = Range(tree.size, list(tree.nodes))

    def pruned(self, prunes: dict[str, tuple[int, str]]) -> list[Checkpoint]:
        """Sign what a prune removed: per chain, the position below its new oldest row and the hash
        that row links to, with `oldest` raised, so verify can tell a prune from a deletion."""
        made = []
        for chain, (oldest, prev_hash) in sorted(prunes.items()):
            cut = self._pending_cuts.pop(chain, None)
            known = self._signed.get(chain)
            made.append(
                Checkpoint(
                    chain,
                    oldest - 1,
                    prev_hash,
                    now_rfc3339(),
                    oldest,
                    adopted=known.adopted if known is not None else None,
                    tree=cut.root().hex() if cut is not None else "",
                    range=tuple(h.hex() for h in cut.hashes()) if cut is not None else (),
                )
            )
        with self._turn:
            self.log.append(self._sign(c) for c in made)
            for c in made:
                signed = self._signed.get(c.chain)
                if signed is not None:
                    signed.oldest = max(signed.oldest, c.oldest)
                if c.range:
                    self._cuts.setdefault(c.chain, []).append(c)
        return made

    async def run(self) -> None:
        """The service's background task: catch up at start, then sign whenever a checkpoint is due."""
        await anyio.to_thread.run_sync(self._checkpoint_logged, True)
        self.caught_up.set()
        while True:
            await anyio.sleep(min(0.25, self.seconds))
            if self.due():
                await anyio.to_thread.run_sync(self._checkpoint_logged, False)

    def _checkpoint_logged(self, every_chain: bool) -> None:
        try:
            self.checkpoint(every_chain)
        except Exception as exc:  # the next tick tries again; the trail itself is unaffected
            log.error("audit checkpoint failed: %s", type(exc).__name__)
