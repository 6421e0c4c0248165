"""A streamed body read a part at a time: the lines of an NDJSON upload, bounded in memory and in time.

`line_parts` yields the body's non-blank lines in parts of at most `part_items` lines (or about
`part_bytes` bytes), each as (line number, bytes). The caller handles a part before the next is
read, so the body arrives no faster than it is written (TCP pushes back) and memory holds one part
and one incoming chunk. A line longer than `line_limit` is dropped as it arrives and given as
(line number, None), so one oversized item costs neither memory nor the others. Each part must
arrive within `timeout_s` (GATEWAY_BODY_TIMEOUT_MS), however slowly it trickles: a stalled upload
ends with a 408, and no seat is held while a part arrives (the caller admits each part on its own).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import anyio
from starlette.requests import Request

from core.errors import RequestTimeout

Line = tuple[int, bytes | None]


async def line_parts(
    request: Request, *, part_items: int, part_bytes: int, line_limit: int, timeout_s: float
) -> AsyncIterator[list[Line]]:
    chunks = request.stream().__aiter__()
    pending = bytearray()
    lines: list[Line] = []
    number = size = 0
    skipping = False  # inside a line past the limit: its bytes are dropped until its newline
    deadline = time.monotonic() + timeout_s
    ended = False
    while not ended:
        chunk: bytes | None = None
        with anyio.move_on_after(max(0.0, deadline - time.monotonic())) as waited:
            chunk = await anext(chunks, None)
        if waited.cancelled_caught:
            raise RequestTimeout(f"body: a part of the stream not received within {timeout_s:g} s (GATEWAY_BODY_TIMEOUT_MS)")
        if chunk is None:
            ended = True
        else:
            pending += chunk
        while (cut := pending.find(b"\n")) >= 0:
            line = bytes(pending[:cut])
            del pending[: cut + 1]
            number += 1
            if skipping or len(line) > line_limit:
                skipping = False
                lines.append((number, None))
            elif line.strip():
                lines.append((number, line))
                size += len(line)
        if skipping or len(pending) > line_limit:
            skipping = True
            pending.clear()
        if ended and (skipping or pending.strip()):
            number += 1
            lines.append((number, None if skipping else bytes(pending)))
        while len(lines) >= part_items or (lines and (ended or size >= part_bytes)):
            part, lines = lines[:part_items], lines[part_items:]
            size = sum(len(line or b"") for _, line in lines)
            yield part
            deadline = time.monotonic() + timeout_s
