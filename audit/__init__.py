"""Audit traces: one row per call, written as part of the request."""
