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
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from audit.chain import HASHED, StoredTrace, derived, row_hash, row_hash_v1
from audit.evidence.documents import KeysUsed, PackReport, RowsRead
from audit.evidence.findings import PackCheck, PackRow
from audit.evidence.layout import CHECKPOINTS, FIGURES, FORMAT, KEYS, MANIFEST, POLICY, ROWS, ROWS_AFTER, ROWS_BEFORE
from audit.evidence.pack import in_period, policy_revisions, sha256_file
from audit.evidence.signed import known_checkpoints, manifest_claims, signed_checkpoints
from audit.integrity import NoteError, Verifier, adoption_report, parse_verifier_key, signed_since
from core.audit_facts import tally_rows
from core.errors import ConfigurationError
from core.instants import parse_rfc3339, rfc3339

PACK_KEYS = (
    "the pack's own public keys: this shows the pack is consistent with itself, not that the gateway signed it "
    "(whoever made the pack could have made the keys); pass the key you received from the operator with --public-key"
)


def pack_verifiers(directory: Path) -> list[Verifier]:
    """The verifier keys shipped in a pack (`public_keys/*.vkey`)."""
    found = []
    for path in sorted((directory / KEYS).glob("*.vkey")):
        try:
            found.append(Verifier(*parse_verifier_key(path.read_text(encoding="utf-8"))))
        except (OSError, UnicodeDecodeError, NoteError) as exc:
            raise ConfigurationError(f"{KEYS}/{path.name}: not a verifier key ({exc})") from exc
    return found


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


def check_pack(directory: Path, verifiers: Sequence[Verifier] | None = None, trust: Trust | None = None) -> PackReport:
    """The report of one pack: `ok`, what was checked and what could not be, and every problem
    (`problems`, the first as `first_problem`). `verifiers`: the gateway's keys as the auditor got
    them; None uses the pack's own (and the report says what that proves). `trust`: the rest of
    what the auditor holds (`Trust`)."""
    trust = trust or Trust(verifiers)
    verifiers = trust.verifiers if verifiers is None else verifiers
    check = PackCheck(directory)
    manifest = check.json(MANIFEST)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        if isinstance(manifest, dict):
            check.fail(MANIFEST, None, f"not an evidence pack manifest ({FORMAT})")
        return _report(check)
    try:
        since = parse_rfc3339(manifest["period"]["since"])
        until = parse_rfc3339(manifest["period"]["until"])
        chain, tenant = str(manifest["chain"]), manifest["tenant"]
    except (KeyError, TypeError, ValueError) as exc:
        check.fail(MANIFEST, None, f"no readable tenant, chain and period ({type(exc).__name__})")
        return _report(check)
    _digests(check, manifest)

    keys, used = _keys(check, verifiers)
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
    read = RowsRead(in_period=len(inside), between=len(period) - len(inside), before=len(before), after=len(after), hash_v1=v1)

    signatures = signed_checkpoints(check, rows, keys, chain, trust.witnesses)
    known = known_checkpoints(check, rows, keys, chain, trust.known, signatures)
    through = signatures.tied_through
    tied = sum(1 for r in inside if through is not None and int(r.data["seq"]) <= through)
    not_tied = len(inside) - tied
    if not_tied and not trust.allow_uncovered:
        untied = next(r for r in inside if through is None or int(r.data["seq"]) > through)
        check.fail(
            untied.file,
            untied.line,
            f"{not_tied} of the period's {len(inside)} rows, from row {untied.data['seq']}, are under no signed "
            f"checkpoint in the pack: nothing signed shows they are the rows that were written; {NOT_COVERED}",
        )
    # The end: a checkpoint signed at or after the period's end, which the rows match, says how many
    # rows the chain had by then; the pack must hold them all (a checkpoint past its rows fails above),
    # so a pack cut at a checkpoint boundary inside the period cannot hold one.
    ended = [c for c in check.held if c.refused is None and signed_since(c, until)]
    if not ended and not trust.allow_uncovered:
        check.fail(
            CHECKPOINTS,
            None,
            f"the period's end is NOT covered: no checkpoint the rows match was signed at or after {rfc3339(until)}, so "
            "nothing signed shows that no row was dropped from its end (export a period that has ended, or hold a later "
            f"note with --known); {NOT_COVERED}",
        )
    manifest_claims(check, manifest, signatures, rows)

    stored = [r.stored() for r in inside]
    _policy(check, stored)
    revisions = len(policy_revisions(stored)["revisions"])
    _figures(check, stored, since, until)
    return _report(
        check,
        tenant=tenant,
        chain=chain,
        period=manifest["period"],
        created_at=manifest.get("created_at"),
        gateway_version=manifest.get("gateway_version"),
        keys=used,
        rows=read,
        checkpoints=signatures.report(),
        known=known,
        tied=tied,
        not_tied=not_tied,
        allow_uncovered=trust.allow_uncovered,
        end_covered=bool(ended),
        adopted=adoption_report(signatures.adoption) if signatures.adoption is not None else None,
        policy_revisions=revisions,
    )


def _keys(check: PackCheck, verifiers: Sequence[Verifier] | None) -> tuple[list[Verifier], KeysUsed]:
    """The gateway's keys the pack is checked with: those given, or the pack's own (said in the report)."""
    if verifiers is not None:
        return list(verifiers), KeysUsed(source="given", count=len(verifiers))
    try:
        keys = pack_verifiers(check.directory)
    except ConfigurationError as exc:
        check.fail(KEYS, None, exc.message)
        keys = []
    return keys, KeysUsed(source="pack", count=len(keys), note=PACK_KEYS)


def _report(check: PackCheck, **read: Any) -> PackReport:
    """The verdict: what was read (none of it, for a pack whose manifest cannot be read), and every problem."""
    problems = check.problems
    return PackReport(
        ok=not problems, pack=str(check.directory), **read, problems=problems, first_problem=problems[0] if problems else None
    )


def _digests(check: PackCheck, manifest: dict[str, Any]) -> None:
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


def _read_rows(check: PackCheck, name: str) -> list[PackRow]:
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
        rows.append(PackRow(name, number, data, created))
    return rows


def _chain(check: PackCheck, rows: list[PackRow], chain: str, tenant: Any, since: datetime, until: datetime) -> int:
    """Each row's hash, review columns, link, position, chain and period flag; the number of rows
    accepted under hash version 1."""
    previous: PackRow | None = None
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


def _policy(check: PackCheck, rows: list[StoredTrace]) -> None:
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


def _figures(check: PackCheck, rows: list[StoredTrace], since: datetime, until: datetime) -> None:
    from audit.review import figures_of

    listed = check.json(FIGURES)
    if listed is None:
        return
    expected = figures_of(tally_rows(r.as_dict() for r in rows), since, until).wire()
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
