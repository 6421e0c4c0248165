"""A witness of the audit checkpoints (issue 29): `gateway audit witness` (a real process on a
loopback port) cosigns each checkpoint only when a consistency proof shows it extends the last one
it cosigned; a fork is refused, the gateway's /readyz says so, and an auditor holding the
witness's checkpoint sees the rewritten file fail. A signer that lost its file recovers from it."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from sqlalchemy import update

from audit.chain import audit_trace
from audit.integrity import (
    COSIGNATURE_V1,
    WITNESS_NAME,
    Checkpointer,
    CheckpointLog,
    Verifier,
    WitnessClient,
    generate,
    load_signer,
    load_verifier,
    read_checkpoints,
    sign,
)
from core import store as db
from gateway.cli import main
from tests.audit.test_audit_checkpoints import TENANT, Signed, chain_rows, open_signed, rehash
from tests.conftest import free_port

ORIGIN = f"gateway.audit/{TENANT}"


class WitnessProcess:
    def __init__(self, directory: Path, log_key: Path) -> None:
        self.keys = generate(directory / "witness-keys")
        self.state = directory / "witness-state"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from gateway.cli import main; main()",
                "audit",
                "witness",
                "--state",
                str(self.state),
                "--log-key",
                str(log_key),
                "--key",
                str(self.keys["private"]),
                "--port",
                str(self.port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("the witness did not start")

    @property
    def verifier(self) -> Verifier:
        return Verifier(
            WITNESS_NAME, load_signer(self.keys["private"]).private.public_key(), COSIGNATURE_V1
        )  # C2SP cosignature/v1

    def latest(self) -> str | None:
        response = httpx.get(f"{self.url}/checkpoint", params={"origin": ORIGIN}, timeout=5)
        return response.text if response.status_code == 200 else None

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


@pytest.fixture
def witnessed(database_url: str, tmp_path: Path) -> Iterator[tuple[Signed, WitnessProcess]]:
    keys = generate(tmp_path / "keys")
    witness = WitnessProcess(tmp_path, keys["public"])
    checkpoints = tmp_path / "checkpoints" / "audit.checkpoints"
    try:
        with open_signed(database_url, tmp_path, keys, checkpoints, audit_witness_url=witness.url) as run:
            run.write(12)
            run.checkpointer.checkpoint(every_chain=True)
            yield run, witness
    finally:
        witness.stop()


def test_each_checkpoint_is_cosigned_when_it_extends_the_last(witnessed: tuple[Signed, WitnessProcess]) -> None:
    signed, witness = witnessed
    first = witness.latest()
    assert first is not None and "\n12\n" in first
    from audit.integrity import open_note

    open_note(first, witness.verifier)  # the witness's own signature
    open_note(first, load_verifier(signed.keys["public"]))  # over the gateway's checkpoint
    signed.write(5)
    signed.checkpointer.checkpoint()
    latest = witness.latest()
    assert latest is not None and "\n17\n" in latest and not signed.checkpointer.witness_refused
    assert signed.gateway.client.get("/readyz").json()["checks"]["audit_checkpoints"] == "ok"


def test_a_forked_checkpoint_is_refused_and_the_gateway_says_so(witnessed: tuple[Signed, WitnessProcess], tmp_path: Path) -> None:
    """An insider rewrites a row, re-hashes, deletes the checkpoint file and tricks an operator into
    `--adopt` on a host that does not ask the witness: the signer signed the fork. The witness
    remembers: it refuses the fork's next checkpoint, the signer says so, and an auditor holding
    the witness's checkpoint sees the adopted file fail."""
    signed, witness = witnessed
    cosigned = tmp_path / "cosigned-by-the-witness"
    cosigned.write_text(witness.latest() or "")
    with db.writer(signed.gateway.store).begin() as conn:
        conn.execute(update(audit_trace).where(audit_trace.c.pk == chain_rows(conn)[2]["pk"]).values(decision="deny"))
        rehash(conn)
        conn.execute(update(audit_trace).where(audit_trace.c.chain == TENANT).values(seal=None))
    signed.checkpoints.unlink()
    env = {"GATEWAY_AUDIT_SIGNING_KEY": str(signed.keys["private"]), "GATEWAY_AUDIT_CHECKPOINTS": str(signed.checkpoints)}
    result = CliRunner(env=env).invoke(
        main, ["audit", "checkpoint", "--adopt", "--database-url", signed.gateway.settings.effective_database_url]
    )
    assert result.exit_code == 0 and '"what": "adopted at row' in result.output, result.output  # the signer was fooled
    assert witness.latest() == cosigned.read_text()  # the witness was not asked, and holds the original
    assert signed.offline()[0] == 0  # the adopted file agrees with the rewritten store...
    code, output = signed.offline(known=cosigned)
    assert code == 1 and "lacks a checkpoint you hold" in output, output  # ... not with the witness
    # a signer that goes on from the adopted file, with the witness: its next checkpoint is a fork
    fooled = Checkpointer(
        signed.gateway.store,
        load_signer(signed.keys["private"]),
        CheckpointLog(signed.checkpoints),
        witness=WitnessClient(witness.url),
    )
    signed.write(3)
    made = fooled.checkpoint(every_chain=True)
    assert [c.size for c in made] == [15]
    assert "does not extend the cosigned one of 12 rows" in fooled.witness_refused[TENANT]
    assert "refused the checkpoints of 1 chain(s)" in fooled.readiness() and TENANT not in fooled.readiness()
    assert witness.latest() == cosigned.read_text()


def test_a_signer_without_its_file_goes_on_from_the_witness_and_never_signs_a_fork(
    witnessed: tuple[Signed, WitnessProcess], tmp_path: Path
) -> None:
    signed, witness = witnessed
    with db.writer(signed.gateway.store).begin() as conn:  # the same rewrite, with the witness asked this time
        conn.execute(update(audit_trace).where(audit_trace.c.pk == chain_rows(conn)[2]["pk"]).values(decision="deny"))
        rehash(conn)
    signed.write(1)  # the gateway appends after the rewritten head
    fresh = Checkpointer(
        signed.gateway.store,
        load_signer(signed.keys["private"]),
        CheckpointLog(tmp_path / "lost.checkpoints"),
        witness=WitnessClient(witness.url),
    )
    made = fresh.checkpoint(every_chain=True, adopt=True)
    # it went on from the witness's 12 rows: row 13 links to a head that is not the signed one
    assert [(c.size, c.refused[0] if c.refused else None) for c in made] == [(12, 13)]
    assert "\n12\n" in (witness.latest() or "")


def test_the_witness_refuses_what_it_must(witnessed: tuple[Signed, WitnessProcess], tmp_path: Path) -> None:
    signed, witness = witnessed
    note = (witness.latest() or "").rsplit("\u2014 " + WITNESS_NAME, 1)[0]
    client = WitnessClient(witness.url)
    assert client.add(0, [], note).status == 409 and client.add(0, [], note).text.strip() == "12"  # it has cosigned 12
    stranger = generate(tmp_path / "stranger")
    forged = sign(note.split("\n\n")[0] + "\n", load_signer(stranger["private"]))
    assert client.add(12, [], forged).status == 403  # not the gateway's key
    bogus = httpx.post(f"{witness.url}/add-checkpoint", content=b"not the protocol", timeout=5)
    assert bogus.status_code == 400
    flood = httpx.post(f"{witness.url}/add-checkpoint", content=(b"x" * 65536 for _ in range(64)), timeout=10)
    assert flood.status_code == 413  # 4 MiB offered, 64 KiB read


def test_a_signer_that_lost_its_file_recovers_from_the_witness(witnessed: tuple[Signed, WitnessProcess], tmp_path: Path) -> None:
    signed, witness = witnessed
    signed.write(3)
    fresh = Checkpointer(
        signed.gateway.store,
        load_signer(signed.keys["private"]),
        CheckpointLog(tmp_path / "new-pod.checkpoints"),
        witness=WitnessClient(witness.url),
    )
    made = fresh.checkpoint(every_chain=True)
    assert [(c.chain, c.size) for c in made] == [(TENANT, 15)] and not fresh.refusing
    assert fresh.readiness() == "ok" and "\n15\n" in (witness.latest() or "")
    attested = read_checkpoints(tmp_path / "new-pod.checkpoints", load_verifier(signed.keys["public"]))
    assert max(c.size for c in attested.by_chain[TENANT]) == 15


def test_a_signer_that_finds_the_store_shorter_than_the_witness_refuses_and_says_so(
    witnessed: tuple[Signed, WitnessProcess], tmp_path: Path
) -> None:
    """Issue 55: a signer that lost its file recovered from the witness's 12 rows while the store's
    last rows had been deleted, then waited silently for the chain to grow past 12, and /readyz
    stayed ok. It now refuses the chain, logs it and is not ready, naming the chain by its tag."""
    from tests.audit.test_audit_checkpoints import delete_rows

    signed, witness = witnessed
    with db.writer(signed.gateway.store).begin() as conn:
        delete_rows(conn, [r["pk"] for r in chain_rows(conn)[-3:]])  # the witness cosigned 12; 9 are left
    fresh = Checkpointer(
        signed.gateway.store,
        load_signer(signed.keys["private"]),
        CheckpointLog(tmp_path / "new-pod.checkpoints"),
        witness=WitnessClient(witness.url),
    )
    assert fresh.checkpoint(every_chain=True) == []
    assert "fewer than the 12 a signed checkpoint names" in fresh.refusing[TENANT]
    ready = fresh.readiness()
    assert ready != "ok" and "refusing to sign 1 audit chain(s)" in ready and TENANT not in ready
    signed.write(5)  # the chain grows past 12 again: the row after the gap is refused, never signed over
    made = fresh.checkpoint(every_chain=True)
    assert [(c.size, c.refused[0] if c.refused else None) for c in made] == [(12, 13)], made
    assert fresh.readiness() != "ok"
