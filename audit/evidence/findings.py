"""What an evidence pack's check finds: each problem by file and line, the rows read, the check's state."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from audit.chain import COLUMNS, StoredTrace
from audit.evidence.documents import UNCHECKED, CheckpointsHeld, Problem, Unchecked, WitnessSeen
from audit.integrity import Adoption, Checkpoint


@dataclass(slots=True)
class PackRow:
    file: str
    line: int
    data: dict[str, Any]
    created_at: datetime

    def stored(self) -> StoredTrace:
        """The row the line holds, read back as every reader reads one (a column it lacks: None)."""
        return StoredTrace.of({**dict.fromkeys(COLUMNS), **self.data, "created_at": self.created_at})


@dataclass(slots=True)
class PackCheck:
    directory: Path
    problems: list[Problem] = field(default_factory=list)
    merkle: str = ""  # what the tree before the pack allows
    positions: Positions | None = None
    verified: list[tuple[int, Checkpoint]] = field(default_factory=list)  # the pack's notes that verify, of its chain
    held: list[Checkpoint] = field(default_factory=list)  # checkpoints (the pack's and the auditor's) its rows match

    def fail(self, file: str, line: int | None, what: str) -> None:
        self.problems.append(Problem(file=file, line=line, what=what))

    def json(self, name: str) -> Any:
        try:
            return json.loads((self.directory / name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            self.fail(name, None, "missing")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            self.fail(name, getattr(exc, "lineno", None), f"not readable JSON ({type(exc).__name__})")
        return None


@dataclass(slots=True)
class Signatures:
    """What the pack's checkpoint notes give, as the check goes: how many there are and verify, the
    last position a checkpoint the rows match ties (the auditor's own count too: `tie`), what the
    tree before the pack allows, the witnesses' cosignatures, the names of signatures not checked,
    and the adoption the checkpoints carry."""

    merkle: str
    witnesses: dict[str, int]  # cosignatures checked, by witness
    notes: int = 0
    verified: int = 0
    tied_through: int | None = None
    unchecked: set[str] = field(default_factory=set)
    adoption: Adoption | None = None

    def tie(self, size: int) -> None:
        self.tied_through = size if self.tied_through is None else max(self.tied_through, size)

    def report(self) -> CheckpointsHeld:
        return CheckpointsHeld(
            notes=self.notes,
            verified=self.verified,
            tied_through=self.tied_through,
            merkle=self.merkle,
            witnesses={name: WitnessSeen(cosigned=n, checked=True) for name, n in self.witnesses.items()},
            unchecked_signatures=Unchecked(names=sorted(self.unchecked), what=UNCHECKED) if self.unchecked else None,
        )


@dataclass(slots=True)
class Positions:
    """The pack's rows by position: their hashes, and the Merkle root at each (when the tree before
    the pack is given)."""

    first: int | None
    last: int | None
    hashes: dict[int, str]
    roots: dict[int, str]
    start_hash: str  # what the pack's first row links to

    def mismatch(self, checkpoint: Checkpoint, signed: str) -> str | None:
        """Why the rows do not match a checkpoint within them (None: they do)."""
        size = checkpoint.size
        assert self.first is not None
        head = self.hashes.get(size) if size >= self.first else self.start_hash
        if head != checkpoint.head:
            return f"row {size} does not carry the head hash of {signed}: rows rewritten"
        if checkpoint.tree and size in self.roots and self.roots[size] != checkpoint.tree:
            return f"the Merkle root of rows 1 to {size} from the pack is not the one of {signed}"
        return None

    def holds(self, size: int) -> bool:
        return self.first is not None and self.last is not None and self.first - 1 <= size <= self.last
