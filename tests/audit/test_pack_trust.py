"""What an evidence pack proves, and what it trusted (issue 43).

The adversarial review rewrote a pack's history and left out the checkpoints that covered the
rewritten rows: edited or deleted rows re-hashed forward, figures recomputed, the manifest
adjusted, `signing: none`, every row as hash version 1. Each variant verified OK with the gateway's
real key. Now rows under no signed checkpoint fail unless the auditor says `--allow-uncovered`,
and a checkpoint the auditor holds (`--known`) fails every variant even then. Cosignatures are
checked with the witness's key or said to be unchecked; the manifest's claims are checked."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from audit.chain import StoredTrace, row_hash, row_hash_v1
from audit.evidence import in_period, policy_revisions, sha256_file
from audit.integrity import COSIGNATURE_V1, CheckpointLog, cosignature, generate, load_signer, verifier_key, witness_signer
from audit.review import figures_of
from core.audit_facts import tally_rows
from core.instants import parse_rfc3339
from tests.audit.test_audit_checkpoints import Signed, signed  # noqa: F401 - the fixture
from tests.audit.test_evidence_pack import OTHER, at, export, lines, middle, put_lines, verify_pack  # noqa: F401 - the fixture

__all__ = ["middle", "signed"]

ROW_FILES = ("rows_before.jsonl", "rows.jsonl", "rows_after.jsonl")


def redigest_all(pack: Path) -> None:
    """The manifest's digests of every file now in the pack (it is not signed)."""
    manifest = json.loads((pack / "manifest.json").read_text())
    manifest["files"] = {
        str(p.relative_to(pack)): sha256_file(p) for p in sorted(pack.rglob("*")) if p.is_file() and p.name != "manifest.json"
    }
    (pack / "manifest.json").write_text(json.dumps(manifest))


def rewrite(
    pack: Path,
    change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
    hasher: Callable[[dict[str, Any]], str] = row_hash,
    keep_notes: Callable[[int], bool] = lambda size: False,
    manifest_edit: Callable[[dict[str, Any]], None] = lambda m: None,
) -> None:
    """What someone with the pack's files and the algorithm does: change the rows, number, link and
    hash them again from the first, recompute the figures and revisions, drop the checkpoint notes
    that would show it (those `keep_notes` does not keep), fix the manifest's counts and digests."""
    parts = [lines(pack, name) for name in ROW_FILES]
    rows = change([r for part in parts for r in part])
    first = rows[0]["seq"]
    for i, row in enumerate(rows):
        row["seq"] = first + i
        if i:
            row["prev_hash"] = rows[i - 1]["row_hash"]
        row["row_hash"] = hasher({**row, "created_at": datetime.fromisoformat(row["created_at"])})
    manifest = json.loads((pack / "manifest.json").read_text())
    since, until = (parse_rfc3339(manifest["period"][k]) for k in ("since", "until"))
    dated = [in_period(datetime.fromisoformat(r["created_at"]), since, until) for r in rows]
    start, end = dated.index(True), len(dated) - dated[::-1].index(True)
    put_lines(pack, "rows_before.jsonl", rows[:start])
    put_lines(pack, "rows.jsonl", rows[start:end])
    put_lines(pack, "rows_after.jsonl", rows[end:])
    inside = [{**r, "created_at": datetime.fromisoformat(r["created_at"])} for r in rows[start:end]]
    figures = figures_of(tally_rows(inside), since, until).wire()
    (pack / "figures.json").write_text(json.dumps(figures))
    (pack / "policy_revisions.json").write_text(json.dumps(policy_revisions([StoredTrace.of(r) for r in inside]), default=str))
    kept = [note for _, note in CheckpointLog(pack / "checkpoints.txt").notes() if keep_notes(int(note.split("\n")[1]))]
    (pack / "checkpoints.txt").write_text("".join(note + "\n" for note in kept))
    manifest["counts"].update(rows_in_period=len(inside), rows=len(inside), checkpoints=len(kept), not_tied=len(inside))
    manifest["positions"].update(first=rows[0]["seq"], last=rows[-1]["seq"])
    manifest["tied_to"] = None
    manifest_edit(manifest)
    (pack / "manifest.json").write_text(json.dumps(manifest))
    redigest_all(pack)


def deny_row_7(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    row = next(r for r in rows if r["seq"] == 7)
    row["decision"], row["status_code"] = "deny", 403
    return rows


def drop_row_7(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["seq"] != 7]


def unsigned(manifest: dict[str, Any]) -> None:
    manifest["signing"] = "none"


def still_tied(manifest: dict[str, Any]) -> None:
    manifest["tied_to"] = {"size": 12, "time": "2026-01-01T00:00:00Z"}


VARIANTS: dict[str, dict[str, Any]] = {
    "a row edited, re-hashed forward, the notes dropped": {"change": deny_row_7},
    "a row deleted, renumbered and re-linked, the notes dropped": {"change": drop_row_7},
    "edited and the manifest says signing: none": {"change": deny_row_7, "manifest_edit": unsigned},
    "every row as hash version 1": {"change": deny_row_7, "hasher": row_hash_v1},
    "the notes before the edit kept, those after it dropped": {"change": deny_row_7, "keep_notes": lambda size: size < 7},
    "edited, the manifest still naming the checkpoint": {"change": deny_row_7, "manifest_edit": still_tied},
}


@pytest.fixture
def checkpointed(signed: Signed, tmp_path: Path) -> tuple[Signed, Path, Path]:
    """Tenant initech: 4 rows three hours ago (checkpointed), 5 two hours ago, 3 one hour ago (then
    checkpointed); the pack of the period from 2.5 to 1.5 hours ago (rows 5 to 9), and a copy of the
    checkpoint file as the auditor kept it."""
    signed.write(4, tenant=OTHER, age=timedelta(hours=3))
    signed.checkpointer.checkpoint(every_chain=True)
    for n, hours in ((5, 2), (3, 1)):
        signed.write(n, tenant=OTHER, age=timedelta(hours=hours))
    signed.checkpointer.checkpoint(every_chain=True)
    pack = tmp_path / "pack"
    code, output = export(signed, pack, at(-timedelta(hours=2.5)), at(-timedelta(hours=1.5)), tenant=OTHER)
    assert code == 0, output
    held = tmp_path / "held.checkpoints"
    shutil.copy(signed.checkpoints, held)
    return signed, pack, held


def test_an_honest_pack_holds_the_auditors_checkpoints(checkpointed: tuple[Signed, Path, Path]) -> None:
    signed, pack, held = checkpointed
    code, report, verdict = verify_pack(pack, signed.keys["public"], more=("--known", str(held)))
    assert code == 0, report["problems"]
    assert report["known"]["held"] == 2 and report["not_tied"] == 0  # sizes 4 and 12 of initech; acme's are other chains
    assert "2 of your checkpoints held" in verdict and "NOT" not in verdict


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rewritten_history_fails_without_and_with_known(
    checkpointed: tuple[Signed, Path, Path], tmp_path: Path, variant: str
) -> None:
    signed, pack, held = checkpointed
    altered = tmp_path / "altered"
    shutil.copytree(pack, altered)
    rewrite(altered, **VARIANTS[variant])
    # Alone, with the real key: the rewritten rows are under no signed checkpoint, and that fails.
    code, report, verdict = verify_pack(altered, signed.keys["public"])
    assert code == 1 and verdict.startswith("FAILED: "), variant
    assert any("under no signed checkpoint" in p["what"] or "tied" in p["what"] for p in report["problems"]), report
    # With what the auditor holds, accepting uncovered rows does not save it.
    code, report, verdict = verify_pack(altered, signed.keys["public"], more=("--known", str(held), "--allow-uncovered"))
    assert code == 1, (variant, report)
    assert any(p["file"] == str(held) for p in report["problems"]), report["problems"]


def test_accepting_uncovered_rows_is_said_in_the_verdict(checkpointed: tuple[Signed, Path, Path], tmp_path: Path) -> None:
    signed, pack, _ = checkpointed
    rewrite(pack, deny_row_7)
    code, report, verdict = verify_pack(pack, signed.keys["public"], more=("--allow-uncovered",))
    assert code == 0 and report["allow_uncovered"], report["problems"]
    assert "none is under a signed checkpoint" in verdict and "5 rows are NOT covered by a signed checkpoint" in verdict


def test_a_known_checkpoint_outside_the_pack_fails_until_the_export_reaches_it(
    checkpointed: tuple[Signed, Path, Path], tmp_path: Path
) -> None:
    signed, _, held = checkpointed
    # A witness's newer note: the chain grew past the pack's rows and was checkpointed at 15.
    signed.write(3, tenant=OTHER, age=timedelta(minutes=30))
    signed.checkpointer.checkpoint(every_chain=True)
    newer = tmp_path / "newer.checkpoints"
    newest = [note for _, note in CheckpointLog(signed.checkpoints).notes() if note.split("\n")[1] == "15"]
    newer.write_text(newest[0])
    pack = tmp_path / "pack2"
    assert export(signed, pack, at(-timedelta(hours=2.5)), at(-timedelta(hours=1.5)), tenant=OTHER)[0] == 0
    code, report, _ = verify_pack(pack, signed.keys["public"], more=("--known", str(newer)))
    assert code == 1 and "lies outside the pack's rows (4 to 12)" in report["first_problem"]["what"], report["problems"]
    reaching = tmp_path / "pack3"
    args = ("--known", str(newer))
    code, output = export_with(signed, reaching, args)
    assert code == 0, output
    code, report, verdict = verify_pack(reaching, signed.keys["public"], more=("--known", str(newer), "--known", str(held)))
    assert code == 0 and report["known"]["held"] == 3, report["problems"]
    assert [r["seq"] for r in lines(reaching, "rows_after.jsonl")][-1] == 15


def export_with(signed: Signed, out: Path, extra: tuple[str, ...]) -> tuple[int, str]:
    from click.testing import CliRunner

    from gateway.cli import main

    env = {"GATEWAY_AUDIT_SIGNING_KEY": str(signed.keys["private"]), "GATEWAY_AUDIT_CHECKPOINTS": str(signed.checkpoints)}
    args = ["audit", "export", "--database-url", signed.gateway.settings.effective_database_url, "--tenant", OTHER]
    args += ["--since", at(-timedelta(hours=2.5)), "--until", at(-timedelta(hours=1.5)), "--out", str(out), *extra]
    result = CliRunner(env=env).invoke(main, args)
    return result.exit_code, result.output


def test_notes_pasted_one_after_another_are_read(checkpointed: tuple[Signed, Path, Path], tmp_path: Path) -> None:
    """Witness notes concatenated into one file (no blank line between them) parse as notes."""
    signed, pack, _ = checkpointed
    notes = [note for _, note in CheckpointLog(signed.checkpoints).notes()]
    pasted = tmp_path / "pasted"
    pasted.write_text("".join(notes))
    assert "\n\n\n" not in pasted.read_text()
    assert [n for _, n in CheckpointLog(pasted).notes()] == notes
    code, report, _ = verify_pack(pack, signed.keys["public"], more=("--known", str(pasted)))
    assert code == 0 and report["known"]["held"] == 2, report["problems"]


def witness_files(tmp_path: Path) -> tuple[Any, Path]:
    keys = generate(tmp_path / "witness")
    signer = witness_signer(load_signer(keys["private"]))
    vkey = tmp_path / "witness.vkey"
    vkey.write_text(verifier_key(signer.name, signer.private.public_key(), COSIGNATURE_V1) + "\n")
    return signer, vkey


def cosign_pack(pack: Path, line: str | None = None, signer: Any = None) -> None:
    """Add a cosignature line to every note of the pack (a witness's, or `line` as given)."""
    notes = [note for _, note in CheckpointLog(pack / "checkpoints.txt").notes()]
    (pack / "checkpoints.txt").write_text("".join(n + (line or cosignature(n, signer)) + "\n" for n in notes))
    redigest_all(pack)


def test_cosignatures_are_checked_with_the_witness_key_or_said_unchecked(
    checkpointed: tuple[Signed, Path, Path], tmp_path: Path
) -> None:
    signed, pack, _ = checkpointed
    signer, vkey = witness_files(tmp_path)
    cosign_pack(pack, signer=signer)
    code, report, verdict = verify_pack(pack, signed.keys["public"], more=("--witness-key", str(vkey)))
    assert code == 0, report["problems"]
    assert report["checkpoints"]["witnesses"] == {"gateway.witness": {"cosigned": 2, "checked": True}}
    assert "cosigned by gateway.witness (key given) on 2 of 2 checkpoints" in verdict
    code, report, verdict = verify_pack(pack, signed.keys["public"])
    assert code == 0 and report["checkpoints"]["unchecked_signatures"]["names"] == ["gateway.witness"]
    assert "signatures by gateway.witness are NOT CHECKED" in verdict and "cosigned by" not in verdict


def test_a_forged_cosignature_fails_with_the_witness_key(checkpointed: tuple[Signed, Path, Path], tmp_path: Path) -> None:
    signed, pack, _ = checkpointed
    signer, vkey = witness_files(tmp_path)
    real = cosignature(CheckpointLog(pack / "checkpoints.txt").notes()[0][1], signer)
    name, blob = real.strip().split(" ")[1:]
    import base64

    raw = base64.b64decode(blob)
    forged = f"\u2014 {name} {base64.b64encode(raw[:4] + bytes(64)).decode()}\n"  # the witness's key id, a made-up signature
    cosign_pack(pack, line=forged)
    code, report, verdict = verify_pack(pack, signed.keys["public"], more=("--witness-key", str(vkey)))
    assert code == 1 and "the cosignature by gateway.witness does not verify" in report["first_problem"]["what"]
    assert report["checkpoints"]["witnesses"]["gateway.witness"]["cosigned"] == 0
    # without the key it is never listed as a cosignature
    code, report, verdict = verify_pack(pack, signed.keys["public"])
    assert code == 0 and "NOT CHECKED" in verdict and "cosigned by" not in verdict


def test_the_manifests_claims_are_checked_not_read(checkpointed: tuple[Signed, Path, Path]) -> None:
    signed, pack, _ = checkpointed
    manifest = json.loads((pack / "manifest.json").read_text())
    manifest["tied_to"] = {"size": 12, "time": "2020-01-01T00:00:00Z"}
    manifest["counts"]["checkpoints"] = 7
    manifest["positions"]["first"] = 1
    (pack / "manifest.json").write_text(json.dumps(manifest))
    code, report, _ = verify_pack(pack, signed.keys["public"])
    whats = [p["what"] for p in report["problems"] if p["file"] == "manifest.json"]
    assert code == 1 and len(whats) == 3, report["problems"]
    assert any("not among the pack's verified ones" in w for w in whats)
    assert any("counts 7 checkpoints" in w for w in whats) and any("positions 1 to 12" in w for w in whats)


def test_the_rewrite_alone_leaves_a_pack_that_verifies(checkpointed: tuple[Signed, Path, Path], tmp_path: Path) -> None:
    """The variants fail for what they hide, not for a slip of the rewrite: the same rewrite with no
    change and every note kept verifies."""
    signed, pack, held = checkpointed

    def keep_claims(manifest: dict[str, Any]) -> None:
        original = json.loads((tmp_path / "manifest.json").read_text())
        manifest["counts"], manifest["tied_to"] = original["counts"], original["tied_to"]

    shutil.copy(pack / "manifest.json", tmp_path / "manifest.json")
    rewrite(pack, lambda rows: rows, keep_notes=lambda size: True, manifest_edit=keep_claims)
    code, report, _ = verify_pack(pack, signed.keys["public"], more=("--known", str(held)))
    assert code == 0, report["problems"]
