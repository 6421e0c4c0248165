"""The checkpoints of an evidence pack held to its rows: their signatures and cosignatures, the
checkpoints the auditor holds from elsewhere (`--known`), and the manifest's claims about them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from audit.evidence.documents import KnownHeld
from audit.evidence.findings import PackCheck, PackRow, Positions, Signatures
from audit.evidence.layout import CHECKPOINTS, MANIFEST, TREE
from audit.integrity import (
    SIGNATURE_PREFIX,
    Attested,
    Checkpoint,
    CheckpointLog,
    NoteError,
    Range,
    Verifier,
    adoption_of,
    impossible_mark,
    leaf_hash,
    open_by_any,
    open_note,
    origin_of,
    unfiled_marks,
)


def _by_position(check: PackCheck, rows: list[PackRow]) -> Positions:
    tree, merkle = _tree(check, rows)
    roots: dict[int, str] = {}
    if tree is not None:
        if tree.size:
            roots[tree.size] = tree.root().hex()
        for r in rows:
            tree.append(leaf_hash(str(r.data["row_hash"])))
            roots[int(r.data["seq"])] = tree.root().hex()
    check.merkle = merkle
    return Positions(
        int(rows[0].data["seq"]) if rows else None,
        int(rows[-1].data["seq"]) if rows else None,
        {int(r.data["seq"]): str(r.data["row_hash"]) for r in rows},
        roots,
        str(rows[0].data["prev_hash"]) if rows else "",
    )


def signed_checkpoints(
    check: PackCheck, rows: list[PackRow], keys: list[Verifier], chain: str, witnesses: Sequence[Verifier]
) -> Signatures:
    """Open each note with the keys and hold its checkpoint against the rows: the row at its size
    must carry its head hash, and the Merkle tree (the range before the pack, extended by the pack's
    rows) its root. Cosignatures are checked with the witness keys; other signature lines are
    listed as not checked."""
    positions = _by_position(check, rows)
    check.positions = positions
    found = Signatures(check.merkle, {w.name: 0 for w in witnesses})
    names = {k.name for k in keys}
    marks: list[Checkpoint] = []
    for line, note in CheckpointLog(check.directory / CHECKPOINTS).notes():
        found.notes += 1
        at = (CHECKPOINTS, line)
        try:
            checkpoint = Checkpoint.parse(open_by_any(note, keys), line)
        except NoteError as exc:
            check.fail(*at, f"the checkpoint does not verify with the key(s): {exc}")
            continue
        found.verified += 1
        for name in _cosigners(check, at, note, names | {origin_of(checkpoint.chain)}, witnesses):
            if name in found.witnesses:
                found.witnesses[name] += 1
            else:
                found.unchecked.add(name)
        if checkpoint.chain != chain:
            check.fail(*at, f"a checkpoint of chain {checkpoint.chain!r}, not the pack's {chain!r}")
            continue
        marks.append(checkpoint)
        check.verified.append((line, checkpoint))
        impossible = impossible_mark(checkpoint)
        if impossible is not None:
            check.fail(*at, impossible)
        size, signed = checkpoint.size, f"the checkpoint of {checkpoint.size} rows signed {checkpoint.time}"
        if checkpoint.refused is not None:
            check.fail(*at, f"the signer refused row {checkpoint.refused[0]}: {checkpoint.refused[1]}")
        if not positions.holds(size):
            check.fail(
                *at,
                f"{signed} names a position outside the pack's rows ({positions.first} to {positions.last}): rows are missing",
            )
            continue
        wrong = positions.mismatch(checkpoint, signed)
        if wrong is not None:
            check.fail(*at, wrong)
            continue
        check.held.append(checkpoint)
        if checkpoint.refused is None:
            found.tie(size)
    found.adoption = adoption_of(marks)
    return found


def _cosigners(check: PackCheck, at: tuple[str, int], note: str, gateway: set[str], witnesses: Sequence[Verifier]) -> list[str]:
    """The names of a note's signature lines other than the gateway's (its key, and the same key
    under the chain's origin, which C2SP witnesses know it by); a line by a witness whose key is
    given must verify (a forged cosignature is a problem, never listed as one)."""
    found = []
    for text in note[note.rfind("\n\n") + 2 :].splitlines():
        if not text.startswith(SIGNATURE_PREFIX):
            continue
        name = text[len(SIGNATURE_PREFIX) :].partition(" ")[0]
        if name in gateway or name in found:
            continue
        for witness in (w for w in witnesses if w.name == name):
            try:
                open_note(note, witness)
            except NoteError as exc:
                check.fail(*at, f"the cosignature by {name} does not verify with its key ({exc}): forged or altered")
                break
        else:
            found.append(name)
    return found


def known_checkpoints(
    check: PackCheck, rows: list[PackRow], keys: list[Verifier], chain: str, known: Sequence[Path], signatures: Signatures
) -> KnownHeld | None:
    """Checkpoints the auditor holds from elsewhere (a witness's cosigned note, a checkpoint of an
    earlier pack), each opened with the gateway's keys: each must lie within the pack's rows and
    match them, and an adoption one of them carries must still be carried by the pack. Those that
    hold count as signed coverage (they tie `signatures` too)."""
    if not known:
        return None
    positions = check.positions
    assert positions is not None
    held, other_chains = 0, 0
    theirs: list[Checkpoint] = []
    for path in known:
        attested = _read_known(check, path, keys)
        other_chains += sum(len(v) for name, v in attested.by_chain.items() if name != chain)
        for checkpoint in sorted(attested.by_chain.get(chain, []), key=lambda c: c.size):
            at, signed = (str(path), checkpoint.line), f"your checkpoint of {checkpoint.size} rows signed {checkpoint.time}"
            theirs.append(checkpoint)
            if not positions.holds(checkpoint.size):
                check.fail(
                    *at,
                    f"{signed} lies outside the pack's rows ({positions.first} to {positions.last}): the pack cannot show "
                    "it is consistent with it (ask for a pack exported with `gateway audit export --known` and this note)",
                )
                continue
            wrong = positions.mismatch(checkpoint, signed)
            if wrong is not None:
                check.fail(*at, f"{wrong} (the rows are not the ones your checkpoint saw)")
                continue
            held += 1
            check.held.append(checkpoint)
            if checkpoint.refused is None:
                signatures.tie(checkpoint.size)
    for mark in unfiled_marks(theirs, [c for _, c in check.verified]):
        check.fail(
            CHECKPOINTS,
            None,
            f"a checkpoint you hold says the chain was {mark.text()}; no checkpoint of the pack carries that mark "
            "as it is (row and time): it was altered, moved or dropped since",
        )
    return KnownHeld(files=[str(p) for p in known], held=held, other_chains=other_chains)


def _read_known(check: PackCheck, path: Path, keys: list[Verifier]) -> Attested:
    from audit.integrity import read_checkpoints

    if not path.is_file():
        check.fail(str(path), None, "cannot be read")
        return Attested(str(path))
    attested = read_checkpoints(path, keys)
    for line, what in attested.problems:
        check.fail(str(path), line, what)
    if not attested.notes and not attested.problems:
        check.fail(str(path), None, "holds no checkpoint note")
    return attested


def manifest_claims(check: PackCheck, manifest: dict[str, Any], signatures: Signatures, rows: list[PackRow]) -> None:
    """The manifest's claims held against what the files give (nothing in the verdict is read from it)."""
    positions: dict[str, Any] = manifest["positions"] if isinstance(manifest.get("positions"), dict) else {}
    given = (int(rows[0].data["seq"]), int(rows[-1].data["seq"])) if rows else (None, None)
    if (positions.get("first"), positions.get("last")) != given:
        check.fail(
            MANIFEST,
            None,
            f"positions {positions.get('first')} to {positions.get('last')}: the rows run {given[0]} to {given[1]}",
        )
    counts: dict[str, Any] = manifest["counts"] if isinstance(manifest.get("counts"), dict) else {}
    if counts.get("checkpoints") != signatures.notes:
        check.fail(MANIFEST, None, f"counts {counts.get('checkpoints')} checkpoints, {CHECKPOINTS} holds {signatures.notes}")
    named = manifest.get("tied_to")
    if named is not None:
        verified = {(c.size, c.time) for _, c in check.verified}
        if not isinstance(named, dict) or (named.get("size"), named.get("time")) not in verified:
            check.fail(MANIFEST, None, f"ties the pack to a checkpoint ({named}) that is not among the pack's verified ones")
    if manifest.get("signing") == "none" and signatures.verified:
        check.fail(MANIFEST, None, "says the gateway signs no checkpoints, yet the pack holds signed ones")


def _tree(check: PackCheck, rows: list[PackRow]) -> tuple[Range | None, str]:
    """The Merkle tree before the pack's first row, from its compact range, and what it allows."""
    document = check.json(TREE)
    if not isinstance(document, dict):
        return None, "not checked: no tree before the pack"
    if document.get("nodes") is None:
        return None, f"not checked (head hashes only): {document.get('why', 'no tree given')}"
    try:
        tree = Range.of(int(document["size"]), [bytes.fromhex(h) for h in document["nodes"]])
    except (KeyError, TypeError, ValueError) as exc:
        check.fail(TREE, None, f"not a compact range ({exc})")
        return None, "not checked: the tree before the pack is unreadable"
    if rows and tree.size != int(rows[0].data["seq"]) - 1:
        check.fail(TREE, None, f"a tree of {tree.size} rows, but the pack starts at row {rows[0].data['seq']}")
        return None, "not checked: the tree before the pack does not end where the pack starts"
    return tree, "checked: each checkpoint's root recomputed from the tree before the pack and its rows"
