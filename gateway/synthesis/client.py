"""The synthesis client: one OpenAI-compatible chat endpoint that answers from the packed, masked
context (prompt in `prompt`, reply parsing in `reply`). See docs/synthesis.md."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import anyio
import httpx

from gateway.synthesis.prompt import (
    CITATION,
    CONTEXT_FOOTER,
    CONTEXT_HEADER,
    FLAG_NOTE,
    INSTRUCTION_PATTERNS,
    ROLE_MARKER,
    SYSTEM_PROMPT,
    ContextItem,
    build_messages,
    context_message,
    looks_like_instruction,
    quote,
)
from gateway.synthesis.reply import (
    MARKER,
    NOT_IN_CONTEXT,
    Synthesis,
    UnreadableReply,
    parse_content,
    read_reply,
    says_not_in_context,
)
from gateway.writes.embeddings import endpoint_options

__all__ = [
    "CITATION",
    "CONTEXT_FOOTER",
    "CONTEXT_HEADER",
    "FLAG_NOTE",
    "INSTRUCTION_PATTERNS",
    "MARKER",
    "MAX_RESPONSE_BYTES",
    "NOT_IN_CONTEXT",
    "ROLE_MARKER",
    "SYSTEM_PROMPT",
    "ContextItem",
    "Synthesis",
    "Synthesizer",
    "build_messages",
    "context_message",
    "looks_like_instruction",
    "parse_content",
    "quote",
    "says_not_in_context",
]

log = logging.getLogger("gateway.synthesis.client")

MAX_RESPONSE_BYTES = 1_000_000


class _TooLarge(Exception):
    """The endpoint's answer passed MAX_RESPONSE_BYTES; reading stopped there."""


class Synthesizer:
    """One OpenAI-compatible chat endpoint, one `httpx.AsyncClient`; close with `aclose`."""

    def __init__(self, url: str, model: str, key: str | None, timeout_ms: int) -> None:
        self.model = model
        self._timeout_ms = timeout_ms
        self._client = httpx.AsyncClient(**endpoint_options(url, key, timeout_ms), follow_redirects=False)

    async def __aenter__(self) -> "Synthesizer":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    def request_body(self, question: str, context: Sequence[ContextItem]) -> tuple[dict[str, Any], tuple[str, ...]]:
        """The JSON body and the citations flagged as instruction-like. Raises ValueError for a
        malformed or repeated citation (a caller's bug, found before anything is sent)."""
        seen: set[str] = set()
        for item in context:
            if not CITATION.match(item.citation) or item.citation in seen:
                raise ValueError(f"context citation {item.citation!r} is malformed or repeated")
            seen.add(item.citation)
        flagged = tuple(item.citation for item in context if looks_like_instruction(item.text))
        body = {
            "model": self.model,
            "messages": build_messages(question, context, set(flagged)),
            "temperature": 0,
            "response_format": {"type": "json_object"},
        }
        return body, flagged

    async def answer(self, question: str, context: Sequence[ContextItem]) -> Synthesis:
        """The model's answer from the context; never raises for anything the endpoint does."""
        started = time.perf_counter()
        body, flagged = self.request_body(question, context)
        sent = tuple(item.citation for item in context)

        def failed(error: str) -> Synthesis:
            log.warning("synthesis failed: %s", error)
            return Synthesis(None, (), None, False, error, sent, (), flagged, (time.perf_counter() - started) * 1000)

        try:
            with anyio.fail_after(self._timeout_ms / 1000):
                status, raw = await self._post(body)
        except (TimeoutError, httpx.TimeoutException):
            return failed(f"synthesis endpoint timed out after {self._timeout_ms} ms")
        except (httpx.ConnectError, httpx.NetworkError):
            return failed("synthesis endpoint unreachable")
        except _TooLarge:
            return failed(f"synthesis endpoint answered more than {MAX_RESPONSE_BYTES} bytes")
        except httpx.HTTPError as exc:
            return failed(f"synthesis endpoint failed ({type(exc).__name__})")
        if not 200 <= status < 300:
            return failed(f"synthesis endpoint answered {status}")
        try:
            answer, cited, confidence = read_reply(raw)
        except UnreadableReply as exc:
            return failed(str(exc))

        allowed = set(sent)
        citations = tuple(c for c in cited if c in allowed)
        invented = tuple(c for c in cited if c not in allowed)
        grounded = bool(answer.strip()) and bool(citations) and not invented and not says_not_in_context(answer)
        return Synthesis(
            answer, citations, confidence, grounded, None, sent, invented, flagged, (time.perf_counter() - started) * 1000
        )

    async def _post(self, body: dict[str, Any]) -> tuple[int, bytes]:
        """Status and body (read only on a 2xx, and at most MAX_RESPONSE_BYTES of it)."""
        async with self._client.stream("POST", "/chat/completions", json=body) as response:
            if not 200 <= response.status_code < 300:
                return response.status_code, b""
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise _TooLarge()
                chunks.append(chunk)
            return response.status_code, b"".join(chunks)
