"""Verify the audit trail: each chain walked (links, hashes, derived columns, item index), and,
with signed checkpoints, held against what was signed outside the database.

Without checkpoints, verify catches edits that were not covered up. With them it also catches what
someone who can write the database and recompute hashes can do: delete rows at the end or the
start, rewrite and re-hash, forge a row, drop a whole chain. Rows after a chain's last checkpoint
are reported as not yet checkpointed, never as verified. See docs/audit-chain.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection, Engine

from api.audit import ChainReport
from audit.chain import anchor_of, audit_trace, chain_of, chains_in
from audit.integrity.checkpoints import Adoption, Attested, Checkpoint, adoption_of, cut_of, impossible_mark, unfiled_marks
from audit.integrity.merkle import Range
from audit.integrity.reports import CheckpointSeen, CheckpointsRead, Verified, chain_line
from audit.integrity.walk import Break, Walk, moved_out_of_chains, rollup_break, unchained_rows, walk_chain


def verify(
    engine: Engine,
    tenant: str | None = None,
    attested: Attested | None = None,
    seal_key: bytes | None = None,
    known: Attested | None = None,
    signer_since: datetime | None = None,
    file_named: bool = True,
) -> Verified:
    """Check one tenant's chain, or every chain; `ok` is false at the first problem of any, and
    `first_broken` names it. `attested`: the checkpoints to hold the chains against. `seal_key`
    (the service has it, an offline auditor does not): rows past the last checkpoint must carry
    the gateway's seal. `known`: checkpoints the auditor holds from before (`hold_to_known`).
    `signer_since`: the service's own verify, see `_never_checkpointed`. `file_named`: whether the
    report names the checkpoint file (the service's own does not: where it keeps it is not a
    reviewer's business)."""
    chains: dict[str, ChainReport] = {}
    counted: list[_Judged] = []
    problems: list[Break] = []
    if attested is not None and known is not None:
        problems += hold_to_known(attested, known)
    with engine.connect() as conn:
        stored = [chain_of(tenant)] if tenant is not None else chains_in(conn)
        signed = attested.by_chain if attested is not None else {}
        names = sorted(set(stored) | ({n for n in signed if n == chain_of(tenant)} if tenant is not None else set(signed)))
        emptied = moved_out_of_chains(conn, tenant)
        if emptied is not None:
            problems.append(emptied)
        for name in names:
            checkpoints = signed.get(name, [])
            # With the seal key every row past the last checkpoint must carry the seal, from the
            # chain's first row on when it has none: no row is exempt for coming first.
            walk = walk_chain(
                conn,
                name,
                want=frozenset(c.size for c in checkpoints),
                seal_key=seal_key,
                sealed_after=max((c.size for c in checkpoints), default=0),
                tree=_tree_before(conn, name, checkpoints) if any(c.tree for c in checkpoints) else None,
            )
            found, judged = _judge(walk, checkpoints, attested is not None)
            rollup = rollup_break(conn, walk)
            if rollup is not None:
                found.append(rollup)
            if attested is not None and not checkpoints and walk.rows and walk.broken is None:
                found += _never_checkpointed(conn, walk, attested, name, signer_since)
            chains[name] = judged.line(not found)
            counted.append(judged)
            problems.extend(found)
        unchained = unchained_rows(conn) if tenant is None else None
    opened: dict[str, Any] = {}
    if unchained is not None:
        opened["rows_before_chaining"] = unchained
    if attested is not None:
        problems = [Break("-", None, None, f"checkpoint file line {line}: {what}") for line, what in attested.problems] + problems
        last = attested.last(names)
        named = {"file": attested.file} if file_named else {}
        opened["checkpoints"] = CheckpointsRead(**named, notes=attested.notes, last=CheckpointSeen.of(last) if last else None)
        opened["checkpointed"] = sum(j.checkpointed or 0 for j in counted)
        opened["not_yet_checkpointed"] = sum(j.not_yet_checkpointed or 0 for j in counted)
    if problems:
        opened["problems"] = [p.link() for p in problems]
    return Verified(ok=not problems, chains=chains, first_broken=problems[0].link() if problems else None, **opened)


GRACE = timedelta(minutes=10)  # a chain may wait this long past the file's newest checkpoint for its first


def _never_checkpointed(
    conn: Connection, walk: Walk, attested: Attested, chain: str, signer_since: datetime | None
) -> list[Break]:
    """A chain with rows and no checkpoint in the file: fine while it is new (its rows came after
    the file's newest checkpoint), not when its rows are dated before the file's newest checkpoint
    (the signer would have signed them, or refused them, by then: rows it never saw written, or a
    file cut short), nor, offline, when the file attests nothing at all. The service's own verify
    (`signer_since`: when its signer started) holds an empty file to that instant instead: a chain
    dated before it was found, not seen written."""
    if not attested.newest and signer_since is None:
        return [
            Break(
                chain,
                walk.first,
                None,
                f"the checkpoint file attests nothing, but the chain holds {walk.rows} rows "
                "(a file emptied or replaced, or rows the signer never saw written)",
            )
        ]
    oldest = conn.execute(select(func.min(audit_trace.c.created_at)).where(audit_trace.c.chain == chain)).scalar_one()
    signed_at = _instant(attested.newest) if attested.newest else signer_since
    what = f"the file's newest checkpoint ({attested.newest})" if attested.newest else "this signer started (with no checkpoints)"
    if oldest is not None and signed_at is not None and _aware(oldest) < signed_at - GRACE:
        return [
            Break(
                chain,
                walk.first,
                None,
                f"no checkpoint covers this chain, though its rows date from before {what}: "
                "rows the signer never saw written, or a checkpoint file cut short or lost",
            )
        ]
    return []


def _instant(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def hold_to_known(attested: Attested, known: Attested) -> list[Break]:
    """Monotonic verify: every checkpoint the auditor was given before (`known`: saved from an
    earlier verify, or cosigned by a witness) must still be in the file, so a file emptied,
    truncated or replaced with an older one fails. The known checkpoints are then held against the
    chains too."""
    problems = [Break("-", None, None, f"known checkpoints, line {line}: {what}") for line, what in known.problems]
    for chain, checkpoints in sorted(known.by_chain.items()):
        present = {(c.size, c.head) for c in attested.by_chain.get(chain, [])}
        for held in unfiled_marks(checkpoints, attested.by_chain.get(chain, [])):
            problems.append(
                Break(
                    chain,
                    None,
                    None,
                    f"a checkpoint you hold says the chain was {held.text()}; no checkpoint of the file carries that "
                    "mark as it is (row and time): it was altered, moved or dropped since",
                )
            )
        for c in sorted(checkpoints, key=lambda c: c.size):
            if (c.size, c.head) not in present:
                problems.append(
                    Break(
                        chain,
                        None,
                        None,
                        f"the checkpoint file lacks a checkpoint you hold (size {c.size}, "
                        f"signed {c.time}): the file was emptied, truncated or replaced",
                    )
                )
        attested.by_chain.setdefault(chain, []).extend(c for c in checkpoints if (c.size, c.head) not in present)
    return problems


def _tree_before(conn: Connection, chain: str, checkpoints: list[Checkpoint]) -> Range | None:
    """The Merkle tree of the positions before a chain's oldest kept row: empty, or the range its
    signed prune kept (None when there is none: its roots are then not checked)."""
    oldest = anchor_of(conn, chain)
    return Range() if oldest == 1 else cut_of(checkpoints, oldest)


@dataclass(frozen=True, slots=True)
class _Judged:
    """One walked chain held against its checkpoints: what its line in the report says, but whether
    it held, which later checks of the chain may still decide."""

    rows: int
    checkpointed: int | None = None  # with checkpoints: the rows they cover, and those they do not yet
    not_yet_checkpointed: int | None = None
    last: Checkpoint | None = None
    adopted: Adoption | None = None

    def line(self, ok: bool) -> ChainReport:
        return chain_line(self.rows, ok, self.adopted, self.checkpointed, self.not_yet_checkpointed, self.last)


def _judge(walk: Walk, checkpoints: list[Checkpoint], with_checkpoints: bool) -> tuple[list[Break], _Judged]:
    """The problems of one walked chain against its checkpoints, and its line in the report."""
    chain = walk.chain
    problems = [walk.broken] if walk.broken is not None else []
    judged = _Judged(walk.rows)
    if with_checkpoints:
        problems += [p for c in sorted(checkpoints, key=lambda c: c.size) if (p := _against(walk, c)) is not None]
        oldest = max((c.oldest for c in checkpoints), default=1)
        if checkpoints and walk.rows and walk.first > oldest:
            problems.append(
                Break(
                    chain,
                    walk.first,
                    None,
                    f"rows {oldest} to {walk.first - 1} are gone: the chain starts at "
                    f"{walk.first}, but no signed prune removed them",
                )
            )
        covered = min(max((c.size for c in checkpoints), default=0), walk.head)
        problems += [
            Break(chain, None, None, f"the checkpoint signed {c.time} (file line {c.line}): {why}")
            for c in checkpoints
            if (why := impossible_mark(c)) is not None
        ]
        judged = _Judged(
            walk.rows,
            checkpointed=max(0, covered - walk.first + 1),
            not_yet_checkpointed=max(0, walk.head - max(covered, walk.first - 1)) if walk.broken is None else 0,
            last=max(checkpoints, key=lambda c: c.size) if checkpoints else None,
            adopted=adoption_of(checkpoints),  # never dropped for passing: an operator's trust, not a signer's sight
        )
    if walk.unsealed is not None and walk.broken is None:
        problems.append(walk.unsealed)
    return problems, judged


def _against(walk: Walk, checkpoint: Checkpoint) -> Break | None:
    """What is wrong with one chain, given one signed checkpoint of it."""
    chain, size, at = walk.chain, checkpoint.size, f"the checkpoint signed {checkpoint.time} (file line {checkpoint.line})"
    if checkpoint.refused is not None:
        seq, why = checkpoint.refused
        return Break(chain, seq, None, f"the signer refused this row on {checkpoint.time}: {why}")
    if walk.rows == 0 and walk.broken is None:
        return Break(chain, None, None, f"the chain is gone: {at} says it had {size} rows")
    if walk.broken is not None and (walk.broken.seq is None or size >= walk.broken.seq):
        return None  # already reported: the walk broke at or before this position
    if size > walk.head:
        return Break(
            chain,
            walk.head + 1,
            None,
            f"the chain ends at {walk.head}, shorter than {at}, which says {size} rows: {size - walk.head} deleted at the end",
        )
    if size < walk.first:
        if size == walk.first - 1 and checkpoint.head != walk.start_hash:
            return Break(chain, walk.first, None, f"the chain's oldest row does not link to {at}")
        return None  # pruned, and checked by the oldest position a signed prune kept
    if walk.hashes.get(size) != checkpoint.head:
        return Break(chain, size, None, f"row {size} does not match {at}: rows rewritten")
    if checkpoint.tree and size in walk.roots and walk.roots[size] != checkpoint.tree:
        return Break(chain, size, None, f"the Merkle root of rows 1 to {size} does not match {at}")
    return None
