"""A proof per trace: the row, its inclusion proof in the chain's Merkle tree, and the signed
checkpoint it is under, checkable with nothing but the public key (`verify_proof`).

A compliance team can hand one trace and its proof to an outside auditor: the auditor recomputes
the row's hash from its content, checks the path of about log2(n) hashes up to the tree root, and
the checkpoint's signature over that root. Nothing else of the trail is needed, nor disclosed.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.engine import Engine

from api.audit import TraceProof
from audit.chain import HASHED, HASHED_V1, StoredTrace, anchor_of, audit_trace, hashed_content, row_hash, row_hash_v1, row_hashes
from audit.integrity.checkpoints import Attested, Checkpoint, CheckpointLog, cut_of, open_by_any
from audit.integrity.merkle import inclusion_proof, leaf_hash, verify_inclusion
from audit.integrity.notes import NoteError, Verifier
from core.errors import Conflict

FORMAT: Final = "gateway.audit.proof/1"


def proof_of(engine: Engine, tenant: str | None, trace_id: str, attested: Attested, log_file: CheckpointLog) -> TraceProof | None:
    """The proof of one trace of `tenant`'s chain, under the newest checkpoint with a Merkle root
    that covers it; None when the trace is not this tenant's. Conflict when no such checkpoint
    covers it yet (or the tree cannot be built: a chain pruned before trees)."""
    with engine.connect() as conn:
        found = conn.execute(
            select(audit_trace).where(audit_trace.c.trace_id == trace_id, audit_trace.c.tenant == tenant)
        ).first()
        if found is None:
            return None
        row = StoredTrace.of(found._mapping)
        if row.chain is None or row.seq is None:
            raise Conflict("trace: written before the audit chain existed, so no checkpoint covers it")
        chain, seq = row.chain, row.seq
        checkpoints = attested.by_chain.get(chain, [])
        refused = min((c.refused[0] for c in checkpoints if c.refused), default=None)
        under = [c for c in checkpoints if c.tree and c.size >= seq and not (refused is not None and refused <= seq)]
        if not under:
            raise Conflict("trace: no signed checkpoint with a Merkle root covers it yet (the next checkpoint will)")
        checkpoint = max(under, key=lambda c: (c.size, c.time))
        oldest = anchor_of(conn, chain)
        cut = cut_of(checkpoints, oldest) if oldest > 1 else None
        if oldest > 1 and cut is None:
            raise Conflict("trace: its chain was pruned before Merkle trees, so no path to a signed root can be built")

        def leaves(start: int, end: int) -> list[bytes]:
            found = row_hashes(conn, chain, start + 1, end)
            if len(found) != end - start:
                raise Conflict("trace: rows of its chain are missing; run GET /v1/audit/verify")
            return [leaf_hash(h) for h in found]

        path = inclusion_proof(seq - 1, checkpoint.size, leaves, cut)
    notes = dict(log_file.notes())
    version = 2 if row_hash(row) == row.row_hash else 1
    content = hashed_content(row, HASHED if version == 2 else HASHED_V1)
    return TraceProof(
        format=FORMAT,
        trace={**content, "row_hash": row.row_hash, "hash_version": version},
        leaf_index=seq - 1,
        tree_size=checkpoint.size,
        inclusion_proof=[base64.b64encode(h).decode() for h in path],
        checkpoint=notes[checkpoint.line],
    )


def verify_proof(document: Any, verifier: Verifier | Sequence[Verifier]) -> tuple[bool, str]:
    """(ok, one line saying what holds or the first thing that does not) for a proof document,
    whose checkpoint must be signed by `verifier` (or one of several: keys before a rotation)."""
    try:
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            return False, f"not a proof document ({FORMAT})"
        checkpoint = Checkpoint.parse(open_by_any(str(document["checkpoint"]), verifier))
        trace, index, size = document["trace"], int(document["leaf_index"]), int(document["tree_size"])
        if not isinstance(trace, dict):
            return False, "trace: expected an object"
        row = {**trace, "created_at": datetime.fromisoformat(str(trace["created_at"]))}
        digest = row_hash(row) if trace.get("hash_version") == 2 else row_hash_v1(row)
        path = [base64.b64decode(p, validate=True) for p in document["inclusion_proof"]]
    except NoteError as exc:
        return False, f"the checkpoint does not verify: {exc}"
    except (KeyError, TypeError, ValueError, binascii.Error) as exc:
        return False, f"not a proof document: {type(exc).__name__} {exc}"
    if digest != trace.get("row_hash"):
        return False, "the row's content does not match its hash (edited)"
    if not checkpoint.tree:
        return False, "the checkpoint carries no Merkle root"
    if trace.get("chain") != checkpoint.chain or trace.get("seq") != index + 1 or size != checkpoint.size:
        return False, "the proof's position or tree size is not the checkpoint's"
    if not verify_inclusion(index, size, leaf_hash(digest), path, bytes.fromhex(checkpoint.tree)):
        return False, "the inclusion proof does not lead to the checkpoint's Merkle root"
    return True, (
        f"OK: trace {trace.get('trace_id')} is row {index + 1} of chain {checkpoint.chain}, under the checkpoint "
        f"of {size} rows signed {checkpoint.time}"
    )
