"""Verify the audit trail: each chain walked (links, hashes, derived columns, item index), and,
with signed checkpoints, held against what was signed outside the database.

Without checkpoints, verify catches edits that were not covered up. With them it also catches what
someone who can write the database and recompute hashes can do: delete rows at the end or the
start, rewrite and re-hash, forge a row, drop a whole chain. Rows after a chain's last checkpoint
are reported as not yet checkpointed, never as verified. See docs/audit-chain.md.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine

from audit.chain import Break, Walk, chain_of, chains_in, moved_out_of_chains, unchained_rows, walk_chain
from audit.checkpoints import Attested, Checkpoint


def verify(engine: Engine, tenant: str | None = None, attested: Attested | None = None,
           seal_key: bytes | None = None) -> dict[str, Any]:
    """Check one tenant's chain, or every chain; `ok` is false at the first problem of any, and
    `first_broken` names it. `attested`: the checkpoints to hold the chains against. `seal_key`
    (the service has it, an offline auditor does not): rows past the last checkpoint must carry
    the gateway's seal."""
    report: dict[str, Any] = {"ok": True, "chains": {}, "first_broken": None}
    problems: list[Break] = []
    with engine.connect() as conn:
        stored = [chain_of(tenant)] if tenant is not None else chains_in(conn)
        signed = attested.by_chain if attested is not None else {}
        names = sorted(set(stored) | ({n for n in signed if n == chain_of(tenant)} if tenant is not None else set(signed)))
        emptied = moved_out_of_chains(conn, tenant)
        if emptied is not None:
            problems.append(emptied)
        for name in names:
            checkpoints = signed.get(name, [])
            walk = walk_chain(conn, name, want=frozenset(c.size for c in checkpoints), seal_key=seal_key,
                              sealed_after=max((c.size for c in checkpoints), default=0) if checkpoints else None)
            found, entry = _judge(walk, checkpoints, attested is not None)
            report["chains"][name] = entry
            problems.extend(found)
        if tenant is None:
            report["rows_before_chaining"] = unchained_rows(conn)
    if attested is not None:
        problems = [Break("-", None, None, f"checkpoint file line {line}: {what}") for line, what in attested.problems] + problems
        last = attested.last(names)
        report["checkpoints"] = {"file": attested.file, "notes": attested.notes, "last": _last(last)}
        report["checkpointed"] = sum(c.get("checkpointed", 0) for c in report["chains"].values())
        report["not_yet_checkpointed"] = sum(c.get("not_yet_checkpointed", 0) for c in report["chains"].values())
    if problems:
        report["ok"], report["first_broken"] = False, problems[0].as_dict()
        report["problems"] = [p.as_dict() for p in problems]
    return report


def _last(checkpoint: Checkpoint | None) -> dict[str, Any] | None:
    return None if checkpoint is None else {"chain": checkpoint.chain, **checkpoint.as_dict()}


def _judge(walk: Walk, checkpoints: list[Checkpoint], with_checkpoints: bool) -> tuple[list[Break], dict[str, Any]]:
    """The problems of one walked chain against its checkpoints, and its line in the report."""
    chain = walk.chain
    problems = [walk.broken] if walk.broken is not None else []
    entry: dict[str, Any] = {"rows": walk.rows, "ok": True}
    if with_checkpoints:
        problems += [p for c in sorted(checkpoints, key=lambda c: c.size) if (p := _against(walk, c)) is not None]
        oldest = max((c.oldest for c in checkpoints), default=1)
        if checkpoints and walk.rows and walk.first > oldest:
            problems.append(Break(chain, walk.first, None, f"rows {oldest} to {walk.first - 1} are gone: the chain starts at "
                                  f"{walk.first}, but no signed prune removed them"))
        covered = min(max((c.size for c in checkpoints), default=0), walk.head)
        entry["checkpointed"] = max(0, covered - walk.first + 1)
        entry["not_yet_checkpointed"] = max(0, walk.head - max(covered, walk.first - 1)) if walk.broken is None else 0
        entry["last_checkpoint"] = _last(max(checkpoints, key=lambda c: c.size)) if checkpoints else None
    if walk.unsealed is not None and walk.broken is None:
        problems.append(walk.unsealed)
    entry["ok"] = not problems
    return problems, entry


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
        return Break(chain, walk.head + 1, None, f"the chain ends at {walk.head}, shorter than {at}, which says {size} "
                     f"rows: {size - walk.head} deleted at the end")
    if size < walk.first:
        if size == walk.first - 1 and checkpoint.head != walk.start_hash:
            return Break(chain, walk.first, None, f"the chain's oldest row does not link to {at}")
        return None  # pruned, and checked by the oldest position a signed prune kept
    if walk.hashes.get(size) != checkpoint.head:
        return Break(chain, size, None, f"row {size} does not match {at}: rows rewritten")
    return None
