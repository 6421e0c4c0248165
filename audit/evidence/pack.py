"""The evidence pack: one tenant's audit rows of a period, with what an outside auditor needs to
check them without access to the gateway (audit.evidence.check, `gateway audit verify-pack`).

A pack is a directory (or the same files in one zip, GET /v1/audit/evidence):

- `rows.jsonl`: the chain's rows from the period's first row to its last, oldest first, each with
  every column its hash covers (audit.chain.HASHED), `row_hash`, `seal` and `in_period` (false for
  a row written inside that span but dated outside the period: a call's time is when it started);
- `rows_before.jsonl`: the row just before (dated before the period), so that a row dropped from
  the start of the period shows; `rows_after.jsonl`: the rows after, up to the first signed
  checkpoint at or after the period's last row (at least the next row, when there is one), so the
  period ties to a signature and a row dropped from its end shows;
- `tree_before.json`: the compact range of the chain's Merkle tree (audit.integrity.merkle) before the pack's
  first row, from which the recipient recomputes each checkpoint's root from the pack's rows;
- `checkpoints.txt`: the signed checkpoint notes of the chain whose positions lie within the pack,
  with the cosignature a witness added (from the `.cosigned` file beside the checkpoint file), when
  one did; `public_keys/`: the keys
  the gateway signs with (the current one and those it replaced), as verifier keys and PEM;
- `policy_revisions.json`: the policy revisions the period's rows name, first and last seen, with
  their counts, and the period's policy reloads (`policy_revisions`);
- `figures.json`: the compliance overview's figures of the period (audit.review.overview);
- `manifest.json`: tenant, period, counts, the SHA-256 of every other file, the gateway version;
- `README.md`: for the recipient, what is in it, what it shows and what it cannot.

Nothing in a pack is item or query text: rows hold shapes, ids and hashes only (core.audit_tables).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import IO, Any

from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from sqlalchemy import func, select
from sqlalchemy.engine import Connection, Engine

from audit.chain import COLUMNS, StoredTrace, anchor_of, audit_trace, chain_of, hashed_content, row_hashes, utc_instant
from audit.evidence.documents import PolicyRevisions, ReloadSeen, RevisionSeen
from audit.evidence.layout import (
    CHECKPOINTS,
    FIGURES,
    FORMAT,
    KEYS,
    MANIFEST,
    POLICY,
    README,
    ROWS,
    ROWS_AFTER,
    ROWS_BEFORE,
    TREE,
)
from audit.evidence.readme import write_readme
from audit.integrity import (
    Attested,
    Checkpoint,
    Checkpointer,
    CheckpointLog,
    Range,
    Verifier,
    cosigned_log,
    cut_of,
    instant_of,
    leaf_hash,
    read_checkpoints,
    signed_since,
    verifier_key,
)
from audit.review import Figures
from core.audit_facts import RETRIEVAL, tally_rows
from core.errors import BadRequest, Conflict
from core.instants import rfc3339, to_utc

log = logging.getLogger("gateway.audit.evidence")
RELOAD = "policy_reload"  # the endpoint of a policy reload's own row (and of POST /v1/policy/reload)


@dataclass(frozen=True, slots=True)
class Signing:
    """What the gateway signs with: its checkpoint file and the keys that verify it (the signing
    key's, then the keys it replaced)."""

    log: CheckpointLog
    verifiers: Sequence[Verifier]


def signing_of(
    checkpointer: Checkpointer | None, catch_up: bool = False, ending: tuple[str, datetime] | None = None
) -> Signing | None:
    """What a gateway's checkpointer signs with (None: the gateway signs no checkpoints). With
    `catch_up`, it first signs the rows written since its last checkpoint, so a pack of a period
    that reaches now is covered (a pack's rows under no checkpoint fail verify-pack by default);
    a chain it refuses stays uncovered, and says so in the pack. `ending` (a pack's chain and the
    end of its period): when the period has ended and the chain's last checkpoint is older than
    its end, the chain is signed again now, grown or not, so the pack holds a checkpoint signed
    after its period and proves that no row of the period was left out at its end. `ending` names
    the chain by its tenant."""
    if checkpointer is None:
        return None
    restate: list[str] = []
    if ending is not None:
        chain, until = chain_of(ending[0]), ending[1]
        last = checkpointer.signed_at(chain)
        signed = instant_of(last) if last is not None else None
        if until <= datetime.now(timezone.utc) and (signed is None or signed < until):
            restate.append(chain)
    if catch_up:
        try:
            checkpointer.checkpoint(every_chain=True, restate=restate)
        except Exception as exc:  # noqa: BLE001 - the pack is still written; its rows past the last checkpoint say so
            log.error("audit checkpoint before an evidence pack failed: %s", type(exc).__name__)
    return Signing(checkpointer.log, tuple(checkpointer.verifiers))


def gateway_version() -> str:
    try:
        return version("governed-gateway")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


ARCHIVE_CHUNK = 64 * 1024
READ_ATTEMPTS = 5  # reads of rows and figures before a pack whose two never agree is refused


def pack_archive(
    engine: Engine, tenant: str, since: datetime, until: datetime, signing: Signing | None, created: datetime
) -> tuple[dict[str, Any], IO[bytes]]:
    """The pack as one zip (its files at the top level), built in a temporary directory and spooled
    to a temporary file (in memory up to 8 MiB); with its manifest. The caller streams and closes it
    (`archive_chunks`)."""
    directory = Path(tempfile.mkdtemp(prefix="gateway-evidence-"))
    try:
        manifest = write_pack(engine, tenant, since, until, directory / "pack", signing, gateway_version(), created)
        archive: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=8 << 20)  # noqa: SIM115 - closed by archive_chunks
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as bundle:
            for path in sorted((directory / "pack").rglob("*")):
                if path.is_file():
                    bundle.write(path, str(path.relative_to(directory / "pack")).replace(os.sep, "/"))
        archive.seek(0)
        return manifest, archive
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def archive_chunks(archive: IO[bytes]) -> Iterator[bytes]:
    try:
        while block := archive.read(ARCHIVE_CHUNK):
            yield block
    finally:
        archive.close()


def in_period(created_at: datetime, since: datetime, until: datetime) -> bool:
    return since <= _aware(created_at) < until


def _aware(value: datetime) -> datetime:
    return to_utc(value)


def pack_line(row: StoredTrace, since: datetime, until: datetime) -> str:
    """One row as a pack holds it: every column of the StoredTrace, the hash's and the seal too
    (instants as the hash writes them), and whether it is dated in the period; one JSON line."""
    line = {**hashed_content(row, COLUMNS), "in_period": in_period(row.created_at, since, until)}
    return json.dumps(line, sort_keys=True, ensure_ascii=False, default=str) + "\n"


def policy_revisions(rows: Iterable[StoredTrace]) -> PolicyRevisions:
    """The policy revisions the rows name (in the order first seen), with when each was first and
    last seen and how many rows and retrieval calls name it, and the policy reload rows. `rows`:
    the period's rows, oldest first."""
    revisions: dict[str | None, RevisionSeen] = {}
    reloads: list[ReloadSeen] = []
    for m in rows:
        revision, at = m.policy_revision, utc_instant(m.created_at)  # as the hash writes it
        entry = revisions.setdefault(revision, {"revision": revision, "first_seen": at, "last_seen": at, "rows": 0, "calls": 0})
        entry["first_seen"] = min(entry["first_seen"], at)
        entry["last_seen"] = max(entry["last_seen"], at)
        entry["rows"] += 1
        entry["calls"] += 1 if m.endpoint == RETRIEVAL else 0
        if m.endpoint == RELOAD:
            lineage = m.lineage
            reloads.append(
                {
                    "seq": m.seq,
                    "trace_id": m.trace_id,
                    "created_at": at,
                    "status_code": m.status_code,
                    "policy_revision": revision,
                    "policy_reload": lineage.get("policy_reload") if isinstance(lineage, dict) else None,
                }
            )
    return {"revisions": list(revisions.values()), "reloads": reloads}


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def _period_span(conn: Connection, chain: str, since: datetime, until: datetime) -> tuple[int, int, int]:
    """(first, last, rows) of the period: the lowest and highest position dated inside it; for an
    empty period, first is the position after the last row dated before it, last the one before that."""
    low, high, count = conn.execute(
        select(func.min(audit_trace.c.seq), func.max(audit_trace.c.seq), func.count()).where(
            audit_trace.c.chain == chain, audit_trace.c.created_at >= since, audit_trace.c.created_at < until
        )
    ).one()
    if low is not None:
        return int(low), int(high), int(count)
    before = conn.execute(
        select(func.max(audit_trace.c.seq)).where(audit_trace.c.chain == chain, audit_trace.c.created_at < since)
    ).scalar_one()
    first = int(before or 0) + 1
    return first, first - 1, 0


def _rows(conn: Connection, chain: str, first: int, last: int) -> list[StoredTrace]:
    statement = (
        select(audit_trace)
        .where(audit_trace.c.chain == chain, audit_trace.c.seq >= first, audit_trace.c.seq <= last)
        .order_by(audit_trace.c.seq)
    )
    return [StoredTrace.of(r._mapping) for r in conn.execute(statement)]


def _tree_before(conn: Connection, chain: str, size: int, checkpoints: list[Checkpoint]) -> dict[str, Any]:
    """The compact range of the chain's Merkle tree of positions 1..size, from the row hashes (or,
    in a pruned chain, from the range its signed prune kept)."""
    oldest = anchor_of(conn, chain)
    if oldest > 1:
        cut = cut_of(checkpoints, oldest)
        if cut is None:
            return {"size": size, "nodes": None, "why": "the chain was pruned before Merkle trees: no range of what went"}
        tree = Range(cut.size, list(cut.nodes))
    else:
        tree = Range()
    if size < tree.size:
        return {"size": size, "nodes": None, "why": "these positions were pruned"}
    tree.extend(leaf_hash(h) for h in row_hashes(conn, chain, tree.size + 1, size))
    if tree.size != size:
        return {"size": size, "nodes": None, "why": "rows of the chain before the pack are missing from the store"}
    return {"size": size, "nodes": [h.hex() for h in tree.hashes()]}


def _write_json(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str) + "\n", encoding="utf-8")


def _write_rows(path: Path, rows: Iterable[StoredTrace], since: datetime, until: datetime) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(pack_line(row, since, until))


def _key_files(directory: Path, verifiers: Sequence[Verifier]) -> list[str]:
    directory.mkdir()
    written = []
    for verifier in verifiers:
        stem = f"{verifier.name}-{verifier.id.hex()}"
        (directory / f"{stem}.vkey").write_text(verifier_key(verifier.name, verifier.public) + "\n", encoding="utf-8")
        (directory / f"{stem}.pub.pem").write_bytes(verifier.public.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
        written.append(f"{KEYS}/{stem}.vkey")
    return written


def write_pack(
    engine: Engine,
    tenant: str,
    since: datetime,
    until: datetime,
    out: Path,
    signing: Signing | None,
    version: str,
    created: datetime,
    reach: Sequence[int] = (),
) -> dict[str, Any]:
    """Write the evidence pack of `tenant`'s chain over [since, until) into `out` (an empty or new
    directory); returns its manifest. BadRequest when the period is empty of time or `out` is not
    empty. `reach`: positions the pack must hold (the sizes of checkpoints the auditor already
    has, `--known`), so verify-pack can hold those checkpoints against its rows."""
    if until <= since:
        raise BadRequest("until: must come after since")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadRequest(f"--out: {out} is not an empty directory; choose a new or empty one")
    out.mkdir(parents=True, exist_ok=True)
    chain = chain_of(tenant)
    # The checkpoints first: every position they name is in the store when the rows are read after.
    attested = read_checkpoints(signing.log.path, list(signing.verifiers), chain) if signing is not None else Attested("")
    notes = dict(signing.log.notes()) if signing is not None else {}
    if signing is not None:  # a note a witness cosigned goes into the pack with its cosignature
        cosigned = {note.partition("\n\n")[0]: note for _, note in cosigned_log(signing.log).notes()}
        notes = {line: cosigned.get(note.partition("\n\n")[0], note) for line, note in notes.items()}
    checkpoints = attested.by_chain.get(chain, [])
    read = _read_period(engine, tenant, since, until, checkpoints, reach)
    rows, first, last, start, end = read.rows, read.first, read.last, read.start, read.end
    before = [m for m in rows if m.position < first]
    period = [m for m in rows if first <= m.position <= last]
    after = [m for m in rows if m.position > last]
    bearing = sorted(
        (
            c
            for c in checkpoints
            if rows and (start - 1 <= c.size <= end or (c.refused is not None and start <= c.refused[0] <= end))
        ),
        key=lambda c: c.line,
    )
    _write_rows(out / ROWS_BEFORE, before, since, until)
    _write_rows(out / ROWS, period, since, until)
    _write_rows(out / ROWS_AFTER, after, since, until)
    _write_json(out / TREE, read.tree)
    (out / CHECKPOINTS).write_text("".join(notes[c.line] + "\n" for c in bearing), encoding="utf-8")
    keys = _key_files(out / KEYS, signing.verifiers if signing is not None else ())
    _write_json(out / POLICY, policy_revisions(read.inside))
    _write_json(out / FIGURES, read.overview.wire())
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "tenant": tenant,
        "chain": chain,
        "period": {"since": rfc3339(since), "until": rfc3339(until)},
        "created_at": rfc3339(created),
        "gateway_version": version,
        "positions": {
            "first": start if rows else None,
            "last": end if rows else None,
            "period": [first, last] if read.counted else None,
        },
        "counts": _counts(read, (before, period, after), bearing, signing is not None),
        "tied_to": _tied_to(read.covering, end),
        "signing": "checkpoints" if signing is not None else "none",
        "public_keys": keys,
        "left_out_notes": [line for line, _ in attested.problems],
    }
    write_readme(out / README, manifest, read.tree)
    manifest["files"] = {
        name: sha256_file(out / name)
        for name in sorted(
            str(p.relative_to(out)).replace(os.sep, "/") for p in out.rglob("*") if p.is_file() and p.name != MANIFEST
        )
    }
    _write_json(out / MANIFEST, manifest)
    return manifest


@dataclass(frozen=True, slots=True)
class _Period:
    """What a pack holds of its chain, read so the rows and the rollup's figures agree."""

    first: int  # the period's first and last positions (`counted` rows dated in it)
    last: int
    counted: int
    start: int  # the positions the pack holds: from the row before the period
    end: int  # to the first checkpoint at or after its last row (or the positions `reach` asks for)
    covering: Checkpoint | None  # that checkpoint
    rows: list[StoredTrace]
    tree: dict[str, Any]  # the Merkle tree before `start`
    overview: Figures  # the period's figures, from the rollup
    inside: list[StoredTrace]  # the rows of the period dated in it


def _read_period(
    engine: Engine, tenant: str, since: datetime, until: datetime, checkpoints: list[Checkpoint], reach: Sequence[int]
) -> _Period:
    """The figures come from the rollup and the rows from the chain, in two reads: a row appended in
    between (a period that reaches now) would make them disagree, and the pack fail its own check.
    Read again until they agree; a rollup that never agrees with its rows has been edited."""
    from audit.review import figures, figures_of

    chain = chain_of(tenant)
    for _ in range(READ_ATTEMPTS):
        with engine.connect() as conn:
            first, last, counted = _period_span(conn, chain, since, until)
            oldest = anchor_of(conn, chain)
            head = int(conn.execute(select(func.max(audit_trace.c.seq)).where(audit_trace.c.chain == chain)).scalar_one() or 0)
            start = max(min([first - 1, *(size for size in reach if size >= 1)]), oldest, 1)  # the row before the period
            # The first checkpoint at or after the period's last row (after the row past it, for an empty one).
            target = max(last if counted else last + 1, start)
            # Of those, one signed at or after the period's end when there is one: it shows the period's end.
            eligible = [c for c in checkpoints if c.size >= target]
            ending = [c for c in eligible if c.refused is None and signed_since(c, until)]
            covering = min(ending or eligible, key=_order, default=None)
            end = min(head, max(last + 1, covering.size if covering is not None else 0, *reach))
            rows = _rows(conn, chain, start, end) if end >= start else []
            tree = _tree_before(conn, chain, start - 1, checkpoints) if rows else {"size": 0, "nodes": []}
        overview = figures(engine, tenant, since, until)
        inside = [m for m in rows if first <= m.position <= last and in_period(m.created_at, since, until)]
        if overview == figures_of(tally_rows(m.as_dict() for m in inside), since, until):
            return _Period(first, last, counted, start, end, covering, rows, tree, overview, inside)
    raise Conflict(
        "the overview's rollup does not agree with the period's rows: run `gateway audit verify` "
        "(an edited rollup is a break), or, for a period still being written, choose an until in the past"
    )


def _counts(
    read: _Period,
    files: tuple[list[StoredTrace], list[StoredTrace], list[StoredTrace]],
    bearing: list[Checkpoint],
    signs: bool,
) -> dict[str, Any]:
    """The manifest's counts: rows by file, checkpoints, policy revisions, and the period's rows past
    the last checkpoint that ties them (all of them without signing)."""
    before, period, after = files
    through = max((c.size for c in bearing if c.refused is None and c.size <= read.end), default=0)
    untied = sum(1 for m in read.inside if m.position > through)
    return {
        "rows_in_period": read.counted,
        "rows": len(period),
        "rows_before": len(before),
        "rows_after": len(after),
        "checkpoints": len(bearing),
        "policy_revisions": len(policy_revisions(read.inside)["revisions"]),
        "not_tied": untied if signs else read.counted,
    }


def _tied_to(covering: Checkpoint | None, end: int) -> dict[str, Any] | None:
    tied = covering if covering is not None and covering.size <= end and covering.refused is None else None
    return None if tied is None else {"size": tied.size, "time": tied.time}


def _order(c: Checkpoint) -> tuple[int, str, int]:
    return (c.size, c.time, c.line)
