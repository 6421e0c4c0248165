"""Signed notes and checkpoints: byte for byte what Go's reference implementation
(golang.org/x/mod/sumdb/note) writes, and refused when altered or signed by another key."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from audit.integrity import (
    Checkpoint,
    CheckpointLog,
    NoteError,
    Signer,
    Verifier,
    generate,
    load_signer,
    load_verifier,
    open_note,
    parse_verifier_key,
    read_checkpoints,
    sign,
    verifier_key,
)

# The example of golang.org/x/mod/sumdb/note (its package documentation and note_test.go).
GO_SIGNER_KEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VERIFIER_KEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
GO_NOTE = (
    GO_TEXT
    + "\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)


def go_signer() -> Signer:
    material = GO_SIGNER_KEY.split("+", 4)[4]
    seed = base64.b64decode(material)[1:]  # a type byte (0x01, Ed25519), then the 32-byte seed
    return Signer("PeterNeumann", Ed25519PrivateKey.from_private_bytes(seed))


def test_a_note_signed_here_is_the_note_go_signs() -> None:
    signer = go_signer()
    assert sign(GO_TEXT, signer) == GO_NOTE
    assert verifier_key("PeterNeumann", signer.private.public_key()) == GO_VERIFIER_KEY
    name, public = parse_verifier_key(GO_VERIFIER_KEY)
    assert open_note(GO_NOTE, Verifier(name, public)) == GO_TEXT


def test_an_altered_note_or_another_key_is_refused() -> None:
    verifier = Verifier(*parse_verifier_key(GO_VERIFIER_KEY))
    with pytest.raises(NoteError, match="does not verify"):
        open_note(GO_NOTE.replace("cryptography", "cryptographY"), verifier)
    other = Signer("PeterNeumann", Ed25519PrivateKey.generate())
    with pytest.raises(NoteError, match="another key"):
        open_note(sign(GO_TEXT, other), verifier)
    with pytest.raises(NoteError, match="malformed"):
        open_note(GO_TEXT, verifier)
    with pytest.raises(NoteError):
        parse_verifier_key(GO_VERIFIER_KEY.replace("c74f20a3", "c74f20a4"))


def test_a_checkpoint_round_trips_through_its_file(tmp_path: Path) -> None:
    paths = generate(tmp_path / "keys")
    assert paths["private"].stat().st_mode & 0o777 == 0o600
    signer = load_signer(paths["private"])
    checkpoint = Checkpoint("acme corp+1", 12, "ab" * 32, "2026-11-30T18:00:00.000000Z", oldest=3, refused=(13, "no seal"))
    text = checkpoint.text()
    assert text.splitlines()[:3] == ["gateway.audit/acme%20corp%2B1", "12", base64.b64encode(bytes.fromhex("ab" * 32)).decode()]
    log = CheckpointLog(tmp_path / "checkpoints")
    log.append([sign(text, signer), sign(Checkpoint("globex", 1, "cd" * 32, "2026-11-30T18:00:01Z").text(), signer)])
    for key_file in ("public", "verifier"):  # the PEM public key, or the signed-note verifier key
        attested = read_checkpoints(log.path, load_verifier(paths[key_file]))
        assert attested.problems == [] and attested.notes == 2
        (read,) = attested.by_chain["acme corp+1"]
        assert (read.size, read.head, read.oldest, read.refused, read.line) == (12, "ab" * 32, 3, (13, "no seal"), 1)
    with pytest.raises(Exception, match="exists"):
        generate(tmp_path / "keys")  # never overwrites a key
