"""A Merkle tree over each audit chain, in the form transparency logs use (RFC 6962 / RFC 9162 §2.1).

The leaves are the chain's row hashes in position order (leaf i is position i + 1), hashed as
RFC 6962 leaves: SHA-256(0x00 || row hash). An interior node is SHA-256(0x01 || left || right), and
a tree of n leaves splits at the largest power of two below n. Checkpoints carry the tree's root
(`tree`, audit.integrity.checkpoints), so one row can be shown to be under a signed checkpoint with a path of
about log2(n) hashes (`inclusion_proof`), checked with nothing but the checkpoint and the key
(`verify_inclusion`, `gateway audit verify-proof`).

`Range` is the tree's right edge (its "compact range": the roots of the perfect subtrees it is made
of, largest first): enough to extend the tree leaf by leaf and to compute its root without the
leaves. A prune keeps the range of what it removed in its signed checkpoint, so the tree of a pruned
chain can still be extended and proven into (`subtree` answers for the removed part from it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(row_hash: str) -> bytes:
    """The RFC 6962 leaf hash of one row: its row hash (hex) as the leaf's data."""
    return hashlib.sha256(b"\x00" + bytes.fromhex(row_hash)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two below n (n >= 2)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


@dataclass(slots=True)
class Range:
    """The compact range of a tree of `size` leaves: (leaf count, hash) of each perfect subtree of
    its right edge, largest (leftmost) first."""

    size: int = 0
    nodes: list[tuple[int, bytes]] = field(default_factory=list)

    def append(self, leaf: bytes) -> None:
        self.nodes.append((1, leaf))
        self.size += 1
        while len(self.nodes) >= 2 and self.nodes[-1][0] == self.nodes[-2][0]:
            (count, right), (_, left) = self.nodes.pop(), self.nodes.pop()
            self.nodes.append((count * 2, node_hash(left, right)))

    def extend(self, leaves: Iterable[bytes]) -> None:
        for leaf in leaves:
            self.append(leaf)

    def root(self) -> bytes:
        if not self.nodes:
            return EMPTY_ROOT
        value = self.nodes[-1][1]
        for _, left in reversed(self.nodes[:-1]):
            value = node_hash(left, value)
        return value

    def hashes(self) -> list[bytes]:
        return [h for _, h in self.nodes]

    def spans(self) -> dict[tuple[int, int], bytes]:
        """Each node as the leaf interval [start, end) it covers."""
        out, start = {}, 0
        for count, value in self.nodes:
            out[(start, start + count)] = value
            start += count
        return out

    @classmethod
    def of(cls, size: int, hashes: Sequence[bytes]) -> Range:
        """The range of a tree of `size` leaves from its node hashes (as `hashes` gives them); the
        node sizes are the binary digits of `size`. ValueError when they do not fit."""
        counts = [1 << bit for bit in reversed(range(size.bit_length())) if size >> bit & 1]
        if len(counts) != len(hashes) or any(len(h) != 32 for h in hashes):
            raise ValueError(f"a tree of {size} leaves has {len(counts)} nodes on its right edge, not {len(hashes)}")
        return cls(size, list(zip(counts, hashes)))


def root(leaves: Sequence[bytes]) -> bytes:
    r = Range()
    r.extend(leaves)
    return r.root()


def subtree(start: int, end: int, leaves: Callable[[int, int], Sequence[bytes]], cut: Range | None = None) -> bytes:
    """The hash of the subtree over leaves [start, end): from the leaves (`leaves(a, b)` gives
    leaves a..b-1), or, below `cut.size` (what a prune removed), from `cut`'s nodes."""
    if cut is not None and start < cut.size:
        spans = cut.spans()
        if (start, end) in spans:
            return spans[(start, end)]
        if end <= cut.size:
            raise ValueError(f"leaves {start} to {end - 1} were pruned, and no kept node covers exactly them")
        k = _split(end - start)
        return node_hash(subtree(start, start + k, leaves, cut), subtree(start + k, end, leaves, cut))
    return root(leaves(start, end))


def inclusion_proof(
    index: int, size: int, leaves: Callable[[int, int], Sequence[bytes]], cut: Range | None = None
) -> list[bytes]:
    """RFC 9162 §2.1.3.1: the audit path of leaf `index` in the tree of the first `size` leaves."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size} leaves")

    def path(m: int, start: int, end: int) -> list[bytes]:
        n = end - start
        if n == 1:
            return []
        k = _split(n)
        if m < k:
            return path(m, start, start + k) + [subtree(start + k, end, leaves, cut)]
        return path(m - k, start + k, end) + [subtree(start, start + k, leaves, cut)]

    return path(index, 0, size)


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], expected_root: bytes) -> bool:
    """RFC 9162 §2.1.3.2: whether `proof` shows `leaf` at `index` in the tree of `size` leaves
    whose root is `expected_root`."""
    if not 0 <= index < size:
        return False
    sides = _sides(index, size - 1, len(proof))
    if sides is None:
        return False
    value = leaf
    for p, left in zip(proof, sides):
        value = node_hash(p, value) if left else node_hash(value, p)
    return value == expected_root


def _sides(fn: int, sn: int, steps: int) -> list[bool] | None:
    """RFC 9162 §2.1.3.2 and §2.1.4.2's walk up the tree from node `fn` of the last node `sn`: for each
    of the proof's `steps` hashes, whether it is the left sibling of the node so far (else the right).
    None when the proof does not end at the root: too long, or too short."""
    sides = []
    for _ in range(steps):
        if sn == 0:
            return None
        left = bool(fn & 1 or fn == sn)
        if left and not fn & 1:
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        sides.append(left)
        fn >>= 1
        sn >>= 1
    return sides if sn == 0 else None


def consistency_proof(
    old: int, size: int, leaves: Callable[[int, int], Sequence[bytes]], cut: Range | None = None
) -> list[bytes]:
    """RFC 9162 §2.1.4.1: the proof that the tree of the first `old` leaves is a prefix of the tree
    of the first `size` (empty when old is 0 or old == size)."""
    if not 0 <= old <= size:
        raise ValueError(f"a tree of {old} leaves is no prefix of one of {size}")
    if old == 0 or old == size:
        return []

    def sub(m: int, start: int, end: int, whole: bool) -> list[bytes]:
        n = end - start
        if m == n:
            return [] if whole else [subtree(start, end, leaves, cut)]
        k = _split(n)
        if m <= k:
            return sub(m, start, start + k, whole) + [subtree(start + k, end, leaves, cut)]
        return sub(m - k, start + k, end, False) + [subtree(start, start + k, leaves, cut)]

    return sub(old, 0, size, True)


def verify_consistency(old: int, size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> bool:
    """RFC 9162 §2.1.4.2: whether `proof` shows the tree of `old` leaves (root `old_root`) to be a
    prefix of the tree of `size` leaves (root `new_root`)."""
    if not 0 <= old <= size:
        return False
    if old == 0:
        return not proof
    if old == size:
        return not proof and old_root == new_root
    path = list(proof)
    if old & (old - 1) == 0:  # a power of two: the old tree is a node of the new one
        path.insert(0, old_root)
    if not path:
        return False
    fn, sn = old - 1, size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    sides = _sides(fn, sn, len(path) - 1)
    if sides is None:
        return False
    fr = sr = path[0]
    for c, left in zip(path[1:], sides):
        if left:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
        else:
            sr = node_hash(sr, c)
    return fr == old_root and sr == new_root
