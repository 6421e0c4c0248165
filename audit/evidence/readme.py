"""The README of an evidence pack: what it holds, how to check it, what it shows and cannot show."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import audit.evidence.layout as layout
from audit.evidence.layout import CHECKPOINTS, TREE

TEXT = """# Audit evidence pack

Tenant `{tenant}`, the audit rows dated from {since} (included) to
{until} (excluded): {rows_in_period} rows. Made {created_at} by the
governed retrieval gateway {gateway_version}. Chain positions
{first} to {last} are in the pack.

## Check it

With the gateway's public key as you received it from the operator (out of band: not from this pack):

```sh
gateway audit verify-pack DIR --public-key audit-signing.pub.pem [--known NOTE] [--witness-key VKEY]
```

Without `--public-key`, the keys in `{files.KEYS}/` are used, which shows only that the pack is consistent
with itself: whoever made the pack could have made those keys too. `--known` holds checkpoints you
got elsewhere (a witness's cosigned note, one from an earlier pack) against the pack's rows: that is
what shows a history re-signed by whoever holds the key. `--witness-key` checks a witness's
cosignatures; without it they are reported as not checked. It needs no database and no network, and
exits 1 naming the file and line of the first problem.

## Files

- `{files.ROWS}`: the rows of the period, oldest first, one JSON object a line: every column the row's
  hash covers, `row_hash`, `seal` (an HMAC under the gateway's key; not checkable without it) and
  `in_period` (false for a row written between two rows of the period but dated outside it).
- `{files.ROWS_BEFORE}`: the row before the period's first one, dated before the period.
- `{files.ROWS_AFTER}`: the rows after the period's last one, up to the first checkpoint signed at or
  after the period's end (or, without one, the first at or after its last row).
- `{files.TREE}`: the Merkle tree (RFC 6962) of the chain before the pack's first row, as its compact range.
- `{files.CHECKPOINTS}`: the gateway's signed checkpoints (C2SP signed notes) whose positions lie in the pack.
- `{files.KEYS}/`: the keys the gateway signs checkpoints with, as verifier keys and PEM.
- `{files.POLICY}`: the policy revisions the period's rows name (first and last seen, rows, retrieval
  calls) and the period's policy reloads.
- `{files.FIGURES}`: the compliance overview's figures of the period, recomputable from `{files.ROWS}`.
- `{files.MANIFEST}`: tenant, period, counts and the SHA-256 of every other file.

No file holds item text or query text: audit rows hold ids, shapes, counts and hashes only.

## What it shows

- Every row's content gives its hash (SHA-256 of its canonical JSON), each row links to the one
  before, and positions are consecutive: an edited, deleted or reordered row fails.
- {tie}
- {merkle}
- The row before the period is dated before it, so a row dropped at its start shows; a checkpoint
  signed at or after the period's end names every row written by then, so a row dropped at its end
  shows (without one, the check says the end is NOT covered and fails unless you pass
  `--allow-uncovered`).
- `{files.FIGURES}` and `{files.POLICY}` are what the period's rows give: the check recomputes both.

## What it cannot show

- Rows of the period past the last checkpoint in the pack are not signed: {not_tied} here
  (the check fails on them unless you pass `--allow-uncovered`).
- The seal of each row needs the gateway's key: only the gateway's own verify checks it.
- A call is dated when it started and written when it ended, so the positions of calls that ran at
  the same time need not follow their times; the period is taken from the first to the last position
  dated in it, and a row dated in the period but written before the row before it would not be in
  the pack.
- The manifest is not signed: its digests catch a damaged file, the checkpoints an altered row.
- A history rewritten and re-signed by whoever holds the signing key: only checkpoints held outside
  the gateway show it (`--known` with a witness's notes, or ones you kept).
"""


def write_readme(path: Path, manifest: dict[str, Any], tree: dict[str, Any]) -> None:
    counts, period, positions = manifest["counts"], manifest["period"], manifest["positions"]
    text = TEXT.format(
        files=layout,
        tenant=manifest["tenant"],
        since=period["since"],
        until=period["until"],
        rows_in_period=counts["rows_in_period"],
        created_at=manifest["created_at"],
        gateway_version=manifest["gateway_version"],
        first=positions["first"],
        last=positions["last"],
        not_tied=counts["not_tied"],
        tie=_tie(manifest),
        merkle=_merkle(tree),
    )
    path.write_text(text, encoding="utf-8")


def _tie(manifest: dict[str, Any]) -> str:
    """What ties the rows to a signature: nothing, the checkpoint that covers them, or no checkpoint yet."""
    tied = manifest["tied_to"]
    if manifest["signing"] == "none":
        return (
            "This gateway signs no checkpoints (GATEWAY_AUDIT_SIGNING_KEY is not set): the rows can be checked "
            "against each other (content, hashes, links), but nothing ties them to a signature, so whoever could "
            "write the database could have rewritten them consistently."
        )
    if tied is not None:
        return (
            f"The rows are tied to the checkpoint of {tied['size']} rows signed {tied['time']} (in `{CHECKPOINTS}`): "
            "its head hash is the hash of that row of the pack, and each row links to the one before, so every "
            "row of the pack up to it is the one the gateway signed."
        )
    return (
        "No signed checkpoint covers the period's last row (the signer refused the chain, or could not "
        "sign when the pack was made): rows after the newest checkpoint in this pack are checked for content, "
        "hashes and links only, never as signed, and fail the check unless you pass --allow-uncovered."
    )


def _merkle(tree: dict[str, Any]) -> str:
    if tree.get("nodes") is not None:
        return (
            f"`{TREE}` holds the compact range of the chain's Merkle tree before the pack's first row, from which "
            "each checkpoint's Merkle root is recomputed from the pack's rows."
        )
    return (
        f"The chain's Merkle tree before the pack cannot be given ({tree.get('why')}): checkpoints are held "
        "to by their head hash only."
    )
