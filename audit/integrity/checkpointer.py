"""The signer of the audit checkpoints (audit.integrity.checkpoints).

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

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone

import anyio
import anyio.to_thread
from sqlalchemy.engine import Connection, Engine

from audit.chain import Appended, anchor_of, chain_heads, row_hashes
from audit.integrity.checkpoints import (
    Adoption,
    Checkpoint,
    CheckpointLog,
    Signed,
    WitnessSubmission,
    adoption_of,
    chain_tag,
    cosigned_log,
    cut_of,
    now_rfc3339,
    open_by_any,
    origin_of,
    origin_signer,
    read_checkpoints,
)
from audit.integrity.keys import seal_key
from audit.integrity.merkle import Range, consistency_proof, leaf_hash
from audit.integrity.notes import NoteError, Signer, Verifier, sign
from audit.integrity.walk import Walk, walk_chain, walk_links

log = logging.getLogger("gateway.audit.checkpoints")


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
        self._signed: dict[str, Signed] = {}
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
                self._signed[name] = Signed(
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

    def signed_at(self, chain: str) -> str | None:
        """When this signer last signed `chain` (RFC 3339), or None."""
        signed = self._signed.get(chain)
        return signed.time if signed is not None else None

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

    def checkpoint(self, every_chain: bool = False, adopt: bool = False, restate: Iterable[str] = ()) -> list[Checkpoint]:
        """Sign the chains that grew since the last checkpoint (or, with `every_chain`, any chain
        whose head is past what this signer signed: rows of other replicas, or from before a
        restart). `adopt` (an operator's decision): sign chains found without a checkpoint as they
        are, marked `adopted`. `restate`: chains signed again now even when they did not grow, so a
        note dated now says how many rows they had (an evidence pack's proof of its period's end).
        Returns what was appended to the file."""
        restate = frozenset(restate)
        with self._turn:
            with self._counter:
                grown, self._grown, self._fresh, self._last = self._grown, set(), 0, self.clock()
            if not every_chain and not grown and not restate:
                return []
            with self.engine.connect() as conn:
                heads = chain_heads(conn, None if every_chain else sorted(grown | restate))
                chains = sorted(
                    c
                    for c, head in heads.items()
                    if (every_chain or c in grown or c in restate)
                    and (head > self._size(c) or c in restate)
                    and c not in self._stuck
                )
                if every_chain and not self._signed and any(c not in self._born for c in chains):
                    self.started_without_checkpoints = True
                made = [c for c in (self._segment(conn, chain, adopt, chain in restate) for chain in chains) if c is not None]
            notes = [self._sign(c) for c in made]
            self.log.append(notes)
            self.signed_count += len(notes)
            for c in made:
                self._signed[c.chain] = Signed(c.size, c.head, c.oldest, c.tree, c.time, c.adopted)
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
        note = self.witness.latest(origin_of(chain))
        if note is None:
            return
        try:
            found = Checkpoint.parse(open_by_any(note, self.verifiers))
        except NoteError:
            log.error("audit chain %s: the witness's checkpoint does not verify with this signer's keys", chain)
            return
        if found.chain == chain and found.refused is None:
            self._signed[chain] = Signed(found.size, found.head, found.oldest, found.tree, found.time, found.adopted)
            self._witnessed[chain] = found.size
            log.warning("audit chain %s: recovered from the witness at %s rows", chain, found.size)

    def _size(self, chain: str) -> int:
        signed = self._signed.get(chain)
        return signed.size if signed else 0

    def _segment(self, conn: Connection, chain: str, adopt: bool = False, restate: bool = False) -> Checkpoint | None:
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
            stored = chain_heads(conn, [chain]).get(chain, 0)
            if stored < signed.size:  # a checkpoint (the file's, or the witness's it recovered from) names rows the store lacks
                why = f"the store holds {stored} rows of it, fewer than the {signed.size} a signed checkpoint names"
                if self.refusing.get(chain) != why:
                    log.error(
                        "audit chain %s: %s; not signing until rows are restored (`gateway audit verify` names the gap)",
                        chain,
                        why,
                    )
                self.refusing[chain] = why
                return None
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
        if refused is None and size <= (signed.size if signed else 0) and not (restate and signed and size == signed.size):
            return None
        self.refusing.pop(chain, None)
        tree = self._grown_tree(conn, chain, signed, walk, size)
        time = now_rfc3339()
        adopted = signed.adopted if signed is not None else None if chain in self._born else Adoption(size, time)
        return Checkpoint(
            chain, size, head, time, oldest, refused, adopted=adopted, tree=tree.root().hex() if tree is not None else ""
        )

    trees = True  # False: checkpoints without a Merkle root, as before trees (bench/audit_integrity_bench.py's baseline)

    def _grown_tree(self, conn: Connection, chain: str, signed: Signed | None, walk: Walk, size: int) -> Range | None:
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
