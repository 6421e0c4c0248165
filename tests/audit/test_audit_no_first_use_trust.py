"""No trust on first use in the audit trail (issue 29): the checkpointer signs a chain from its start
only when it wrote the chain's first row, with every row sealed; a chain found without a checkpoint
of it is refused (log, `/readyz`, `gateway audit checkpoint` exits 1) unless an operator adopts it;
the offline verify fails on a checkpoint file that is emptied, truncated, replaced, or silent about
rows dated before its newest checkpoint."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from sqlalchemy import insert, update

from audit.chain import GENESIS, audit_trace, rederive, row_hash
from audit.integrity import Adoption, Checkpointer, CheckpointLog, generate, load_signer, load_verifier, read_checkpoints
from core import store as db
from gateway.cli import main
from tests.audit.test_audit_checkpoints import TENANT, Signed, chain_rows, rehash, signed  # noqa: F401 - the fixture
from tests.conftest import open_gateway

__all__ = ["signed"]


def forge_a_new_chain(signed: Signed, tenant: str, rows: int = 3) -> None:
    """What an insider with write access did: open a chain for a tenant that made no call yet, with
    valid hashes and links, dated three days back, and no seal (the key is not theirs)."""
    prev = GENESIS
    with db.writer(signed.gateway.store).begin() as conn:
        for seq in range(1, rows + 1):
            row: dict[str, Any] = {
                "trace_id": f"tr_forged_{seq}",
                "created_at": datetime.now(timezone.utc) - timedelta(days=3),
                "tenant": tenant,
                "actor": "user:ceo",
                "endpoint": "retrieve",
                "status_code": 200,
                "decision": "allow",
                "policy_engine": "embedded",
                "policy_revision": "r1",
                "error_code": None,
                "lineage": {"version": 2, "request": {"task": {"type": "account_followup"}}, "packed": []},
                "chain": tenant,
                "seq": seq,
                "prev_hash": prev,
                "task_type": "account_followup",
                "about": None,
            }
            row["row_hash"] = row_hash(row)
            conn.execute(insert(audit_trace).values(**row))
            prev = row["row_hash"]
        rederive(conn, tenant)  # the derived tables too: a careful forger leaves nothing for verify but the signatures


def checkpoint_cli(signed: Signed, *extra: str) -> tuple[int, str]:
    env = {"GATEWAY_AUDIT_SIGNING_KEY": str(signed.keys["private"]), "GATEWAY_AUDIT_CHECKPOINTS": str(signed.checkpoints)}
    result = CliRunner(env=env).invoke(
        main, ["audit", "checkpoint", "--database-url", signed.gateway.settings.effective_database_url, *extra]
    )
    return result.exit_code, result.output


def test_a_chain_opened_by_forged_rows_is_never_signed(signed: Signed) -> None:
    forge_a_new_chain(signed, "newco")
    signed.write(1, tenant="newco")  # one real call: position 4, sealed, but the chain was not born here
    made = signed.checkpointer.checkpoint(every_chain=True)
    assert "newco" not in {c.chain for c in made} and "newco" in signed.checkpointer.refusing
    attested = read_checkpoints(signed.checkpoints, load_verifier(signed.keys["public"]))
    assert "newco" not in attested.by_chain  # nothing of it signed
    audit = signed.gateway.client.app.state.context.audit  # type: ignore[attr-defined]
    live = audit.verify("newco").wire()  # the service holds the seal key: the first rows carry none
    assert live["ok"] is False and live["first_broken"]["seq"] == 1 and "no valid seal" in live["first_broken"]["reason"]
    code, output = signed.offline(tenant="newco")  # the auditor has no seal key: the dates give it away
    assert code == 1 and "rows date from before the file's newest checkpoint" in output, output


def test_a_chain_born_here_is_signed_from_its_genesis(signed: Signed) -> None:
    signed.write(2, tenant="freshco")
    made = signed.checkpointer.checkpoint()
    assert [(c.chain, c.size, c.adopted) for c in made if c.chain == "freshco"] == [("freshco", 2, None)]
    code, output = signed.offline(tenant="freshco")
    assert code == 0 and "OK: 2 rows match signed checkpoints" in output, output


def test_a_checkpointer_without_its_file_re_signs_nothing(signed: Signed) -> None:
    """The attack of issue 29: rewrite a row, re-hash forward, strip every seal, delete the file,
    run `gateway audit checkpoint`."""
    known = signed.checkpoints.with_name("held-by-the-auditor")
    shutil.copy(signed.checkpoints, known)
    with db.writer(signed.gateway.store).begin() as conn:
        conn.execute(update(audit_trace).where(audit_trace.c.pk == chain_rows(conn)[2]["pk"]).values(decision="deny"))
        rehash(conn)
        conn.execute(update(audit_trace).where(audit_trace.c.chain == TENANT).values(seal=None))
    signed.checkpoints.unlink()
    code, output = checkpoint_cli(signed)
    assert code == 1 and "REFUSED" in output and '"acme": "found without a checkpoint of it"' in output, output
    assert not signed.checkpoints.exists()  # nothing re-signed: not even a file
    code, output = signed.offline(tenant=TENANT)
    assert code == 1 and "cannot be read" in output, output
    signed.checkpoints.write_text("")
    code, output = signed.offline(tenant=TENANT)
    assert code == 1 and "attests nothing" in output, output  # the file holds no checkpoint of anyone
    code, output = signed.offline(tenant=TENANT, known=known)
    assert code == 1 and "lacks a checkpoint you hold" in output, output


def test_adopting_a_chain_is_an_operators_decision_said_in_the_note(signed: Signed) -> None:
    forge_a_new_chain(signed, "legacy")
    code, output = checkpoint_cli(signed)
    assert code == 1 and "legacy" in output
    code, output = checkpoint_cli(signed, "--adopt")
    assert code == 0 and '"what": "adopted at row 3 on ' in output, output
    (note,) = [c for c in read_checkpoints(signed.checkpoints, load_verifier(signed.keys["public"])).by_chain["legacy"]]
    assert note.adopted == Adoption(3, note.time) and note.size == 3 and f"adopted 3 {note.time}" in note.text()
    code, output = signed.offline(tenant="legacy")
    assert code == 0 and "chain legacy was adopted at row 3 on " + note.time in output, output


def test_an_adoption_stays_in_every_verdict(signed: Signed, tmp_path: Path) -> None:
    """Issue 43: after a chain is adopted, every later checkpoint carries the mark, and `audit
    verify`, the audit pages, the compliance overview and `verify-pack` all name it; a checkpoint
    file signed again without the mark fails against the notes an auditor (or a witness) holds."""
    from audit.integrity import sign
    from tests.audit.test_evidence_pack import export, verify_pack
    from tests.gateway.http.test_audit_page import signed_in

    forge_a_new_chain(signed, "legacy")
    assert checkpoint_cli(signed, "--adopt")[0] == 0
    adopted = read_checkpoints(signed.checkpoints, load_verifier(signed.keys["public"])).by_chain["legacy"][0].adopted
    assert adopted is not None and adopted.size == 3
    mark = f"adopted at row 3 on {adopted.time}; rows before it are not covered by earlier checkpoints"
    # the service meets the adopted chain: it goes on from the file, and its later checkpoints carry the mark
    signed.write(2, tenant="legacy")
    made = [c for c in signed.checkpointer.checkpoint(every_chain=True) if c.chain == "legacy"]
    assert [(c.size, c.adopted) for c in made] == [(5, adopted)] and f"adopted 3 {adopted.time}" in made[0].text()
    code, output = signed.offline(tenant="legacy")
    assert code == 0 and f"chain legacy was {mark}" in output, output
    # the pages and the overview of the tenant's auditor
    gateway = signed_in(signed.gateway, "legacy")
    page = gateway.client.get("/audit/verify")
    assert page.status_code == 200 and 'id="adopted"' in page.text and mark in page.text, page.text
    overview = gateway.client.get("/audit/overview")
    assert overview.status_code == 200 and 'id="chain-adopted"' in overview.text and mark in overview.text
    api = gateway.client.get("/v1/audit/verify", headers=gateway.auth(gateway.key("aud", tenant="legacy", roles=("auditor",))))
    assert api.json()["chains"]["legacy"]["adopted"]["what"] == mark, api.text
    # an evidence pack of the chain names it
    assert (
        export(signed, tmp_path / "pack", "2020-01-01T00:00:00Z", datetime.now(timezone.utc).isoformat(), tenant="legacy")[0] == 0
    )
    code, report, verdict = verify_pack(tmp_path / "pack", signed.keys["public"])
    assert code == 0 and report["adopted"]["what"] == mark and f"the chain was {mark}" in verdict, report["problems"]
    # whoever adopted holds the key: the file signed again without the mark verifies alone...
    held = tmp_path / "held.checkpoints"
    shutil.copy(signed.checkpoints, held)
    signer = load_signer(signed.keys["private"])
    clean = [
        sign("".join(line + "\n" for line in note.partition("\n\n")[0].split("\n") if not line.startswith("adopted")), signer)
        for _, note in CheckpointLog(signed.checkpoints).notes()
    ]
    signed.checkpoints.write_text("".join(note + "\n" for note in clean))
    code, output = signed.offline(tenant="legacy")
    assert code == 0 and "adopted" not in output.rsplit("OK:", 1)[1], output
    # ... but not against the notes the auditor kept
    code, output = signed.offline(tenant="legacy", known=held)
    assert code == 1 and f"a checkpoint you hold says the chain was {mark}" in output, output


def test_offline_verify_is_monotonic(signed: Signed) -> None:
    earlier = signed.checkpoints.with_name("earlier")
    shutil.copy(signed.checkpoints, earlier)
    signed.write(5)
    signed.checkpointer.checkpoint()
    known = signed.checkpoints.with_name("known")
    shutil.copy(signed.checkpoints, known)  # what the auditor saved at the last visit
    assert signed.offline(tenant=TENANT, known=known)[0] == 0
    # replaced with the earlier file, the last five rows deleted: consistent on its own...
    shutil.copy(earlier, signed.checkpoints)
    with db.writer(signed.gateway.store).begin() as conn:
        from tests.audit.test_audit_checkpoints import delete_rows

        delete_rows(conn, [r["pk"] for r in chain_rows(conn)[-5:]])
    assert signed.offline(tenant=TENANT)[0] == 0
    # ... but not with what the auditor holds
    code, output = signed.offline(tenant=TENANT, known=known)
    assert code == 1 and "lacks a checkpoint you hold (size 17" in output, output
    # emptied: fails without --known too
    signed.checkpoints.write_text("")
    code, output = signed.offline(tenant=TENANT)
    assert code == 1 and "attests nothing" in output, output


def test_a_service_that_starts_without_its_checkpoints_says_so(sqlite_url: str, tmp_path: Path) -> None:
    from tests.gateway.fixtures import SALES_TASK

    keys = generate(tmp_path / "keys")
    first, lost = tmp_path / "pvc" / "audit.checkpoints", tmp_path / "emptydir" / "audit.checkpoints"
    with open_gateway(sqlite_url, tmp_path, audit_signing_key=keys["private"], audit_checkpoints=first) as gateway:
        agent = gateway.key("alice", groups=("sales",), clearance="confidential")
        assert gateway.retrieve(agent, {"task": SALES_TASK, "query": "renewal"}).status_code == 200
        assert gateway.client.get("/readyz").json()["checks"]["audit_checkpoints"] == "ok"
    # a new pod whose checkpoint file was on an emptyDir: it finds chains it never saw written
    with open_gateway(sqlite_url, tmp_path, audit_signing_key=keys["private"], audit_checkpoints=lost) as gateway:
        checkpointer = gateway.client.app.state.context.audit.checkpointer  # type: ignore[attr-defined]
        assert checkpointer.caught_up.wait(30)
        ready = gateway.client.get("/readyz")
        assert ready.status_code == 503 and "refusing to sign" in ready.json()["checks"]["audit_checkpoints"], ready.text
        assert TENANT not in ready.text  # /readyz answers anyone: it names no tenant
        assert TENANT in checkpointer.refusing
    # back on its own volume: it recovers what it signed and is ready
    with open_gateway(sqlite_url, tmp_path, audit_signing_key=keys["private"], audit_checkpoints=first) as gateway:
        checkpointer = gateway.client.app.state.context.audit.checkpointer  # type: ignore[attr-defined]
        assert checkpointer.caught_up.wait(30)
        assert gateway.client.get("/readyz").status_code == 200 and not checkpointer.refusing


def test_a_chain_published_by_another_process_is_recovered_from_the_file(signed: Signed) -> None:
    """Two processes on one checkpoint file: the second meets the first one's chain, reads the file
    again and continues from what was published, instead of refusing or re-signing it."""
    other = Checkpointer(
        signed.gateway.store, load_signer(signed.keys["private"]), CheckpointLog(signed.checkpoints), rows=100_000, seconds=86_400
    )
    signed.write(3, tenant="globex")
    signed.checkpointer.checkpoint()  # the first process signs globex up to 6
    signed.write(2, tenant="globex")
    made = other.checkpoint(every_chain=True)
    assert [(c.chain, c.size, c.adopted) for c in made if c.chain == "globex"] == [("globex", 8, None)]
    assert not other.refusing


def resign_with_mark(checkpoints: Path, signed: Signed, mark: str) -> None:
    """What the key holder can do: sign every note of a checkpoint file again with `mark` in place of
    its adoption line."""
    from audit.integrity import sign

    signer = load_signer(signed.keys["private"])
    notes = []
    for _, note in CheckpointLog(checkpoints).notes():
        body = [mark if line.startswith("adopted ") else line for line in note.partition("\n\n")[0].split("\n")]
        notes.append(sign("".join(line + "\n" for line in body), signer))
    checkpoints.write_text("".join(note + "\n" for note in notes))


def test_an_altered_adoption_mark_fails_both_verifiers(signed: Signed, tmp_path: Path) -> None:
    """Issue 55: the key holder re-signed the mark back-dated two years and past the chain's rows
    (`adopted 140 2025-01-01`), or to `adopted 1 ~`, and both verifiers passed with `--known`. A
    mark past the rows of the checkpoint carrying it, or after that checkpoint's own time, fails on
    its own; any other change fails against a held note, which must be carried exactly."""
    from tests.audit.test_evidence_pack import export, verify_pack

    forge_a_new_chain(signed, "legacy")
    assert checkpoint_cli(signed, "--adopt")[0] == 0
    held = tmp_path / "held.checkpoints"
    shutil.copy(signed.checkpoints, held)
    adopted = read_checkpoints(held, load_verifier(signed.keys["public"])).by_chain["legacy"][0].adopted
    assert adopted is not None
    assert (
        export(signed, tmp_path / "pack", "2020-01-01T00:00:00Z", datetime.now(timezone.utc).isoformat(), tenant="legacy")[0] == 0
    )
    pristine = (tmp_path / "pack" / "checkpoints.txt").read_text()

    for mark, alone in (
        ("adopted 140 2025-01-01", "past the 3 rows it signs"),
        ("adopted 1 ~", "is not an RFC 3339 instant"),
        ("adopted 3 2999-01-01T00:00:00Z", "is after the checkpoint's own"),
        ("adopted 2 2025-01-01T00:00:00Z", None),  # possible on its own: only a held note tells
    ):
        shutil.copy(held, signed.checkpoints)
        resign_with_mark(signed.checkpoints, signed, mark)
        code, output = signed.offline(tenant="legacy")
        assert (code == 1 and alone in output) if alone else code == 0, (mark, output)
        code, output = signed.offline(tenant="legacy", known=held)
        assert code == 1 and f"a checkpoint you hold says the chain was {adopted.text()}" in output, (mark, output)
        # the same in a pack: its checkpoints re-signed with the mark
        (tmp_path / "pack" / "checkpoints.txt").write_text(pristine)
        resign_with_mark(tmp_path / "pack" / "checkpoints.txt", signed, mark)
        from tests.audit.test_evidence_pack import redigest

        redigest(tmp_path / "pack")
        code, report, _ = verify_pack(tmp_path / "pack", signed.keys["public"])
        said = " ".join(p["what"] for p in report["problems"])
        assert (code == 1 and alone in said) if alone else code == 0, (mark, report["problems"])
        code, report, _ = verify_pack(tmp_path / "pack", signed.keys["public"], more=("--known", str(held)))
        said = " ".join(p["what"] for p in report["problems"])
        assert code == 1 and f"a checkpoint you hold says the chain was {adopted.text()}" in said, (mark, report["problems"])
    shutil.copy(held, signed.checkpoints)
    assert signed.offline(tenant="legacy", known=held)[0] == 0  # the file as signed holds
