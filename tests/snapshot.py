"""Byte-for-byte snapshots: what the code serves today, committed under tests/snapshots/, that a change
must keep unless it means to change it. A changed output fails showing where the bytes first
differ; to accept one on purpose, rerun the failing test with UPDATE_SNAPSHOTS=1, which rewrites the
file, and commit the new file with the change that made it (the diff is the review)."""

from __future__ import annotations

import os
from pathlib import Path

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
UPDATE = "UPDATE_SNAPSHOTS"


def assert_snapshot(name: str, served: bytes) -> None:
    path = SNAPSHOTS / name
    if os.environ.get(UPDATE) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(served)
        return
    assert path.exists(), f"no snapshot {path}: write it with {UPDATE}=1 and commit it"
    kept = path.read_bytes()
    if served == kept:
        return
    at = next((i for i, (a, b) in enumerate(zip(kept, served)) if a != b), min(len(kept), len(served)))
    line = kept.count(b"\n", 0, at) + 1
    window = slice(max(0, at - 120), at + 120)
    shown = f"first difference at byte {at} (line {line}):\n  committed: {kept[window]!r}\n  served:    {served[window]!r}"
    raise AssertionError(
        f"the output differs from tests/snapshots/{name}, byte for byte. If the change is meant, regenerate it on "
        f"purpose with `{UPDATE}=1 .venv/bin/python -m pytest -q -p no:randomly <this test>` and commit the new file "
        f"with the change that made it.\n{shown}"
    )
