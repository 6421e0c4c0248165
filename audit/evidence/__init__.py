"""The evidence pack: one tenant's rows of a period written for an outside auditor, and its offline check."""

from audit.evidence.check import Trust, check_pack
from audit.evidence.documents import PackReport, PolicyRevisions, verdict
from audit.evidence.pack import (
    archive_chunks,
    gateway_version,
    in_period,
    pack_archive,
    policy_revisions,
    sha256_file,
    signing_of,
    write_pack,
)

__all__ = [
    "PackReport",
    "PolicyRevisions",
    "Trust",
    "archive_chunks",
    "check_pack",
    "gateway_version",
    "in_period",
    "pack_archive",
    "policy_revisions",
    "sha256_file",
    "signing_of",
    "verdict",
    "write_pack",
]
