"""What a call leaves: its typed lineage, its trace, and the stages reviewers read from them."""
