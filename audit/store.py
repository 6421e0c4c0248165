"""The service's handle on the audit trail: traces written onto their chains (audit.chain), the
chains verified and a trace proven against the signer's checkpoints (audit.integrity). Imports
nothing from HTTP."""

from __future__ import annotations

import secrets

from sqlalchemy.engine import Engine

from api.audit import TraceProof
from audit.chain import ChainWriter, chain_of
from audit.integrity import Checkpointer, Verified, proof_of, read_checkpoints, verify
from core.errors import Conflict


class AuditStore(ChainWriter):
    """Appends traces to their tenant chains (ChainWriter: group commit), verifies them and proves
    one trace; with a checkpointer, rows are sealed and the chains signed as they grow."""

    def __init__(self, engine: Engine, key: bytes | None = None, checkpointer: Checkpointer | None = None) -> None:
        super().__init__(
            engine,
            seal_key=checkpointer.seal_key if checkpointer is not None else None,
            appended=checkpointer.appended if checkpointer is not None else None,
        )
        # The key of the trace's fingerprints; without one given, a key of this process only.
        self.key = key or secrets.token_bytes(32)
        # With a signing key: rows are sealed, and the checkpointer signs the chains as they grow.
        self.checkpointer = checkpointer

    def verify(self, tenant: str | None = None) -> Verified:
        """The integrity report of one tenant's chain (or every chain): against the signed
        checkpoints, and with rows past the last one checked for the gateway's seal, when this store
        signs; the hash chain alone otherwise. It does not name the checkpoint file: where the
        service keeps it is not a reviewer's business."""
        if self.checkpointer is None:
            return verify(self.engine, tenant)
        checkpointer = self.checkpointer
        attested = read_checkpoints(
            checkpointer.log.path, checkpointer.verifiers, chain_of(tenant) if tenant is not None else None
        )
        return verify(
            self.engine, tenant, attested, checkpointer.seal_key, signer_since=checkpointer.started_at, file_named=False
        )

    def proof(self, tenant: str | None, trace_id: str) -> TraceProof | None:
        """The proof of one of the tenant's traces (audit.integrity.proofs); None when it is not the tenant's.
        Conflict when this store signs no checkpoints, or none covers the trace yet."""
        if self.checkpointer is None:
            raise Conflict("trace: this gateway signs no audit checkpoints (GATEWAY_AUDIT_SIGNING_KEY), so there is no proof")
        checkpointer = self.checkpointer
        attested = read_checkpoints(checkpointer.log.path, checkpointer.verifiers, chain_of(tenant))
        return proof_of(self.engine, tenant, trace_id, attested, checkpointer.log)
