"""What verify answers, typed: the contract's VerifyReport (api.audit) as verify fills it, with what an
offline verify adds, and the checkpoints it names. Built once, where the walk is judged, and served as
it is: the JSON route, the chain check page, `gateway audit verify` and a prune read the same value."""

from __future__ import annotations

from typing import Any

from api.audit import Adoption, BrokenLink, ChainReport, VerifyReport
from api.wire import Wire
from audit.integrity.checkpoints import Adoption as Adopted
from audit.integrity.checkpoints import Checkpoint
from audit.record import ChainVerified


class Refusal(Wire):
    """A row the signer refused: where, and why."""

    seq: int
    reason: str


class CheckpointSeen(Wire):
    """A signed checkpoint as a report names it: its chain, size, head and time, the line of the file
    it starts on; and, when it carries them, the refusal, the adoption and the Merkle root."""

    chain: str
    size: int
    head: str
    time: str
    line: int
    refused: Refusal | None = None
    adopted: Adoption | None = None
    tree: str | None = None

    @classmethod
    def of(cls, checkpoint: Checkpoint) -> CheckpointSeen:
        carried: dict[str, Any] = {}
        if checkpoint.refused is not None:
            carried["refused"] = Refusal(seq=checkpoint.refused[0], reason=checkpoint.refused[1])
        if checkpoint.adopted is not None:
            carried["adopted"] = adoption_report(checkpoint.adopted)
        if checkpoint.tree:
            carried["tree"] = checkpoint.tree
        c = checkpoint
        return cls(chain=c.chain, size=c.size, head=c.head, time=c.time, line=c.line, **carried)


class CheckpointsRead(Wire):
    """The checkpoint file verify held the chains against: the file (an offline verify names it; the
    service's own does not), how many notes it holds, and the newest checkpoint of the chains."""

    file: str | None = None
    notes: int
    last: CheckpointSeen | None


class Verified(VerifyReport):
    """VerifyReport (api.audit) as verify makes it: what the contract names, and what it leaves open
    (every answer is): the rows from before chaining (a verify of every chain), the checkpoint file
    read, and every problem, the first of which is `first_broken`. Each chain's line is the
    contract's ChainReport, with what checkpoints add to it (`chain_line`)."""

    rows_before_chaining: int | None = None
    checkpoints: CheckpointsRead | None = None
    problems: list[BrokenLink] | None = None

    @property
    def rows(self) -> int:
        """The rows walked, over every chain."""
        return sum(chain.rows for chain in self.chains.values())

    @property
    def signed(self) -> bool:
        """Whether the chains were held against signed checkpoints."""
        return self.checkpoints is not None

    def record(self) -> ChainVerified:
        """What the verify call leaves on its trace (audit.record): whether it held, over how many
        rows, and, against checkpoints, how many they cover and do not yet."""
        covered = (self.checkpointed, self.not_yet_checkpointed) if self.signed else (None, None)
        return ChainVerified(ok=self.ok, rows=self.rows, checkpointed=covered[0], not_yet_checkpointed=covered[1])


def adoption_report(adopted: Adopted) -> Adoption:
    """An operator's adoption as a report names it (api.audit.Adoption): where, when, and what it means."""
    return Adoption(size=adopted.size, time=adopted.time, what=adopted.text())


def chain_line(
    rows: int,
    ok: bool,
    adopted: Adopted | None = None,
    checkpointed: int | None = None,
    not_yet_checkpointed: int | None = None,
    last: Checkpoint | None = None,
) -> ChainReport:
    """One chain's line: its rows and whether it held; held against checkpoints (`checkpointed` given),
    how many rows they cover and do not yet, and the newest of them, which the contract leaves open."""
    named: dict[str, Any] = {} if adopted is None else {"adopted": adoption_report(adopted)}
    if checkpointed is not None:
        named["checkpointed"] = checkpointed
        named["not_yet_checkpointed"] = not_yet_checkpointed
        named["last_checkpoint"] = CheckpointSeen.of(last) if last is not None else None
    return ChainReport(rows=rows, ok=ok, **named)
