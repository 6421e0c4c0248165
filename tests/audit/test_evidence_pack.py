"""The evidence pack (issue 33): `gateway audit export` writes one tenant's rows of a period with the
checkpoints, keys, policy revisions and figures that bear on it; `gateway audit verify-pack` checks
it with nothing but its files and the public key, and names the file and line of whatever was
altered. Real stores (SQLite, PostgreSQL), real Ed25519 signatures."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from audit.chain import row_hash
from audit.evidence import sha256_file
from audit.integrity import CheckpointLog, generate, load_signer, load_verifier, read_checkpoints, sign
from gateway.cli import main
from tests.audit.test_audit_checkpoints import TENANT, Signed, signed  # noqa: F401 - the fixture

__all__ = ["signed"]

OTHER = "initech"


def at(delta: timedelta) -> str:
    return (datetime.now(timezone.utc) + delta).isoformat()


def export(signed: Signed, out: Path, since: str, until: str, tenant: str = TENANT, sign_env: bool = True) -> tuple[int, str]:
    env = (
        {"GATEWAY_AUDIT_SIGNING_KEY": str(signed.keys["private"]), "GATEWAY_AUDIT_CHECKPOINTS": str(signed.checkpoints)}
        if sign_env
        else {}
    )
    args = ["audit", "export", "--database-url", signed.gateway.settings.effective_database_url]
    args += ["--since", since, "--until", until, "--out", str(out), "--tenant", tenant]
    result = CliRunner(env=env).invoke(main, args)
    return result.exit_code, result.output


def verify_pack(pack: Path, *keys: Path, more: tuple[str, ...] = ()) -> tuple[int, dict[str, Any], str]:
    args = ["audit", "verify-pack", str(pack), *[a for key in keys for a in ("--public-key", str(key))], *more]
    result = CliRunner().invoke(main, args)
    return result.exit_code, json.loads(result.stdout), result.stderr


def redigest(pack: Path) -> None:
    """What someone who edits a pack does next: the manifest's digests again (it is not signed)."""
    manifest = json.loads((pack / "manifest.json").read_text())
    manifest["files"] = {name: sha256_file(pack / name) for name in manifest["files"]}
    (pack / "manifest.json").write_text(json.dumps(manifest))


def lines(pack: Path, name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (pack / name).read_text().splitlines()]


def put_lines(pack: Path, name: str, rows: list[dict[str, Any]]) -> None:
    (pack / name).write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


@pytest.fixture
def middle(signed: Signed, tmp_path: Path) -> tuple[Signed, Path]:
    """Tenant initech: 4 rows three hours ago, 5 two hours ago, 3 one hour ago, then checkpointed;
    the pack of the period from 2.5 to 1.5 hours ago (rows 5 to 9)."""
    for n, hours in ((4, 3), (5, 2), (3, 1)):
        signed.write(n, tenant=OTHER, age=timedelta(hours=hours))
    signed.checkpointer.checkpoint(every_chain=True)
    pack = tmp_path / "pack"
    code, output = export(signed, pack, at(-timedelta(hours=2.5)), at(-timedelta(hours=1.5)), tenant=OTHER)
    assert code == 0, output
    return signed, pack


def test_an_exported_pack_verifies_offline_with_the_public_key(middle: tuple[Signed, Path]) -> None:
    signed, pack = middle
    assert sorted(p.name for p in pack.iterdir()) == [
        "README.md",
        "checkpoints.txt",
        "figures.json",
        "manifest.json",
        "policy_revisions.json",
        "public_keys",
        "rows.jsonl",
        "rows_after.jsonl",
        "rows_before.jsonl",
        "tree_before.json",
    ]
    assert [r["seq"] for r in lines(pack, "rows_before.jsonl")] == [4]
    assert [r["seq"] for r in lines(pack, "rows.jsonl")] == [5, 6, 7, 8, 9]
    assert [r["seq"] for r in lines(pack, "rows_after.jsonl")] == [10, 11, 12]  # up to the checkpoint of 12
    row = lines(pack, "rows.jsonl")[0]
    assert row["row_hash"] == row_hash({**row, "created_at": datetime.fromisoformat(row["created_at"])})
    assert row["chain"] == OTHER and row["seal"] and row["in_period"] is True
    code, report, verdict = verify_pack(pack, signed.keys["public"])
    assert code == 0, report["problems"]
    assert report["rows"] == {"in_period": 5, "between": 0, "before": 1, "after": 3, "hash_v1": 0}
    assert report["checkpoints"]["tied_through"] == 12 and report["tied"] == 5 and report["not_tied"] == 0
    assert report["checkpoints"]["merkle"].startswith("checked")
    assert report["keys"]["source"] == "given"
    assert verdict.startswith("OK: 5 rows of tenant initech") and "signed by the given key" in verdict
    figures = json.loads((pack / "figures.json").read_text())
    assert figures["calls"]["total"] == 5
    revisions = json.loads((pack / "policy_revisions.json").read_text())
    assert [(r["revision"], r["rows"], r["calls"]) for r in revisions["revisions"]] == [("r1", 5, 5)]
    manifest = json.loads((pack / "manifest.json").read_text())
    assert manifest["counts"]["rows_in_period"] == 5 and manifest["tied_to"]["size"] == 12
    assert set(manifest["files"]) == {
        str(p.relative_to(pack)) for p in pack.rglob("*") if p.is_file() and p.name != "manifest.json"
    }
    assert "gateway audit verify-pack DIR --public-key" in (pack / "README.md").read_text()
    # Without a key, the pack's own: it passes, and says what that proves.
    code, report, verdict = verify_pack(pack)
    assert code == 0 and report["keys"]["source"] == "pack" and "not that the gateway signed it" in report["keys"]["note"]
    assert "the pack's own key" in verdict


def test_export_signs_the_rows_written_since_the_last_checkpoint(signed: Signed, tmp_path: Path) -> None:
    signed.write(2)  # acme: 12 checkpointed by the fixture, these 2 not yet
    code, output = export(signed, tmp_path / "pack", at(-timedelta(hours=1)), at(timedelta(0)))
    assert code == 0, output
    code, report, verdict = verify_pack(tmp_path / "pack", signed.keys["public"])
    assert code == 0, report["problems"]
    assert report["rows"]["in_period"] == 14 and report["tied"] == 14 and report["not_tied"] == 0
    assert report["end_covered"] and "NOT covered" not in verdict


def test_rows_under_no_checkpoint_fail_unless_the_auditor_accepts_them(signed: Signed, tmp_path: Path) -> None:
    from audit.evidence import gateway_version, signing_of, write_pack

    signed.write(2)  # acme: 12 checkpointed by the fixture, these 2 not yet, and the pack made without catching up
    now = datetime.now(timezone.utc)
    pack = tmp_path / "pack"
    write_pack(
        signed.gateway.store, TENANT, now - timedelta(hours=1), now + timedelta(hours=1), pack,
        signing_of(signed.checkpointer), gateway_version(), now,
    )  # fmt: skip
    code, report, verdict = verify_pack(pack, signed.keys["public"])
    assert code == 1 and report["tied"] == 12 and report["not_tied"] == 2
    assert report["first_problem"]["file"] == "rows.jsonl" and report["first_problem"]["line"] == 13
    assert "2 of the period's 14 rows, from row 13, are under no signed checkpoint" in verdict
    code, report, verdict = verify_pack(pack, signed.keys["public"], more=("--allow-uncovered",))
    assert code == 0, report["problems"]
    assert "2 rows are NOT covered by a signed checkpoint (accepted with --allow-uncovered)" in verdict
    assert "No signed checkpoint covers the period's last row" in (pack / "README.md").read_text()


Edit = Callable[[Path], None]


def edit_row(pack: Path) -> None:
    rows = lines(pack, "rows.jsonl")
    rows[2]["actor"] = "user:bob"
    put_lines(pack, "rows.jsonl", rows)


def delete_row(pack: Path) -> None:
    rows = lines(pack, "rows.jsonl")
    put_lines(pack, "rows.jsonl", rows[:2] + rows[3:])


def delete_first_row(pack: Path) -> None:
    put_lines(pack, "rows.jsonl", lines(pack, "rows.jsonl")[1:])


def reorder_rows(pack: Path) -> None:
    rows = lines(pack, "rows.jsonl")
    rows[1], rows[2] = rows[2], rows[1]
    put_lines(pack, "rows.jsonl", rows)


def edit_and_rehash(pack: Path) -> None:
    """Someone who knows the algorithm: the edit, then every hash and link after it recomputed."""
    rows = lines(pack, "rows_before.jsonl") + lines(pack, "rows.jsonl") + lines(pack, "rows_after.jsonl")
    rows[2]["decision"], rows[2]["status_code"] = "deny", 403
    for i in range(2, len(rows)):
        rows[i]["prev_hash"] = rows[i - 1]["row_hash"]
        rows[i]["row_hash"] = row_hash({**rows[i], "created_at": datetime.fromisoformat(rows[i]["created_at"])})
    put_lines(pack, "rows_before.jsonl", rows[:1])
    put_lines(pack, "rows.jsonl", rows[1:6])
    put_lines(pack, "rows_after.jsonl", rows[6:])


def cut_the_tail(pack: Path) -> None:
    put_lines(pack, "rows_after.jsonl", [])


def edit_figures(pack: Path) -> None:
    figures = json.loads((pack / "figures.json").read_text())
    figures["calls"]["total"] = 4
    (pack / "figures.json").write_text(json.dumps(figures))


def swap_revision(pack: Path) -> None:
    revisions = json.loads((pack / "policy_revisions.json").read_text())
    revisions["revisions"][0]["revision"] = "sha256:" + "ab" * 32
    (pack / "policy_revisions.json").write_text(json.dumps(revisions))


def swap_revision_in_a_row(pack: Path) -> None:
    rows = lines(pack, "rows.jsonl")
    rows[0]["policy_revision"] = "sha256:" + "ab" * 32
    put_lines(pack, "rows.jsonl", rows)


EDITS: dict[str, tuple[Edit, str, int | None, str]] = {
    # what was done: (the edit, the file named, its line, what the problem says)
    "one row edited": (edit_row, "rows.jsonl", 3, "row 7: its content does not match its hash"),
    "one row deleted": (delete_row, "rows.jsonl", 3, "row 8: expected position 7: a row is missing"),
    "the period's first row deleted": (delete_first_row, "rows.jsonl", 1, "row 6: expected position 5"),
    "two rows swapped": (reorder_rows, "rows.jsonl", 2, "row 7: expected position 6"),
    "a row edited and the chain rehashed": (edit_and_rehash, "checkpoints.txt", None, "does not carry the head hash"),
    "the rows up to the checkpoint cut": (cut_the_tail, "checkpoints.txt", None, "outside the pack's rows"),
    "figures edited": (edit_figures, "figures.json", None, "calls.total is 4, the rows give 5"),
    "a policy revision swapped": (swap_revision, "policy_revisions.json", None, "which is not listed"),
    "a row's policy revision swapped": (swap_revision_in_a_row, "rows.jsonl", 1, "row 5: its content does not match"),
}


@pytest.mark.parametrize("what", sorted(EDITS))
def test_an_altered_pack_fails_naming_what_broke(middle: tuple[Signed, Path], tmp_path: Path, what: str) -> None:
    signed, pack = middle
    edit, file, line, says = EDITS[what]
    # As it was edited: the manifest's digest of the file no longer holds.
    altered = tmp_path / "altered"
    shutil.copytree(pack, altered)
    edit(altered)
    code, report, verdict = verify_pack(altered, signed.keys["public"])
    assert code == 1 and verdict.startswith("FAILED: ")
    assert report["first_problem"]["what"].endswith("(the file was changed)"), report["problems"]
    # With the manifest's digests made again: the content itself says what broke, and where.
    redigest(altered)
    code, report, verdict = verify_pack(altered, signed.keys["public"])
    assert code == 1, what
    found = [p for p in report["problems"] if p["file"] == file and says in p["what"]]
    assert found, report["problems"]
    if line is not None:
        assert found[0]["line"] == line, found
    assert verdict.startswith("FAILED: ")


def test_a_checkpoint_signed_by_another_key_fails(middle: tuple[Signed, Path], tmp_path: Path) -> None:
    signed, pack = middle
    other = generate(tmp_path / "other")
    # The pack's checkpoint re-signed by another key (same name), as someone without the gateway's key would.
    (note_line, note), *_ = CheckpointLog(pack / "checkpoints.txt").notes()
    forged = sign(note.partition("\n\n")[0] + "\n", load_signer(other["private"]))
    (pack / "checkpoints.txt").write_text(forged + "\n")
    redigest(pack)
    code, report, verdict = verify_pack(pack, signed.keys["public"])
    assert code == 1
    assert report["first_problem"]["file"] == "checkpoints.txt" and report["first_problem"]["line"] == note_line
    assert "does not verify" in report["first_problem"]["what"]
    assert verdict.startswith("FAILED: checkpoints.txt line 1:")


def test_a_pack_checked_with_another_key_fails(middle: tuple[Signed, Path], tmp_path: Path) -> None:
    signed, pack = middle
    other = generate(tmp_path / "other")
    code, report, _ = verify_pack(pack, other["public"])
    assert code == 1 and report["first_problem"]["file"] == "checkpoints.txt"
    assert "not signed by this key" in report["first_problem"]["what"]


def test_an_empty_period_gives_a_valid_empty_pack(middle: tuple[Signed, Path], tmp_path: Path) -> None:
    signed, _ = middle
    pack = tmp_path / "empty"
    # Between the rows of three and of two hours ago: no row is dated in it.
    code, output = export(signed, pack, at(-timedelta(hours=2.9)), at(-timedelta(hours=2.1)), tenant=OTHER)
    assert code == 0, output
    assert lines(pack, "rows.jsonl") == []
    assert [r["seq"] for r in lines(pack, "rows_before.jsonl")] == [4]  # dated before the period
    assert lines(pack, "rows_after.jsonl")[0]["seq"] == 5  # the next row, dated after it
    code, report, verdict = verify_pack(pack, signed.keys["public"])
    assert code == 0, report["problems"]
    assert report["rows"]["in_period"] == 0 and json.loads((pack / "figures.json").read_text())["calls"]["total"] == 0
    assert verdict.startswith("OK: 0 rows")
    # A tenant with no rows at all: an empty pack, whose end nothing signed can show (no chain, no
    # checkpoint): it verifies only when the auditor accepts that.
    code, output = export(signed, tmp_path / "none", at(-timedelta(hours=1)), at(timedelta(0)), tenant="nobody")
    assert code == 0, output
    code, report, _ = verify_pack(tmp_path / "none", signed.keys["public"])
    assert code == 1 and "the period's end is NOT covered" in report["first_problem"]["what"], report["problems"]
    code, report, verdict = verify_pack(tmp_path / "none", signed.keys["public"], more=("--allow-uncovered",))
    assert code == 0 and report["rows"]["in_period"] == 0, report["problems"]
    assert "the period's end is NOT covered by a checkpoint signed after it" in verdict


def test_export_refuses_a_non_empty_directory_and_bad_instants(signed: Signed, tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("x")
    code, output = export(signed, taken, at(-timedelta(hours=1)), at(timedelta(hours=1)))
    assert code == 1 and "not an empty directory" in output
    code, output = export(signed, tmp_path / "a", "yesterday", at(timedelta(hours=1)))
    assert code == 1 and "--since" in output
    code, output = export(signed, tmp_path / "b", at(-timedelta(hours=1)), "2026-01-01T00:00:00")
    assert code == 1 and "--until" in output and "offset" in output
    code, output = export(signed, tmp_path / "c", at(timedelta(hours=1)), at(-timedelta(hours=1)))
    assert code == 1 and "--until: must come after --since" in output


def test_a_pack_from_a_gateway_without_signing_verifies_unsigned(signed: Signed, tmp_path: Path) -> None:
    code, output = export(signed, tmp_path / "pack", at(-timedelta(hours=1)), at(timedelta(hours=1)), sign_env=False)
    assert code == 0, output
    assert (tmp_path / "pack" / "checkpoints.txt").read_text() == ""
    assert "signs no checkpoints" in (tmp_path / "pack" / "README.md").read_text()
    code, report, verdict = verify_pack(tmp_path / "pack")
    assert code == 1 and report["tied"] == 0 and report["not_tied"] == 12
    assert "under no signed checkpoint in the pack" in verdict
    code, report, verdict = verify_pack(tmp_path / "pack", more=("--allow-uncovered",))
    assert code == 0, report["problems"]
    assert "none is under a signed checkpoint" in verdict and "12 rows are NOT covered" in verdict


def test_export_refuses_a_rollup_that_disagrees_with_the_rows(signed: Signed, tmp_path: Path) -> None:
    """The figures come from the rollup, the rows from the chain: someone who edits the rollup to
    change what the overview shows gets no pack whose figures quietly differ from its rows."""
    from sqlalchemy import update

    from audit.chain import audit_rollup, chain_of
    from core import store as db

    signed.write(3, age=timedelta(hours=2))
    with db.writer(signed.gateway.store).begin() as conn:
        conn.execute(update(audit_rollup).where(audit_rollup.c.chain == chain_of(TENANT)).values(n=audit_rollup.c.n + 7))
    code, output = export(signed, tmp_path / "pack", at(-timedelta(days=1)), at(timedelta(hours=1)))
    assert code == 1 and "rollup does not agree with the period's rows" in output, output
    assert not any((tmp_path / "pack").glob("*")), "nothing of a refused pack is written"


def test_a_pack_cut_at_a_checkpoint_inside_its_period_fails(signed: Signed, tmp_path: Path) -> None:
    """Issue 55: drop the period's last rows at a checkpoint boundary, their notes and the rows
    after, recompute the figures, revisions, counts and digests with the project's own functions:
    the pack used to verify OK with the real key, with or without an auditor's older note. Now a
    pack must hold a checkpoint signed at or after its period's end, which names every row written
    by then: the cut pack cannot."""
    from audit.chain import StoredTrace
    from audit.evidence import policy_revisions
    from audit.review import figures_of
    from core.audit_facts import tally_rows

    since = at(-timedelta(hours=1))
    signed.write(4, tenant=OTHER)
    signed.checkpointer.checkpoint(every_chain=True)  # a checkpoint inside the period, after its 4th row
    older_note = tmp_path / "auditor-note"
    shutil.copy(signed.checkpoints, older_note)  # what the auditor held before the cut
    signed.write(3, tenant=OTHER)  # the period's last rows
    until = at(timedelta(0))
    pack = tmp_path / "pack"
    assert export(signed, pack, since, until, tenant=OTHER)[0] == 0
    code, report, _ = verify_pack(pack, signed.keys["public"])
    assert code == 0 and report["end_covered"] and report["rows"]["in_period"] == 7, report["problems"]

    # The cut: rows 5-7 and every note past the checkpoint of 4 rows go; the rest is made to agree.
    kept = [r for r in lines(pack, "rows.jsonl") if r["seq"] <= 4]
    put_lines(pack, "rows.jsonl", kept)
    put_lines(pack, "rows_after.jsonl", [])
    notes = (pack / "checkpoints.txt").read_text().split("\n\n")
    cut_notes = []
    for _, note in CheckpointLog(pack / "checkpoints.txt").notes():
        if note.split("\n")[1] == "4":
            cut_notes.append(note)
    assert cut_notes and notes, "the pack held the checkpoint of 4 rows"
    (pack / "checkpoints.txt").write_text("".join(n + "\n" for n in cut_notes))
    period = {"since": since, "until": until}
    in_period = [{**r, "created_at": datetime.fromisoformat(r["created_at"])} for r in kept if r["in_period"]]
    (pack / "figures.json").write_text(
        json.dumps(figures_of(tally_rows(in_period), datetime.fromisoformat(since), datetime.fromisoformat(until)).wire())
    )
    (pack / "policy_revisions.json").write_text(json.dumps(policy_revisions([StoredTrace.of(r) for r in in_period]), default=str))
    manifest = json.loads((pack / "manifest.json").read_text())
    (kept_note,) = [c for c in read_checkpoints(pack / "checkpoints.txt", load_verifier(signed.keys["public"])).by_chain[OTHER]]
    manifest["tied_to"] = {"size": kept_note.size, "time": kept_note.time}
    manifest["positions"] = {"first": kept[0]["seq"], "last": kept[-1]["seq"], "period": [kept[0]["seq"], kept[-1]["seq"]]}
    manifest["counts"] = {**manifest["counts"], "rows_in_period": len(kept), "rows": len(kept), "rows_after": 0}
    manifest["counts"]["checkpoints"] = len(cut_notes)
    assert manifest["period"] == {"since": manifest["period"]["since"], "until": manifest["period"]["until"]} and period
    (pack / "manifest.json").write_text(json.dumps(manifest))
    redigest(pack)

    code, report, verdict = verify_pack(pack, signed.keys["public"])
    assert code == 1, verdict
    assert [p["what"] for p in report["problems"]] == [
        p["what"] for p in report["problems"] if "the period's end is NOT covered" in p["what"]
    ], report["problems"]  # the cut is consistent in every other respect: only the end gives it away
    code, report, _ = verify_pack(pack, signed.keys["public"], more=("--known", str(older_note)))
    assert code == 1 and any("the period's end is NOT covered" in p["what"] for p in report["problems"])
    # The full file held as --known (a note newer than the cut) shows it too.
    code, report, _ = verify_pack(pack, signed.keys["public"], more=("--known", str(signed.checkpoints)))
    assert code == 1


def test_a_period_not_yet_ended_is_not_covered_at_its_end(signed: Signed, tmp_path: Path) -> None:
    """A pack whose period runs past its export cannot show its end: verify-pack says so and fails,
    unless the auditor accepts it (`--allow-uncovered`)."""
    code, output = export(signed, tmp_path / "pack", at(-timedelta(hours=1)), at(timedelta(hours=1)))
    assert code == 0, output
    code, report, _ = verify_pack(tmp_path / "pack", signed.keys["public"])
    assert code == 1 and not report["end_covered"] and "the period's end is NOT covered" in report["first_problem"]["what"]
    code, report, verdict = verify_pack(tmp_path / "pack", signed.keys["public"], more=("--allow-uncovered",))
    assert code == 0 and "the period's end is NOT covered by a checkpoint signed after it" in verdict
