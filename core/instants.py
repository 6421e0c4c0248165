"""Instants are timezone-aware UTC in Python and spoken as RFC3339 with a Z."""

from __future__ import annotations

from datetime import datetime, timezone

from api.instants import EARLIEST as EARLIEST  # re-exported: the contract speaks instants
from api.instants import LATEST as LATEST
from api.instants import parse_rfc3339 as parse_rfc3339
from api.instants import rfc3339 as rfc3339
from api.instants import to_utc as to_utc


def utc_now() -> datetime:
    return datetime.now(timezone.utc)
