"""Interop with a real C2SP witness (issue 44): litewitness (filippo.io/torchwood v0.6.1, built by
./scripts/engines) cosigns the gateway's audit checkpoints on loopback, holding each to an RFC 6962
consistency proof from the last one; `gateway audit verify --known` accepts its cosigned notes and
`verify-pack --witness-key` checks its cosignatures. The other way round, the project's own witness
cosigns a checkpoint of a plain C2SP log (no gateway extensions, a key named as its origin), and its
cosignature verifies as C2SP cosignature/v1."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from audit.integrity import (
    COSIGNATURE_V1,
    Checkpointer,
    CheckpointLog,
    Range,
    Signer,
    Verifier,
    Witness,
    WitnessClient,
    consistency_proof,
    leaf_hash,
    load_signer,
    load_verifier,
    open_note,
    origin_of,
    sign,
    verifier_key,
)
from gateway.cli import main
from tests.audit.test_audit_checkpoints import TENANT, Signed, signed  # noqa: F401 - the fixture
from tests.engines import Server, binary, free_ports

__all__ = ["signed"]
WITNESS = "example.com/litewitness"


def ssh_public(path: Path) -> Ed25519PublicKey:
    """The Ed25519 key of an OpenSSH public key line (`ssh-ed25519 <base64 wire form> comment`)."""
    wire = base64.b64decode(path.read_text().split()[1])
    name_length = int.from_bytes(wire[:4], "big")
    return Ed25519PublicKey.from_public_bytes(wire[4 + name_length + 4 :])


class LiteWitness:
    """litewitness on a free loopback port, its key in a dedicated ssh-agent, its database told of
    the gateway's logs (one origin per chain) and their key (the gateway's, named as each origin)."""

    def __init__(self, origins: list[str], log_key: Ed25519PublicKey) -> None:
        # The binaries first: a missing one skips the test, and must not leave an ssh-agent behind.
        ctl, server = binary("witnessctl", "GATEWAY_TEST_WITNESSCTL_BIN"), binary("litewitness", "GATEWAY_TEST_LITEWITNESS_BIN")
        self.directory = Path(tempfile.mkdtemp(prefix="gw-litewitness-"))
        self.db, sock, key = self.directory / "litewitness.db", self.directory / "agent.sock", self.directory / "witness"
        self.agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "witness", "-f", str(key)], check=True)
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        subprocess.run(["ssh-add", "-q", str(key)], env={**os.environ, "SSH_AUTH_SOCK": str(sock)}, check=True)
        fingerprint = subprocess.run(
            ["ssh-keygen", "-l", "-E", "sha256", "-f", f"{key}.pub"], capture_output=True, text=True, check=True
        ).stdout.split()[1]
        self.verifier = Verifier(WITNESS, ssh_public(Path(f"{key}.pub")), COSIGNATURE_V1)
        for origin in origins:
            subprocess.run([ctl, "add-log", "-db", str(self.db), "-origin", origin], check=True, capture_output=True)
            vkey = verifier_key(origin, log_key)
            subprocess.run(
                [ctl, "add-key", "-db", str(self.db), "-origin", origin, "-key", vkey], check=True, capture_output=True
            )
        (port,) = free_ports(1)
        command = [server, "-db", str(self.db), "-name", WITNESS]
        command += ["-key", fingerprint, "-ssh-agent", str(sock), "-listen", f"127.0.0.1:{port}"]
        self.server = Server(command, f"http://127.0.0.1:{port}", "/", directory=self.directory, start_s=30)
        self.url = self.server.url

    def log(self) -> str:
        return self.server.log_tail()

    def stop(self) -> None:
        self.server.stop()
        self.agent.terminate()
        self.agent.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture
def litewitness(signed: Signed) -> Iterator[LiteWitness]:
    for tool in ("ssh-agent", "ssh-keygen", "ssh-add"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (litewitness takes its key from an ssh-agent)")
    public = load_signer(signed.keys["private"]).private.public_key()
    told = CliRunner().invoke(main, ["audit", "log-key", "--tenant", TENANT, "--public-key", str(signed.keys["public"])])
    assert told.exit_code == 0, told.output
    assert json.loads(told.output) == {"origin": origin_of(TENANT), "vkey": verifier_key(origin_of(TENANT), public)}
    witness = LiteWitness([origin_of(TENANT)], public)
    try:
        yield witness
    finally:
        witness.stop()


def test_litewitness_cosigns_the_gateways_checkpoints(signed: Signed, litewitness: LiteWitness, tmp_path: Path) -> None:
    checkpointer = Checkpointer(
        signed.gateway.store,
        load_signer(signed.keys["private"]),
        CheckpointLog(signed.checkpoints),
        rows=100_000,
        seconds=86_400,
        witness=WitnessClient(litewitness.url),
    )
    signed.write(3)
    first = [c for c in checkpointer.checkpoint(every_chain=True) if c.chain == TENANT]
    signed.write(4)
    second = [c for c in checkpointer.checkpoint(every_chain=True) if c.chain == TENANT]
    assert first and second and second[0].size > first[0].size
    # Both cosigned: the second against a consistency proof from the first (litewitness checks it).
    assert checkpointer.state(TENANT)["cosigned_size"] == second[0].size, litewitness.log()
    assert not checkpointer.witness_refused
    cosigned = CheckpointLog(checkpointer.cosigned.path).notes()
    assert [int(note.split("\n")[1]) for _, note in cosigned] == [first[0].size, second[0].size]
    for _, note in cosigned:
        open_note(note, litewitness.verifier)  # litewitness's cosignature/v1 over the gateway's checkpoint
        open_note(note, load_verifier(signed.keys["public"]))
    # An auditor holds litewitness's notes: `audit verify --known` accepts them...
    known = tmp_path / "known"
    shutil.copy(checkpointer.cosigned.path, known)
    args = ["audit", "verify", "--database-url", signed.gateway.settings.effective_database_url, "--tenant", TENANT]
    args += ["--checkpoints", str(signed.checkpoints), "--public-key", str(signed.keys["public"]), "--known", str(known)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0 and "OK:" in result.stderr, result.output
    # An evidence pack carries litewitness's cosignatures, and verify-pack checks them with its key.
    from tests.audit.test_evidence_pack import export, verify_pack

    assert export(signed, tmp_path / "pack", "2020-01-01T00:00:00Z", datetime.now(timezone.utc).isoformat())[0] == 0
    vkey = tmp_path / "litewitness.vkey"
    vkey.write_text(verifier_key(WITNESS, litewitness.verifier.public, COSIGNATURE_V1) + "\n")
    code, report, verdict = verify_pack(tmp_path / "pack", signed.keys["public"], more=("--witness-key", str(vkey)))
    assert code == 0 and report["checkpoints"]["witnesses"][WITNESS]["cosigned"] >= 1, report
    assert f"cosigned by {WITNESS} (key given)" in verdict
    # ... and verify fails a checkpoint file that no longer holds the notes the auditor has.
    signed.checkpoints.write_text("")
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1 and "lacks a checkpoint you hold" in result.output


def test_litewitness_refuses_a_fork(signed: Signed, litewitness: LiteWitness) -> None:
    """A checkpoint that does not extend the one litewitness cosigned (a rewritten tree) is refused
    with 422, and the signer says so."""
    client = WitnessClient(litewitness.url)
    signer = load_signer(signed.keys["private"])
    origin_named = Signer(origin_of(TENANT), signer.private)
    leaves = [leaf_hash(f"{i:064x}") for i in range(6)]
    tree = Range()
    tree.extend(leaves[:3])
    root3 = tree.root()
    note3 = sign(f"{origin_of(TENANT)}\n3\n{base64.b64encode(root3).decode()}\n", signer, origin_named)
    assert client.add(0, [], note3).status == 200, litewitness.log()
    forked = leaves[:2] + [leaf_hash("f" * 64)] + leaves[3:]
    other = Range()
    other.extend(forked)
    note6 = sign(f"{origin_of(TENANT)}\n6\n{base64.b64encode(other.root()).decode()}\n", signer, origin_named)
    proof = consistency_proof(3, 6, lambda start, end: forked[start:end])
    answer = client.add(3, proof, note6)
    assert answer.status == 422, (answer, litewitness.log())
    # the honest extension is cosigned
    honest = Range()
    honest.extend(leaves)
    note6 = sign(f"{origin_of(TENANT)}\n6\n{base64.b64encode(honest.root()).decode()}\n", signer, origin_named)
    answer = client.add(3, consistency_proof(3, 6, lambda start, end: leaves[start:end]), note6)
    assert answer.status == 200 and answer.text.startswith(f"\u2014 {WITNESS} "), (answer, litewitness.log())


def test_the_projects_witness_cosigns_a_plain_c2sp_log(tmp_path: Path) -> None:
    """A C2SP log that is not a gateway (no extension lines, its key named as its origin): the
    project's witness holds it to its consistency proofs and cosigns in cosignature/v1."""
    origin = "example.com/log"
    log = Signer(origin, Ed25519PrivateKey.generate())
    witness_key = Signer("example.com/witness", Ed25519PrivateKey.generate())
    witness = Witness(tmp_path / "state", log.verifier, witness_key)
    leaves = [leaf_hash(f"{i:064x}") for i in range(5)]
    tree = Range()
    tree.extend(leaves[:2])
    note2 = sign(f"{origin}\n2\n{base64.b64encode(tree.root()).decode()}\n", log)
    assert witness.add_checkpoint(f"old 0\n\n{note2}").status == 200
    tree.extend(leaves[2:])
    note5 = sign(f"{origin}\n5\n{base64.b64encode(tree.root()).decode()}\n", log)
    proof = consistency_proof(2, 5, lambda start, end: leaves[start:end])
    body = "old 2\n" + "".join(base64.b64encode(h).decode() + "\n" for h in proof) + "\n" + note5
    answer = witness.add_checkpoint(body)
    assert answer.status == 200, answer
    cosigned = note5 + answer.text
    cosigner = Verifier(witness_key.name, witness_key.private.public_key(), COSIGNATURE_V1)
    assert open_note(cosigned, cosigner) == note5[: note5.rfind("\n\n") + 1]
    # the line is cosignature/v1: key id of algorithm 0x04, then an 8-byte time, then 64 bytes
    raw = base64.b64decode(answer.text.split()[-1])
    assert raw[:4] == cosigner.id and len(raw) == 4 + 8 + 64 and abs(int.from_bytes(raw[4:12], "big") - time.time()) < 60
    # a fork of that log is refused
    forked = Range()
    forked.extend(leaves[:1] + [leaf_hash("e" * 64)] + leaves[2:] + [leaf_hash("d" * 64)])
    note6 = sign(f"{origin}\n6\n{base64.b64encode(forked.root()).decode()}\n", log)
    proof = consistency_proof(5, 6, lambda start, end: (leaves + [leaf_hash("d" * 64)])[start:end])
    body = "old 5\n" + "".join(base64.b64encode(h).decode() + "\n" for h in proof) + "\n" + note6
    assert witness.add_checkpoint(body).status == 422
