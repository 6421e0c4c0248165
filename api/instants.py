"""Instants are timezone-aware UTC in Python and spoken as RFC3339 with a Z."""

from __future__ import annotations

from datetime import datetime, timezone

EARLIEST = datetime(1700, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(2200, 12, 31, 23, 59, 59, tzinfo=timezone.utc)
EXPECTED = "expected an RFC3339 instant such as 2026-11-30T00:00:00Z"


def to_utc(value: datetime) -> datetime:
    if value.tzinfo is None:  # a store that drops the offset still stored UTC
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def rfc3339(value: datetime | None) -> str | None:
    if value is None:
        return None
    value = to_utc(value)
    fraction = f".{value.microsecond:06d}" if value.microsecond else ""
    return value.strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z"


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC3339 instant that names its offset; raises ValueError otherwise."""
    if not isinstance(text, str) or "T" not in text.upper():
        raise ValueError(EXPECTED)
    try:
        parsed = datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
    except ValueError as exc:  # its message quotes the input, which error messages must never echo
        raise ValueError(EXPECTED) from exc
    if parsed.tzinfo is None:
        raise ValueError("the instant must carry a time zone offset, e.g. Z")
    try:
        instant = to_utc(parsed)
    except OverflowError as exc:  # e.g. 9999-12-31T23:59:59-01:00 has no UTC instant
        raise ValueError("the instant is out of range") from exc
    if not EARLIEST <= instant <= LATEST:
        # Rego's time built-ins count nanoseconds in 64 bits (1677 to 2262): leave open-ended
        # intervals open (null) instead of writing a far-off sentinel such as 9999-12-31.
        raise ValueError("the instant must lie between 1700 and 2200; leave an open end null")
    return instant
