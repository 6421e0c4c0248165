"""Check an evidence pack (audit.evidence.pack) offline: no database, no network, only its files and the
gateway's public key (`gateway audit verify-pack`).

What is checked, each failure named by its file and line: the manifest's digests of every file; each
row's hash from its content (hash version 2; version 1 only while no version 2 row came before it
in the pack), its review columns against its lineage, its link to the row before, consecutive
positions, its chain and tenant, and whether it is dated in the period as its file says; the
checkpoint notes' signatures, and each checkpoint against the rows (the head hash of the row at its
size, and its Merkle root recomputed from the tree before the pack and the pack's rows); the
policy revisions and the overview's figures recomputed from the period's rows.

What the verdict rests on is computed, never read from the manifest (which is not signed): the
manifest's claims (positions, counts, the checkpoint it ties to) are held against what the files
give. A pack proves only what its signed checkpoints cover: rows of the period under no checkpoint
in it are a failure unless the auditor accepts them (`allow_uncovered`), because whoever made the
pack could have rewritten them and left out the checkpoints that would show it. Checkpoints the
auditor holds from elsewhere (`known`: a witness's cosigned note, a checkpoint of an earlier pack)
must each fall within the pack's rows and match them. Cosignatures are checked with the witness keys
given; any other signature line is reported as not checked. An adoption (`--adopt`) carried by a
checkpoint is named in the verdict.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from audit.chain import HASHED, derived, row_hash, row_hash_v1
from audit.evidence.pack import (
    CHECKPOINTS,
    FIGURES,
    FORMAT,
    KEYS,
    MANIFEST,
    POLICY,
    ROWS,
    ROWS_AFTER,
    ROWS_BEFORE,
    TREE,
    in_period,
    policy_revisions,
    sha256_file,
)
from audit.integrity import (
    SIGNATURE_PREFIX,
    Attested,
    Checkpoint,
    CheckpointLog,
    NoteError,
    Range,
    Verifier,
    adoption_of,
    leaf_hash,
    open_by_any,
    open_note,
    origin_of,
    parse_verifier_key,
)
from core.audit_facts import tally_rows
from core.errors import ConfigurationError
from core.instants import parse_rfc3339

PACK_KEYS = (
    "the pack's own public keys: this shows the pack is consistent with itself, not that the gateway signed it "
    "(whoever made the pack could have made the keys); pass the key you received from the operator with --public-key"
)


@dataclass(frozen=True, slots=True)
class Problem:
    file: str
    line: int | None
    what: str

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "what": self.what}

    def text(self) -> str:
        return f"{self.file}" + (f" line {self.line}" if self.line is not None else "") + f": {self.what}"


@dataclass(slots=True)
class _Row:
    file: str
    line: int
    data: dict[str, Any]
    created_at: datetime


@dataclass(slots=True)
class _Check:
    directory: Path
    problems: list[Problem] = field(default_factory=list)
    merkle: str = ""  # what the tree before the pack allows
    positions: _Rows | None = None
    verified: list[tuple[int, Checkpoint]] = field(default_factory=list)  # the pack's notes that verify, of its chain

    def fail(self, file: str, line: int | None, what: str) -> None:
        self.problems.append(Problem(file, line, what))

    def json(self, name: str) -> Any:
        try:
            return json.loads((self.directory / name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            self.fail(name, None, "missing")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            self.fail(name, getattr(exc, "lineno", None), f"not readable JSON ({type(exc).__name__})")
        return None


def pack_verifiers(directory: Path) -> list[Verifier]:
    """The verifier keys shipped in a pack (`public_keys/*.vkey`)."""
    found = []
    for path in sorted((directory / KEYS).glob("*.vkey")):
        try:
            found.append(Verifier(*parse_verifier_key(path.read_text(encoding="utf-8"))))
        except (OSError, UnicodeDecodeError, NoteError) as exc:
            raise ConfigurationError(f"{KEYS}/{path.name}: not a verifier key ({exc})") from exc
    return found


UNCHECKED = "NOT CHECKED: no key was given for them, so they prove nothing (pass the witness's key with --witness-key)"
NOT_COVERED = "pass --allow-uncovered to accept rows checked for their hashes and links only"


@dataclass(frozen=True, slots=True)
class Trust:
    """What the auditor brings besides the pack: the gateway's keys as received (None: the pack's
    own), checkpoints held from elsewhere, witness keys, and whether rows under no signed
    checkpoint are accepted."""

    verifiers: Sequence[Verifier] | None = None
    known: Sequence[Path] = ()
    witnesses: Sequence[Verifier] = ()
    allow_uncovered: bool = False


def check_pack(directory: Path, verifiers: Sequence[Verifier] | None = None, trust: Trust | None = None) -> dict[str, Any]:
    """The report of one pack: `ok`, what was checked and what could not be, and every problem
    (`problems`, the first as `first_problem`). `verifiers`: the gateway's keys as the auditor got
    them; None uses the pack's own (and the report says what that proves). `trust`: the rest of
    what the auditor holds (`Trust`)."""
    trust = trust or Trust(verifiers)
    verifiers = trust.verifiers if verifiers is None else verifiers
    check = _Check(directory)
    report: dict[str, Any] = {"ok": False, "pack": str(directory)}
    manifest = check.json(MANIFEST)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        if isinstance(manifest, dict):
            check.fail(MANIFEST, None, f"not an evidence pack manifest ({FORMAT})")
        return _finish(report, check)
    try:
        since = parse_rfc3339(manifest["period"]["since"])
        until = parse_rfc3339(manifest["period"]["until"])
        chain, tenant = str(manifest["chain"]), manifest["tenant"]
    except (KeyError, TypeError, ValueError) as exc:
        check.fail(MANIFEST, None, f"no readable tenant, chain and period ({type(exc).__name__})")
        return _finish(report, check)
    report.update(tenant=tenant, chain=chain, period=manifest["period"], created_at=manifest.get("created_at"))
    report["gateway_version"] = manifest.get("gateway_version")
    _digests(check, manifest)

    if verifiers is None:
        try:
            keys = pack_verifiers(directory)
        except ConfigurationError as exc:
            check.fail(KEYS, None, exc.message)
            keys = []
        report["keys"] = {"source": "pack", "count": len(keys), "note": PACK_KEYS}
    else:
        keys = list(verifiers)
        report["keys"] = {"source": "given", "count": len(keys)}

    before = _read_rows(check, ROWS_BEFORE)
    period = _read_rows(check, ROWS)
    after = _read_rows(check, ROWS_AFTER)
    rows = before + period + after
    v1 = _chain(check, rows, chain, tenant, since, until)
    for row in before + after:
        if in_period(row.created_at, since, until):
            check.fail(row.file, row.line, f"row {row.data.get('seq')} is dated in the period but listed outside it")
    for row in (period[:1] + period[-1:]) if period else []:
        if not row.data.get("in_period"):
            check.fail(row.file, row.line, f"row {row.data.get('seq')}: the period's rows start and end with a row dated in it")
    inside = [r for r in period if r.data.get("in_period")]
    expected = (manifest.get("counts") or {}).get("rows_in_period")
    if expected != len(inside):
        check.fail(MANIFEST, None, f"counts {expected} rows in the period, {ROWS} holds {len(inside)}")
    report["rows"] = {
        "in_period": len(inside),
        "between": len(period) - len(inside),
        "before": len(before),
        "after": len(after),
        "hash_v1": v1,
    }

    report["checkpoints"] = _checkpoints(check, rows, keys, chain, trust.witnesses)
    report["known"] = _known(check, rows, keys, chain, trust.known, report["checkpoints"])
    through = report["checkpoints"]["tied_through"]
    report["tied"] = sum(1 for r in inside if through is not None and int(r.data["seq"]) <= through)
    report["not_tied"] = len(inside) - report["tied"]
    report["allow_uncovered"] = trust.allow_uncovered
    if report["not_tied"] and not trust.allow_uncovered:
        untied = next(r for r in inside if through is None or int(r.data["seq"]) > through)
        check.fail(
            untied.file,
            untied.line,
            f"{report['not_tied']} of the period's {len(inside)} rows, from row {untied.data['seq']}, are under no signed "
            f"checkpoint in the pack: nothing signed shows they are the rows that were written; {NOT_COVERED}",
        )
    adopted = report["checkpoints"].pop("adoption", None)
    report["adopted"] = adopted.as_dict() if adopted is not None else None
    _claims(check, manifest, report, rows)

    lines = [{**r.data, "created_at": r.created_at} for r in inside]
    _policy(check, [{**r.data} for r in inside])
    report["policy_revisions"] = len(policy_revisions(r.data for r in inside)["revisions"])
    _figures(check, lines, since, until)
    return _finish(report, check)


def _finish(report: dict[str, Any], check: _Check) -> dict[str, Any]:
    report["ok"] = not check.problems
    report["problems"] = [p.as_dict() for p in check.problems]
    report["first_problem"] = check.problems[0].as_dict() if check.problems else None
    return report


def _digests(check: _Check, manifest: dict[str, Any]) -> None:
    files = manifest.get("files")
    if not isinstance(files, dict):
        check.fail(MANIFEST, None, "lists no file digests")
        return
    present = {
        str(p.relative_to(check.directory)).replace(os.sep, "/")
        for p in check.directory.rglob("*")
        if p.is_file() and p.name != MANIFEST
    }
    for name in sorted(present - set(files)):
        check.fail(name, None, "not listed in the manifest (added to the pack)")
    for name, digest in sorted(files.items()):
        if name not in present:
            check.fail(name, None, "listed in the manifest but missing")
        elif sha256_file(check.directory / name) != digest:
            check.fail(name, None, "its SHA-256 is not the manifest's (the file was changed)")


def _read_rows(check: _Check, name: str) -> list[_Row]:
    try:
        text = (check.directory / name).read_text(encoding="utf-8")
    except FileNotFoundError:
        check.fail(name, None, "missing")
        return []
    except (OSError, UnicodeDecodeError) as exc:
        check.fail(name, None, f"not readable ({type(exc).__name__})")
        return []
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if not isinstance(data, dict):
                raise ValueError("not an object")
            missing = [n for n in (*HASHED, "row_hash", "in_period") if n not in data]
            if missing:
                raise ValueError(f"lacks {missing[0]}")
            created = datetime.fromisoformat(str(data["created_at"]))
            if created.tzinfo is None:
                raise ValueError("created_at has no offset")
            int(data["seq"])
        except (ValueError, TypeError) as exc:
            check.fail(name, number, f"not a row ({exc})")
            continue
        rows.append(_Row(name, number, data, created))
    return rows


def _chain(check: _Check, rows: list[_Row], chain: str, tenant: Any, since: datetime, until: datetime) -> int:
    """Each row's hash, review columns, link, position, chain and period flag; the number of rows
    accepted under hash version 1."""
    previous: _Row | None = None
    seen_v2, v1 = False, 0
    for row in rows:
        m, at = row.data, (row.file, row.line)
        content = {**m, "created_at": row.created_at}
        if m["row_hash"] == row_hash(content):
            seen_v2 = True
        elif not seen_v2 and m["row_hash"] == row_hash_v1(content):
            v1 += 1
        else:
            check.fail(*at, f"row {m['seq']}: its content does not match its hash (edited)")
        facts = derived(m["lineage"])
        if (m["task_type"], m["about"]) != (facts.task_type, facts.about) and (m["task_type"], m["about"]) != (None, None):
            check.fail(*at, f"row {m['seq']}: task_type or about does not match its lineage (edited)")
        if m["chain"] != chain or m["tenant"] != (tenant or None):
            check.fail(*at, f"row {m['seq']}: of chain {m['chain']!r}, not the pack's {chain!r}")
        if bool(m["in_period"]) != in_period(row.created_at, since, until):
            check.fail(*at, f"row {m['seq']}: in_period says {m['in_period']}, its time {m['created_at']} says otherwise")
        if previous is not None:
            expected = int(previous.data["seq"]) + 1
            if int(m["seq"]) != expected:
                how = "a row is missing before this one" if int(m["seq"]) > expected else "rows are out of order"
                check.fail(*at, f"row {m['seq']}: expected position {expected}: {how}")
            elif m["prev_hash"] != previous.data["row_hash"]:
                check.fail(*at, f"row {m['seq']}: does not link to the row before it")
        previous = row
    return v1


@dataclass(slots=True)
class _Rows:
    """The pack's rows by position: their hashes, and the Merkle root at each (when the tree before
    the pack is given)."""

    first: int | None
    last: int | None
    hashes: dict[int, str]
    roots: dict[int, str]
    start_hash: str  # what the pack's first row links to

    def mismatch(self, checkpoint: Checkpoint, signed: str) -> str | None:
        """Why the rows do not match a checkpoint within them (None: they do)."""
        size = checkpoint.size
        assert self.first is not None
        head = self.hashes.get(size) if size >= self.first else self.start_hash
        if head != checkpoint.head:
            return f"row {size} does not carry the head hash of {signed}: rows rewritten"
        if checkpoint.tree and size in self.roots and self.roots[size] != checkpoint.tree:
            return f"the Merkle root of rows 1 to {size} from the pack is not the one of {signed}"
        return None

    def holds(self, size: int) -> bool:
        return self.first is not None and self.last is not None and self.first - 1 <= size <= self.last


def _by_position(check: _Check, rows: list[_Row]) -> _Rows:
    tree, merkle = _tree(check, rows)
    roots: dict[int, str] = {}
    if tree is not None:
        if tree.size:
            roots[tree.size] = tree.root().hex()
        for r in rows:
            tree.append(leaf_hash(str(r.data["row_hash"])))
            roots[int(r.data["seq"])] = tree.root().hex()
    check.merkle = merkle
    return _Rows(
        int(rows[0].data["seq"]) if rows else None,
        int(rows[-1].data["seq"]) if rows else None,
        {int(r.data["seq"]): str(r.data["row_hash"]) for r in rows},
        roots,
        str(rows[0].data["prev_hash"]) if rows else "",
    )


def _checkpoints(
    check: _Check, rows: list[_Row], keys: list[Verifier], chain: str, witnesses: Sequence[Verifier]
) -> dict[str, Any]:
    """Open each note with the keys and hold its checkpoint against the rows: the row at its size
    must carry its head hash, and the Merkle tree (the range before the pack, extended by the pack's
    rows) its root. Cosignatures are checked with the witness keys; other signature lines are
    listed as not checked."""
    positions = _by_position(check, rows)
    check.positions = positions
    summary: dict[str, Any] = {"notes": 0, "verified": 0, "tied_through": None, "merkle": check.merkle}
    names = {k.name for k in keys}
    unchecked: set[str] = set()
    cosigned = {w.name: 0 for w in witnesses}
    tied: int | None = None
    marks: list[Checkpoint] = []
    for line, note in CheckpointLog(check.directory / CHECKPOINTS).notes():
        summary["notes"] += 1
        at = (CHECKPOINTS, line)
        try:
            checkpoint = Checkpoint.parse(open_by_any(note, keys), line)
        except NoteError as exc:
            check.fail(*at, f"the checkpoint does not verify with the key(s): {exc}")
            continue
        summary["verified"] += 1
        for name in _cosigners(check, at, note, names | {origin_of(checkpoint.chain)}, witnesses):
            if name in cosigned:
                cosigned[name] += 1
            else:
                unchecked.add(name)
        if checkpoint.chain != chain:
            check.fail(*at, f"a checkpoint of chain {checkpoint.chain!r}, not the pack's {chain!r}")
            continue
        marks.append(checkpoint)
        check.verified.append((line, checkpoint))
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
        if checkpoint.refused is None:
            tied = size if tied is None else max(tied, size)
    summary["tied_through"] = tied
    summary["witnesses"] = {name: {"cosigned": n, "checked": True} for name, n in cosigned.items()}
    summary["unchecked_signatures"] = {"names": sorted(unchecked), "what": UNCHECKED} if unchecked else None
    summary["adoption"] = adoption_of(marks)
    return summary


def _cosigners(check: _Check, at: tuple[str, int], note: str, gateway: set[str], witnesses: Sequence[Verifier]) -> list[str]:
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


def _known(
    check: _Check, rows: list[_Row], keys: list[Verifier], chain: str, known: Sequence[Path], summary: dict[str, Any]
) -> dict[str, Any] | None:
    """Checkpoints the auditor holds from elsewhere (a witness's cosigned note, a checkpoint of an
    earlier pack), each opened with the gateway's keys: each must lie within the pack's rows and
    match them, and an adoption one of them carries must still be carried by the pack. Those that
    hold count as signed coverage."""
    if not known:
        return None
    positions = check.positions
    assert positions is not None
    report: dict[str, Any] = {"files": [str(p) for p in known], "held": 0, "other_chains": 0}
    theirs: list[Checkpoint] = []
    for path in known:
        attested = _read_known(check, path, keys)
        report["other_chains"] += sum(len(v) for name, v in attested.by_chain.items() if name != chain)
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
            report["held"] += 1
            if checkpoint.refused is None:
                through = summary["tied_through"]
                summary["tied_through"] = checkpoint.size if through is None else max(through, checkpoint.size)
    held, carried = adoption_of(theirs), summary.get("adoption")
    if held is not None and (carried is None or (carried.time, carried.size) < (held.time, held.size)):
        check.fail(
            CHECKPOINTS,
            None,
            f"a checkpoint you hold says the chain was {held.text()}; the pack's checkpoints do not say so",
        )
    if held is not None and (carried is None or (held.time, held.size) > (carried.time, carried.size)):
        summary["adoption"] = held
    return report


def _read_known(check: _Check, path: Path, keys: list[Verifier]) -> Attested:
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


def _claims(check: _Check, manifest: dict[str, Any], report: dict[str, Any], rows: list[_Row]) -> None:
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
    if counts.get("checkpoints") != report["checkpoints"]["notes"]:
        check.fail(
            MANIFEST,
            None,
            f"counts {counts.get('checkpoints')} checkpoints, {CHECKPOINTS} holds {report['checkpoints']['notes']}",
        )
    named = manifest.get("tied_to")
    if named is not None:
        verified = {(c.size, c.time) for _, c in check.verified}
        if not isinstance(named, dict) or (named.get("size"), named.get("time")) not in verified:
            check.fail(MANIFEST, None, f"ties the pack to a checkpoint ({named}) that is not among the pack's verified ones")
    if manifest.get("signing") == "none" and report["checkpoints"]["verified"]:
        check.fail(MANIFEST, None, "says the gateway signs no checkpoints, yet the pack holds signed ones")


def _tree(check: _Check, rows: list[_Row]) -> tuple[Range | None, str]:
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


def _policy(check: _Check, rows: list[dict[str, Any]]) -> None:
    listed = check.json(POLICY)
    if listed is None:
        return
    expected = json.loads(json.dumps(policy_revisions(rows), default=str))
    if not isinstance(listed, dict):
        check.fail(POLICY, None, "not an object")
        return
    have = {r.get("revision"): r for r in listed.get("revisions", []) if isinstance(r, dict)}
    for entry in expected["revisions"]:
        found = have.get(entry["revision"])
        if found is None:
            check.fail(POLICY, None, f"the period's rows name policy revision {entry['revision']!r}, which is not listed")
        elif found != entry:
            check.fail(POLICY, None, f"policy revision {entry['revision']!r}: listed as {found}, the rows give {entry}")
    for revision in sorted(set(have) - {e["revision"] for e in expected["revisions"]}, key=str):
        check.fail(POLICY, None, f"lists policy revision {revision!r}, which no row of the period names")
    if listed.get("reloads") != expected["reloads"]:
        check.fail(POLICY, None, "its policy reloads are not the period's policy_reload rows")


def _figures(check: _Check, rows: list[dict[str, Any]], since: datetime, until: datetime) -> None:
    from audit.review import figures_of

    listed = check.json(FIGURES)
    if listed is None:
        return
    expected = json.loads(json.dumps(figures_of(tally_rows(rows), since, until), default=str))
    where = _first_difference(listed, expected, "")
    if where is not None:
        check.fail(FIGURES, None, f"{where}: not what the period's rows give")


def _first_difference(have: Any, want: Any, path: str) -> str | None:
    if isinstance(have, dict) and isinstance(want, dict):
        for key in sorted(set(have) | set(want), key=str):
            found = _first_difference(have.get(key), want.get(key), f"{path}.{key}" if path else str(key))
            if found is not None:
                return found
        return None
    if isinstance(have, list) and isinstance(want, list) and len(have) == len(want):
        for i, (a, b) in enumerate(zip(have, want)):
            found = _first_difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    return None if have == want else f"{path or 'the figures'} is {json.dumps(have)}, the rows give {json.dumps(want)}"


def verdict(report: dict[str, Any]) -> str:
    """One line for people: the first problem, or what holds and what is not covered."""
    if not report["ok"]:
        first = report["first_problem"]
        where = first["file"] + (f" line {first['line']}" if first["line"] is not None else "")
        more = len(report["problems"]) - 1
        return f"FAILED: {where}: {first['what']}" + (f" (and {more} more problems)" if more else "")
    rows, checkpoints = report["rows"], report["checkpoints"]
    keys = "the given key" if report["keys"]["source"] == "given" else "the pack's own key (not one you got out of band)"
    tied = (
        f"{report['tied']} are under the checkpoint of row {checkpoints['tied_through']}, signed by {keys}"
        if checkpoints["tied_through"] is not None
        else "none is under a signed checkpoint"
    )
    parts = [
        f"OK: {rows['in_period']} rows of tenant {report['tenant']} from {report['period']['since']} to "
        f"{report['period']['until']} match their hashes and link",
        tied,
    ]
    if report["not_tied"]:
        parts.append(f"{report['not_tied']} rows are NOT covered by a signed checkpoint (accepted with --allow-uncovered)")
    if rows["hash_v1"]:
        parts.append(f"{rows['hash_v1']} rows carry hash version 1")
    known = report.get("known")
    parts.append("no checkpoint of yours was held against it" if known is None else f"{known['held']} of your checkpoints held")
    for name, seen in sorted(checkpoints["witnesses"].items()):
        parts.append(f"cosigned by {name} (key given) on {seen['cosigned']} of {checkpoints['verified']} checkpoints")
    if checkpoints["unchecked_signatures"]:
        parts.append(f"signatures by {', '.join(checkpoints['unchecked_signatures']['names'])} are {UNCHECKED}")
    if report["adopted"] is not None:
        parts.append(f"the chain was {report['adopted']['what']}")
    return "; ".join(parts) + "; figures and policy revisions recomputed"
