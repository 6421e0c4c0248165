"""A proof per trace (issue 29): GET /v1/audit/traces/{id}/proof returns the row, its inclusion path
in the chain's Merkle tree and the signed checkpoint it is under; `gateway audit verify-proof`
checks it with the public key alone, and fails on any edit. Checkpoints carry the tree's RFC 6962
root, which verify holds the chain to, across a prune too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from sqlalchemy import update

from audit.chain import audit_trace
from audit.integrity import generate, leaf_hash, load_verifier, read_checkpoints, root, verify_proof
from core import store as db
from gateway.cli import main
from tests.audit.test_audit_checkpoints import TENANT, Signed, chain_rows, open_signed, signed  # noqa: F401 - the fixture

__all__ = ["signed"]


def proof(signed: Signed, trace_id: str) -> tuple[int, dict[str, Any]]:
    auditor = signed.gateway.key("auditor", roles=("auditor",))
    response = signed.gateway.client.get(f"/v1/audit/traces/{trace_id}/proof", headers=signed.gateway.auth(auditor))
    return response.status_code, response.json()


def verify_file(signed: Signed, document: dict[str, Any], tmp_path: Path, public: str = "public") -> tuple[int, str]:
    path = tmp_path / "proof.json"
    path.write_text(json.dumps(document))
    result = CliRunner().invoke(main, ["audit", "verify-proof", str(path), "--public-key", str(signed.keys[public])])
    return result.exit_code, result.output


def test_checkpoints_carry_the_chains_merkle_root(signed: Signed) -> None:
    attested = read_checkpoints(signed.checkpoints, load_verifier(signed.keys["public"]))
    (checkpoint,) = attested.by_chain[TENANT]
    with signed.gateway.store.connect() as conn:
        leaves = [leaf_hash(r["row_hash"]) for r in chain_rows(conn)]
    assert checkpoint.size == 12 and checkpoint.tree == root(leaves).hex()


def test_a_trace_and_its_proof_verify_offline_and_an_edit_does_not(signed: Signed, tmp_path: Path) -> None:
    with signed.gateway.store.connect() as conn:
        rows = chain_rows(conn)
    for row in (rows[0], rows[6], rows[11]):
        status, document = proof(signed, row["trace_id"])
        assert status == 200, document
        assert document["leaf_index"] == row["seq"] - 1 and document["tree_size"] == 12
        assert len(document["inclusion_proof"]) <= 4  # log2(12) rounded up
        code, output = verify_file(signed, document, tmp_path)
        assert code == 0 and f"is row {row['seq']} of chain acme" in output, output
    status, document = proof(signed, rows[6]["trace_id"])
    edits = {
        "the row's content": lambda d: d["trace"].update(actor="user:bob"),
        "its hash and content together": lambda d: d["trace"].update(decision="deny", row_hash="0" * 64),
        "its position": lambda d: d.update(leaf_index=5),
        "a hash of the path": lambda d: d["inclusion_proof"].__setitem__(0, d["inclusion_proof"][1]),
        "the checkpoint": lambda d: d.update(checkpoint=d["checkpoint"].replace("\n12\n", "\n13\n")),
    }
    for what, edit in edits.items():
        forged = json.loads(json.dumps(document))
        edit(forged)
        ok, line = verify_proof(forged, load_verifier(signed.keys["public"]))
        assert not ok, what
        assert verify_file(signed, forged, tmp_path)[0] == 1, what
    other = generate(tmp_path / "other")
    signed.keys["other"] = other["public"]
    code, output = verify_file(signed, document, tmp_path, public="other")
    assert code == 1 and "does not verify" in output, output


def test_a_proof_needs_a_checkpoint_and_the_tenants_own_trace(signed: Signed) -> None:
    signed.write(1)  # after the last checkpoint
    with signed.gateway.store.connect() as conn:
        newest = chain_rows(conn)[-1]
        globex = chain_rows(conn, "globex")[0]
    status, body = proof(signed, newest["trace_id"])
    assert status == 409 and "no signed checkpoint" in body["error"]["message"], body
    status, body = proof(signed, globex["trace_id"])  # another tenant's: the same 404 as none
    assert status == 404
    assert proof(signed, "tr_no_such")[0] == 404
    signed.checkpointer.checkpoint()
    assert proof(signed, newest["trace_id"])[0] == 200


def test_verify_holds_the_chain_to_the_signed_root(signed: Signed) -> None:
    """A checkpoint whose tree root does not fit the rows: what a signer that was lied to would
    have signed. Here the rows are changed in a way the hash chain alone would not show: none; so
    the root is checked by building a checkpoint over other leaves."""
    from audit.integrity import Checkpoint, load_signer, sign

    attested = read_checkpoints(signed.checkpoints, load_verifier(signed.keys["public"]))
    (good,) = attested.by_chain[TENANT]
    wrong = Checkpoint(TENANT, good.size, good.head, good.time, good.oldest, tree="ab" * 32)
    signed.checkpoints.write_text(signed.checkpoints.read_text() + sign(wrong.text(), load_signer(signed.keys["private"])) + "\n")
    code, output = signed.offline()
    assert code == 1 and "Merkle root of rows 1 to 12 does not match" in output, output


def test_a_pruned_chain_keeps_its_tree_and_its_proofs(signed: Signed, tmp_path: Path) -> None:
    assert '"initech": 5' in signed.prune_old_initech()
    signed.write(2, tenant="initech")
    signed.checkpointer.checkpoint(every_chain=True)
    attested = read_checkpoints(signed.checkpoints, load_verifier(signed.keys["public"]))
    prune_note = next(c for c in attested.by_chain["initech"] if c.range)
    assert prune_note.size == 5 and prune_note.oldest == 6
    newest = max(attested.by_chain["initech"], key=lambda c: c.size)
    assert newest.size == 10 and newest.tree
    code, output = signed.offline(tenant="initech")
    assert code == 0 and "OK: 5 rows match signed checkpoints" in output, output
    with signed.gateway.store.connect() as conn:
        kept = chain_rows(conn, "initech")
    auditor = signed.gateway.key("initech-auditor", roles=("auditor",), tenant="initech")
    response = signed.gateway.client.get(f"/v1/audit/traces/{kept[-1]['trace_id']}/proof", headers=signed.gateway.auth(auditor))
    assert response.status_code == 200, response.text
    assert verify_file(signed, response.json(), tmp_path)[0] == 0
    with db.writer(signed.gateway.store).begin() as conn:  # the proof reads the rows as they are now
        conn.execute(update(audit_trace).where(audit_trace.c.pk == kept[0]["pk"]).values(row_hash="1" * 64))
    response = signed.gateway.client.get(f"/v1/audit/traces/{kept[-1]['trace_id']}/proof", headers=signed.gateway.auth(auditor))
    assert response.status_code != 200 or verify_file(signed, response.json(), tmp_path)[0] == 1


def test_a_trail_checkpointed_before_trees_keeps_verifying_and_gains_them(database_url: str, tmp_path: Path) -> None:
    """The upgrade: checkpoints the code before Merkle trees wrote (no `tree` line) stay valid; the
    next signer builds the tree from the rows, and its checkpoints carry it, proofs included."""
    from audit.integrity import Checkpointer, CheckpointLog, load_signer

    keys = generate(tmp_path / "keys")
    checkpoints = tmp_path / "audit.checkpoints"
    with open_signed(database_url, tmp_path, keys, checkpoints) as run:
        gateway = run.gateway
        run.checkpointer.trees = False  # what the code before trees signed
        run.write(6)
        run.checkpointer.checkpoint()
        (old,) = read_checkpoints(checkpoints, load_verifier(keys["public"])).by_chain[TENANT]
        assert old.size == 6 and not old.tree and "tree" not in old.text()
        upgraded = Checkpointer(gateway.store, load_signer(keys["private"]), CheckpointLog(checkpoints))  # a new process
        run.write(3)
        (made,) = upgraded.checkpoint(every_chain=True)
        with gateway.store.connect() as conn:
            assert made.size == 9 and made.tree == root([leaf_hash(r["row_hash"]) for r in chain_rows(conn)]).hex()
            first = chain_rows(conn)[0]
        assert run.offline()[0] == 0
        status, document = proof(run, first["trace_id"])
        assert status == 200 and document["tree_size"] == 9, document
        assert verify_file(run, document, tmp_path)[0] == 0


def test_a_proof_for_a_trace_from_before_a_key_rotation(database_url: str, tmp_path: Path) -> None:
    """The signing key is replaced: the new one takes the old one's checkpoints as its history
    (GATEWAY_AUDIT_PREVIOUS_KEYS), signs on from them, and proves a trace written under the old key;
    the proof handed out before the rotation still checks with the old key."""
    old_keys, new_keys = generate(tmp_path / "old"), generate(tmp_path / "new")
    checkpoints = tmp_path / "audit.checkpoints"
    with open_signed(database_url, tmp_path, old_keys, checkpoints) as before:
        before.write(5)
        before.checkpointer.checkpoint()
        with before.gateway.store.connect() as conn:
            early = chain_rows(conn)[1]
        status, handed_out = proof(before, early["trace_id"])
        assert status == 200
    with open_signed(database_url, tmp_path, new_keys, checkpoints, audit_previous_keys=str(old_keys["public"])) as after:
        assert not after.checkpointer.refusing
        assert after.gateway.client.get("/readyz").status_code == 200
        after.write(3)
        made = after.checkpointer.checkpoint()
        (signed_now,) = [c for c in made if c.chain == TENANT]  # the 5 rows, the proof call's own, these 3
        assert signed_now.size == 9 and signed_now.tree
        status, document = proof(after, early["trace_id"])  # under the new key's checkpoint
        assert status == 200 and document["tree_size"] == 9, document
        served = after.served()
        assert served["ok"] is True, served
        after.keys["old"] = old_keys["public"]
        assert verify_file(after, document, tmp_path)[0] == 0  # the new key
        assert verify_file(after, handed_out, tmp_path, public="old")[0] == 0  # the old proof, the old key
        code, output = after.offline()
        assert code == 1 and "not signed by this key" in output  # the auditor needs both keys
        code, output = after.offline(public=("public", "old"))
        assert code == 0, output


def test_a_proof_is_admitted_at_its_cost(database_url: str, tmp_path: Path) -> None:
    """A proof reads its whole chain: at 4 units of an actor's 4 a second, a second proof right
    after the first waits (429), where a one-unit call would not have."""
    keys = generate(tmp_path / "keys")
    with open_signed(database_url, tmp_path, keys, tmp_path / "ckpt", admission_actor_rate=4) as run:
        run.write(3)
        run.checkpointer.checkpoint()
        with run.gateway.store.connect() as conn:
            trace_id = chain_rows(conn)[0]["trace_id"]
        assert proof(run, trace_id)[0] == 200
        status, body = proof(run, trace_id)
        assert status == 429 and body["error"]["code"] == "rate_limited", body
