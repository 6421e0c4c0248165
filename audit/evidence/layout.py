"""The files of an evidence pack: the format's name and the name of each file."""

from __future__ import annotations

FORMAT = "gateway.audit.evidence/1"
ROWS, ROWS_BEFORE, ROWS_AFTER = "rows.jsonl", "rows_before.jsonl", "rows_after.jsonl"
TREE, CHECKPOINTS, POLICY, FIGURES = "tree_before.json", "checkpoints.txt", "policy_revisions.json", "figures.json"
MANIFEST, README, KEYS = "manifest.json", "README.md", "public_keys"
