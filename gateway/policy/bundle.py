"""Reads a policies directory as OPA would read a bundle: Rego modules plus data.json documents."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from core.errors import ConfigurationError
from gateway.policy.archive import MAX_ARCHIVE_BYTES, MAX_ARCHIVE_FILES, read_bundle_file, unpack
from gateway.policy.signatures import SIGNATURES, VerificationKey, sign_files, verify_files


@dataclass(frozen=True, slots=True)
class PolicyBundle:
    root: Path
    modules: tuple[tuple[str, str], ...]  # (relative path, source), tests excluded
    tests: tuple[tuple[str, str], ...]
    data: dict[str, Any]
    revision: str  # "sha256:..." of the modules and data read: what decides, whatever a manifest says
    label: str = ""  # an OPA bundle's `.manifest` revision, shown beside it; never the revision itself


def _mount(data: dict[str, Any], parts: tuple[str, ...], document: Any) -> None:
    node = data
    for part in parts:
        node = node.setdefault(part, {})
    if not isinstance(document, dict):
        raise ConfigurationError(f"{'/'.join(parts) or '.'}/data.json: the document must be a JSON object")
    node.update(document)


ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")
# What is read: modules and JSON, and YAML data only to refuse it (OPA reads data.yaml as data; the
# gateway does not, and a document one engine sees and the other does not would split decisions).
READ_SUFFIXES = frozenset({".rego", ".json", ".yaml", ".yml"})
YAML_DATA = frozenset({"data.yaml", "data.yml"})
# MAX_ARCHIVE_BYTES (unpacked, all files together) and MAX_ARCHIVE_FILES (members, counted as the
# tar is scanned, before any is parsed) live in gateway/policy/archive.py, with the other limits.
MANIFEST = ".manifest"
MAX_LABEL = 128  # characters of a manifest revision


def read_bundle(root: Path, key: VerificationKey | None = None) -> PolicyBundle:
    """A policies directory (every .rego and data.json under it; the revision is a hash of their
    contents) or an OPA bundle file (`.tar.gz`, see `read_archive`)."""
    if root.name.endswith(ARCHIVE_SUFFIXES) and root.is_file():
        return read_archive(read_bundle_file(root), root, key)
    if key is not None:
        raise ConfigurationError(f"{root}: a verification key is configured, so policies must come as a signed bundle")
    if not root.is_dir():
        raise ConfigurationError(f"policies directory not found: {root}")
    files = {path.relative_to(root).as_posix(): path.read_text(encoding="utf-8") for path in _policy_files(root)}
    return bundle_from_files(root, files)


def _policy_files(root: Path) -> list[Path]:
    """Every .rego and .json file under `root`, through linked directories, each once, in order.

    Kubernetes mounts a ConfigMap as `..<timestamp>/` (the files), `..data` (a link to it, swapped
    atomically on a change) and, per top-level name, a link to `..data/<name>`: the policies are read
    through those links, never again under the `..` staging names. A link back to a directory
    already walked is not followed twice."""
    found: list[Path] = []
    walked: set[str] = set()
    for directory, subdirectories, names in os.walk(root, followlinks=True):
        real = os.path.realpath(directory)
        if real in walked:
            subdirectories[:] = []
            continue
        walked.add(real)
        subdirectories[:] = sorted(d for d in subdirectories if not d.startswith(".."))
        found += [Path(directory) / n for n in names if Path(n).suffix in READ_SUFFIXES and not n.startswith("..")]
    return sorted(p for p in found if p.is_file())


def bundle_from_files(root: Path, files: Mapping[str, str]) -> PolicyBundle:
    """A bundle from (relative path -> content): modules, `_test.rego` tests, and `data.json`
    documents mounted by directory; other files are ignored. The revision hashes what is read."""
    digest = hashlib.sha256()
    modules: list[tuple[str, str]] = []
    tests: list[tuple[str, str]] = []
    data: dict[str, Any] = {}
    for relative in sorted(files):
        content = files[relative]
        name = PurePosixPath(relative)
        if name.suffix == ".rego":
            (tests if name.name.endswith("_test.rego") else modules).append((relative, content))
            if name.name.endswith("_test.rego"):
                continue
        elif name.name in YAML_DATA:
            raise ConfigurationError(f"{relative}: data documents must be data.json (the gateway does not read YAML data)")
        elif name.name == "data.json":
            try:
                document = json.loads(content)
            except json.JSONDecodeError as exc:
                raise ConfigurationError(f"{relative}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
            _mount(data, name.parent.parts, document)
        else:
            continue
        digest.update(relative.encode() + b"\0" + content.encode() + b"\0")
    if not modules:
        raise ConfigurationError(f"no Rego modules under {root}")
    return PolicyBundle(root, tuple(modules), tuple(tests), data, "sha256:" + digest.hexdigest()[:16])


def read_archive(archive: bytes, source: Path, key: VerificationKey | None = None) -> PolicyBundle:
    """An OPA bundle: a gzipped tarball of Rego modules, `data.json` documents, a `.manifest` and,
    when `key` is set, a `.signatures.json` that must verify (gateway/policy/signatures.py). Only
    regular files inside the bundle root are read. The revision is the digest of the modules and
    data, as for a directory: a bundle re-signed with other content under the same manifest
    revision is a new revision. The manifest's `revision` is kept as the bundle's `label`
    (printable, at most MAX_LABEL characters). Nothing of the archive reaches a tar parser before
    gateway/policy/archive.py has scanned it, and tarfile itself runs in a child process with a
    deadline (CVE-2024-6232: the signature is inside the tar, so the tar is read before it verifies)."""
    files: dict[str, bytes] = {}
    size = 0
    for count, member in enumerate(unpack(archive, source), 1):  # scanned first, then read in a child with a deadline
        if count > MAX_ARCHIVE_FILES:
            raise ConfigurationError(f"{source}: more than {MAX_ARCHIVE_FILES} members")
        if member.kind == "directory":
            continue
        name = PurePosixPath(member.name.lstrip("/")).as_posix().removeprefix("./")
        if member.kind != "file" or ".." in name.split("/") or not name:
            raise ConfigurationError(f"{source}: {member.name!r} is not a regular file inside the bundle")
        size += len(member.content)
        if size > MAX_ARCHIVE_BYTES:
            raise ConfigurationError(f"{source}: larger than {MAX_ARCHIVE_BYTES} bytes unpacked")
        files[name] = member.content
    if key is not None:
        verify_files(files, key)
    revision = ""
    if MANIFEST in files:
        try:
            manifest = json.loads(files[MANIFEST])
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"{source}: .manifest is not JSON") from exc
        revision = manifest.get("revision", "") if isinstance(manifest, dict) else ""
        if not isinstance(revision, str) or len(revision) > MAX_LABEL or not revision.isprintable():
            raise ConfigurationError(f"{source}: .manifest revision must be a string of at most {MAX_LABEL} printable characters")
    try:
        texts = {name: content.decode("utf-8") for name, content in files.items() if PurePosixPath(name).suffix in READ_SUFFIXES}
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"{source}: a module or data file is not UTF-8") from exc
    return replace(bundle_from_files(source, texts), label=revision)


def write_archive(root: Path, revision: str = "", signing_key: str | None = None, algorithm: str = "RS256") -> bytes:
    """A policies directory as an OPA bundle (`.manifest` with `revision`; signed when a key is given)."""
    files: dict[str, bytes] = {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in {".rego", ".json"})
        if not path.name.endswith("_test.rego")
    }
    files[MANIFEST] = json.dumps({"revision": revision, "roots": [""]}).encode()
    if signing_key is not None:
        files[SIGNATURES] = sign_files(files, signing_key, algorithm)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo("/" + name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return out.getvalue()
