"""The evidence room's typed values: the policy revisions a pack lists (a JSON document of the pack),
and the report of a pack's check, its verdict, as `gateway audit verify-pack` prints it.

The report's values read from the pack's manifest (tenant, period, ...) are kept as the manifest has
them: a pack is checked whatever it holds, and says what is wrong with it instead of failing."""

from __future__ import annotations

from typing import Any, TypedDict

from api.audit import Adoption
from api.wire import Wire

UNCHECKED = "NOT CHECKED: no key was given for them, so they prove nothing (pass the witness's key with --witness-key)"


class RevisionSeen(TypedDict):
    """A policy revision the period's rows name: when first and last seen (instants as the hash
    writes them), how many rows and retrieval calls name it."""

    revision: str | None
    first_seen: str
    last_seen: str
    rows: int
    calls: int


class ReloadSeen(TypedDict):
    """A policy reload's own row of the period."""

    seq: int | None
    trace_id: str
    created_at: str
    status_code: int
    policy_revision: str | None
    policy_reload: Any  # its lineage's `policy_reload` part, as stored


class PolicyRevisions(TypedDict):
    """policy_revisions.json: the revisions in the order first seen, and the period's reloads."""

    revisions: list[RevisionSeen]
    reloads: list[ReloadSeen]


class Problem(Wire):
    """What is wrong with a pack: the file, the line when there is one, what."""

    file: str
    line: int | None
    what: str


class KeysUsed(Wire):
    """The gateway's keys the pack was checked with: those the auditor gave, or the pack's own (and
    what that proves)."""

    source: str
    count: int
    note: str | None = None


class RowsRead(Wire):
    """The pack's rows: of the period (dated in it, and written between its rows but dated outside),
    before and after it, and how many carry hash version 1."""

    in_period: int
    between: int
    before: int
    after: int
    hash_v1: int


class WitnessSeen(Wire):
    cosigned: int
    checked: bool


class Unchecked(Wire):
    """Signature lines by witnesses whose key was not given."""

    names: list[str]
    what: str


class CheckpointsHeld(Wire):
    """The pack's checkpoint notes held to its rows: how many, how many verify, the last position a
    checkpoint the rows match ties (the auditor's own included), what the tree before the pack
    allows, the witnesses' cosignatures."""

    notes: int
    verified: int
    tied_through: int | None
    merkle: str
    witnesses: dict[str, WitnessSeen]
    unchecked_signatures: Unchecked | None


class KnownHeld(Wire):
    """The checkpoints the auditor holds from elsewhere (`--known`): the files, how many held."""

    files: list[str]
    held: int
    other_chains: int


class PackReport(Wire):
    """A pack's check (audit.evidence.check), its verdict: `ok`, what was checked and what could not
    be, and every problem (the first as `first_problem`). A pack whose manifest cannot be read says
    only that: the fields after `pack` are left out."""

    ok: bool
    pack: str
    tenant: Any = None  # as the manifest names it
    chain: str | None = None
    period: dict[str, Any] | None = None  # as the manifest gives it
    created_at: Any = None
    gateway_version: Any = None
    keys: KeysUsed | None = None
    rows: RowsRead | None = None
    checkpoints: CheckpointsHeld | None = None
    known: KnownHeld | None = None
    tied: int | None = None
    not_tied: int | None = None
    allow_uncovered: bool | None = None
    end_covered: bool | None = None
    adopted: Adoption | None = None
    policy_revisions: int | None = None
    problems: list[Problem]
    first_problem: Problem | None


def verdict(report: PackReport) -> str:
    """One line for people: the first problem, or what holds and what is not covered."""
    first = report.first_problem
    if not report.ok and first is not None:
        where = first.file + (f" line {first.line}" if first.line is not None else "")
        more = len(report.problems) - 1
        return f"FAILED: {where}: {first.what}" + (f" (and {more} more problems)" if more else "")
    rows, checkpoints, keys_used, period = report.rows, report.checkpoints, report.keys, report.period
    assert rows is not None and checkpoints is not None and keys_used is not None and period is not None  # read: it is ok
    keys = "the given key" if keys_used.source == "given" else "the pack's own key (not one you got out of band)"
    tied = (
        f"{report.tied} are under the checkpoint of row {checkpoints.tied_through}, signed by {keys}"
        if checkpoints.tied_through is not None
        else "none is under a signed checkpoint"
    )
    parts = [
        f"OK: {rows.in_period} rows of tenant {report.tenant} from {period['since']} to {period['until']} "
        "match their hashes and link",
        tied,
    ]
    if report.not_tied:
        parts.append(f"{report.not_tied} rows are NOT covered by a signed checkpoint (accepted with --allow-uncovered)")
    if report.end_covered is False:
        parts.append("the period's end is NOT covered by a checkpoint signed after it (accepted with --allow-uncovered)")
    if rows.hash_v1:
        parts.append(f"{rows.hash_v1} rows carry hash version 1")
    known = report.known
    parts.append("no checkpoint of yours was held against it" if known is None else f"{known.held} of your checkpoints held")
    for name, seen in sorted(checkpoints.witnesses.items()):
        parts.append(f"cosigned by {name} (key given) on {seen.cosigned} of {checkpoints.verified} checkpoints")
    if checkpoints.unchecked_signatures:
        parts.append(f"signatures by {', '.join(checkpoints.unchecked_signatures.names)} are {UNCHECKED}")
    if report.adopted is not None:
        parts.append(f"the chain was {report.adopted.what}")
    return "; ".join(parts) + "; figures and policy revisions recomputed"
