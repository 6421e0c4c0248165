"""The audit Merkle tree (audit/integrity/merkle.py) against RFC 6962's test vector and its own definition."""

from __future__ import annotations

import hashlib

import pytest

from audit.integrity import Range, inclusion_proof, node_hash, root, subtree, verify_inclusion

# RFC 6962's eight leaves (certificate-transparency's merkle tree test data) and the roots of their
# first n, as every CT implementation tests them.
LEAVES = [
    b"",
    b"\x00",
    b"\x10",
    b"\x20\x21",
    b"\x30\x31",
    b"\x40\x41\x42\x43",
    bytes(range(0x50, 0x58)),
    bytes(range(0x60, 0x70)),
]
ROOTS = {
    1: "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    2: "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    3: "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    4: "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    5: "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    6: "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    7: "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    8: "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
}


def leaf(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def mth(leaves: list[bytes]) -> bytes:
    """RFC 6962 §2.1, written from its definition."""
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return node_hash(mth(leaves[:k]), mth(leaves[k:]))


@pytest.mark.parametrize("n", sorted(ROOTS))
def test_the_roots_of_rfc_6962s_test_vector(n: int) -> None:
    assert root([leaf(d) for d in LEAVES[:n]]).hex() == ROOTS[n]


def test_every_leaf_of_every_tree_up_to_70_has_a_proof_that_verifies_and_no_other_does() -> None:
    leaves = [leaf(i.to_bytes(4, "big")) for i in range(70)]
    for n in range(1, 71):
        expected = mth(leaves[:n])
        assert root(leaves[:n]) == expected
        for m in range(n):
            proof = inclusion_proof(m, n, lambda a, b: leaves[a:b])
            assert verify_inclusion(m, n, leaves[m], proof, expected)
            assert not verify_inclusion(m, n, leaves[(m + 1) % 70], proof, expected)  # another leaf
            assert not verify_inclusion(m, n, leaves[m], proof, leaf(b"another root"))
            if proof:
                assert not verify_inclusion(m, n, leaves[m], proof[:-1], expected)  # a path cut short
                assert not verify_inclusion(m, n, leaves[m], proof + [expected], expected)  # or padded


def test_a_pruned_prefix_is_enough_as_its_compact_range() -> None:
    """What a prune keeps (the range of the removed leaves) extends the tree and proves into it as
    the leaves would."""
    leaves = [leaf(i.to_bytes(4, "big")) for i in range(45)]
    for cut_at in (1, 5, 8, 13, 32):
        cut = Range()
        cut.extend(leaves[:cut_at])
        kept = Range.of(cut.size, cut.hashes())
        grown = Range.of(kept.size, kept.hashes())
        grown.extend(leaves[cut_at:])
        assert grown.root() == mth(leaves)

        def after_the_cut(a: int, b: int) -> list[bytes]:
            assert a >= cut_at, "a pruned leaf was asked for"
            return leaves[a:b]

        for m in range(cut_at, 45):
            proof = inclusion_proof(m, 45, after_the_cut, kept)
            assert proof == inclusion_proof(m, 45, lambda a, b: leaves[a:b])
            assert verify_inclusion(m, 45, leaves[m], proof, mth(leaves))
        assert subtree(0, 45, after_the_cut, kept) == mth(leaves)


def test_a_range_that_does_not_fit_its_size_is_refused() -> None:
    with pytest.raises(ValueError, match="right edge"):
        Range.of(5, [b"\x00" * 32])


def test_every_prefix_of_every_tree_up_to_40_has_a_consistency_proof_and_a_fork_has_none() -> None:
    from audit.integrity import consistency_proof, verify_consistency

    leaves = [leaf(i.to_bytes(4, "big")) for i in range(40)]
    forked = leaves[:]
    forked[3] = leaf(b"rewritten")
    for n in range(1, 41):
        for m in range(0, n + 1):
            proof = consistency_proof(m, n, lambda a, b: leaves[a:b])
            old_root = mth(leaves[:m]) if m else b""
            assert verify_consistency(m, n, old_root, mth(leaves[:n]), proof), (m, n)
            if 3 < m < n:  # a log that rewrote leaf 3 after the old tree was cosigned
                fork = consistency_proof(m, n, lambda a, b: forked[a:b])
                assert not verify_consistency(m, n, old_root, mth(forked[:n]), fork), (m, n)
            if proof and m:
                assert not verify_consistency(m, n, old_root, mth(leaves[:n]), proof[:-1]), (m, n)
