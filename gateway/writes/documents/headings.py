"""Headings: a document body cut into sections at ATX headings of levels 1-3, fenced code left whole.

See docs/documents.md.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_ATX_CLOSING = re.compile(r"(?:^|[ \t]+)#+$")
_FENCE_OPEN = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)$")


@dataclass(slots=True)
class Section:
    path: tuple[str, ...]
    heading: str | None
    line: int  # 1-based line of the heading (or of the first body line)
    lines: list[str] = field(default_factory=list)
    fences: list[tuple[int, int]] = field(default_factory=list)  # (first, last) indexes into lines


def sections(lines: list[str], body_start: int, root: str) -> list[Section]:
    current = Section(path=(root,), heading=None, line=body_start + 1)
    sections = [current]
    stack: list[tuple[int, str]] = []
    fence: tuple[str, int, int] | None = None  # (marker char, marker length, first index in current.lines)
    for index in range(body_start, len(lines)):
        line = lines[index]
        if fence is not None:
            current.lines.append(line)
            char, length, first = fence
            closing = line.strip()
            if len(closing) >= length and closing == char * len(closing):
                current.fences.append((first, len(current.lines) - 1))
                fence = None
            continue
        opening = _FENCE_OPEN.match(line)
        if opening and not (opening.group(1)[0] == "`" and "`" in opening.group(2)):
            fence = (opening.group(1)[0], len(opening.group(1)), len(current.lines))
            current.lines.append(line)
            continue
        heading = _ATX.match(line)
        if heading and len(heading.group(1)) <= 3:
            level = len(heading.group(1))
            title = _ATX_CLOSING.sub("", heading.group(2) or "").strip() or "(untitled)"
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            current = Section(path=tuple(t for _, t in stack), heading=title, line=index + 1)
            sections.append(current)
            continue
        current.lines.append(line)
    if fence is not None:  # unclosed: runs to the end of the document
        last = len(current.lines) - 1
        while last > fence[2] and not current.lines[last].strip():
            last -= 1
        current.fences.append((fence[2], last))
    return sections


def slug(path: tuple[str, ...]) -> str:
    parts = []
    for title in path:
        normal = unicodedata.normalize("NFKC", title).casefold()
        parts.append("-".join(re.findall(r"[^\W_]+", normal)) or "section")
    return "/".join(parts)
