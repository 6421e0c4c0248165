"""The evidence pack: one tenant's rows of a period written for an outside auditor, and its offline check."""
