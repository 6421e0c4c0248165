"""The audit rows and their hash chains: one typed row, append, prune, and reading rows back."""
