"""Whether the trail is intact: the walk and verify, signed checkpoints, keys and notes, Merkle trees, the witness, proofs."""
