"""Reading the chat model's reply: the answer, its citations and confidence from the message content,
and whether the answer says the context lacks it. See docs/synthesis.md."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from gateway.synthesis.prompt import CITATION

# A marker in the answer text: [M1], and the grouped form [M1, D2] some models write.
MARKER = re.compile(r"\[([MDPE]\d+(?:\s*,\s*[MDPE]\d+)*)\]")


@dataclass(frozen=True, slots=True)
class Synthesis:
    text: str | None  # the model's answer, still masked; None when error is set
    citations: tuple[str, ...]  # sent citations the answer used
    confidence: float | None
    grounded: bool
    error: str | None
    sent_citations: tuple[str, ...]  # the citations placed in the request
    invented_citations: tuple[str, ...]  # cited by the model, never sent
    flagged: tuple[str, ...]  # citations of items whose text reads like an instruction
    ms: float


# -- answers that say the context lacks the answer ----------------------------------------------

_CONTEXT = r"(?:provided\s+|given\s+|retrieved\s+|above\s+)?(?:context|documents?|items?|sources?|information\s+provided)"
NOT_IN_CONTEXT = re.compile(
    "|".join(
        (
            rf"\b(?:the\s+)?{_CONTEXT}\s+(?:does\s+not|doesn't|do\s+not|don't|did\s+not|does\s+not\s+seem\s+to)\s+"
            r"(?:contain|include|mention|say|state|provide|specify|answer|cover)",
            rf"\bnot\s+(?:found\s+|mentioned\s+|present\s+|stated\s+|given\s+|provided\s+|available\s+|covered\s+)?in\s+the\s+{_CONTEXT}",
            r"\b(?:does\s+not|doesn't)\s+contain\s+(?:the\s+|an\s+|any\s+|enough\s+)?(?:answer|information|details?)",
            r"\bno\s+(?:relevant\s+|such\s+|specific\s+)?information\b",
            r"\b(?:not\s+enough|insufficient)\s+(?:information|context|data)\b",
            r"\b(?:i|we)\s+(?:cannot|can't|can\s+not|am\s+unable\s+to|are\s+unable\s+to)\s+(?:answer|determine|find|tell)",
        )
    ),
    re.IGNORECASE,
)


def says_not_in_context(text: str) -> bool:
    """True when an answer says the context does not hold the answer."""
    return NOT_IN_CONTEXT.search(" ".join(text.split())) is not None


# -- the reply -----------------------------------------------------------------------------------

_FENCE = re.compile(r"^```[A-Za-z]*[ \t]*\n?(.*?)\n?```$", re.DOTALL)


class UnreadableReply(Exception):
    """The reply cannot be read; the message is ours and safe to return."""


def _strip_fence(content: str) -> str:
    stripped = content.strip()
    match = _FENCE.match(stripped)
    return match.group(1).strip() if match else stripped


def _content(body: Any) -> str:
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list) or not body["choices"]:
        raise UnreadableReply("synthesis endpoint answered without choices")
    choice = body["choices"][0]
    message = choice.get("message") if isinstance(choice, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        raise UnreadableReply("synthesis endpoint answered without message content")
    return content


def _confidence(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return min(1.0, max(0.0, float(value)))


def _listed(value: Any) -> list[str]:
    """The model's `citations`: "M1" or "[M1]" kept as "M1"; anything else kept as its text, to be
    reported as invented."""
    if not isinstance(value, list):
        return []
    out: list[str] = []
    for entry in value:
        label = str(entry).strip().strip("[]").strip()[:64]
        out.append(label.upper() if CITATION.match(label.upper()) else label)
    return [label for label in out if label]


def _markers(text: str) -> list[str]:
    return [part.strip() for match in MARKER.finditer(text) for part in match.group(1).split(",")]


def parse_content(content: str) -> tuple[str, list[str], float | None]:
    """(answer, citations in order of first appearance, confidence) from message content."""
    inner = _strip_fence(content)
    if inner.startswith(("{", "[")):
        try:
            value = json.loads(inner)
        except ValueError:
            raise UnreadableReply("synthesis model answered malformed JSON content") from None
        if not isinstance(value, dict) or not isinstance(value.get("answer"), str):
            raise UnreadableReply("synthesis model answered JSON without an answer")
        answer: str = value["answer"]
        cited = _listed(value.get("citations")) + _markers(answer)
        confidence = _confidence(value.get("confidence"))
    else:
        answer, cited, confidence = content.strip(), _markers(content), None
    return answer, list(dict.fromkeys(cited)), confidence


def read_reply(raw: bytes) -> tuple[str, list[str], float | None]:
    """`parse_content` of a 2xx response body; raises UnreadableReply for anything unreadable."""
    try:
        reply = json.loads(raw)
    except ValueError:
        raise UnreadableReply("synthesis endpoint answered malformed JSON") from None
    return parse_content(_content(reply))
