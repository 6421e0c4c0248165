"""A policy-first governed retrieval gateway."""
