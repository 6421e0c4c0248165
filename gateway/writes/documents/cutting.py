"""Cutting: a section's text split into pieces of at most a byte limit, at the strongest boundary that fits.

See docs/documents.md.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from itertools import accumulate

from gateway.writes.documents.headings import Section

TEXT, HEADING, FENCE = 0, 1, 2
GLUE, CHAR, SPACE, LINE, SENTENCE, BLOCK = -1, 0, 1, 2, 3, 4  # boundary strengths; GLUE is never cut
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_SENTENCE_END = re.compile(r"[.?!。！？][\"'”’)\]»」』）]*$")
_CJK_SENTENCE_END = re.compile(r"[。！？]+[」』）)\"'”’]*")
_CJK_SENTENCE_END_AT_END = re.compile(r"[。！？][」』）)\"'”’]*$")
_HEADING_START = re.compile(r"#{1,6}(?:[ \t]|$)")
_ZWJ = "\u200d"


def compose(section: Section) -> tuple[str, list[tuple[int, int, int]]] | None:
    """The section's text (heading, blank line, body) and its tokens (start, end, kind), or None if no body."""
    body = "\n".join(section.lines)
    offset = 0
    tokens: list[tuple[int, int, int]] = []
    text = body
    if section.heading is not None:
        text = f"{section.heading}\n\n{body}"
        offset = len(section.heading) + 2
        tokens.extend((m.start(), m.end(), HEADING) for m in re.finditer(r"\S+", section.heading))
    line_starts = list(accumulate((len(line) + 1 for line in section.lines), initial=offset))
    cursor = offset
    body_tokens = 0
    for first, last in section.fences:
        start = line_starts[first] + len(section.lines[first]) - len(section.lines[first].lstrip())
        end = line_starts[last] + len(section.lines[last].rstrip())
        body_tokens += _text_tokens(text, cursor, start, tokens)
        tokens.append((start, end, FENCE))
        body_tokens += 1
        cursor = end
    body_tokens += _text_tokens(text, cursor, len(text), tokens)
    return (text, tokens) if body_tokens else None


def _text_tokens(text: str, start: int, end: int, tokens: list[tuple[int, int, int]]) -> int:
    """Whitespace-separated words of text[start:end], also split after CJK sentence ends; how many."""
    count = 0
    for word in re.finditer(r"\S+", text[start:end]):
        word_start = start + word.start()
        word_end = start + word.end()
        cut = word_start
        for end_mark in _CJK_SENTENCE_END.finditer(text, word_start, word_end):
            if end_mark.end() < word_end:
                tokens.append((cut, end_mark.end(), TEXT))
                count += 1
                cut = end_mark.end()
        tokens.append((cut, word_end, TEXT))
        count += 1
    return count


def _strengths(text: str, tokens: list[tuple[int, int, int]]) -> list[int]:
    """strengths[k]: how good a cut between tokens[k] and tokens[k + 1] is."""
    strengths = []
    for (_, left_end, left_kind), (right_start, _, right_kind) in zip(tokens, tokens[1:]):
        gap = text[left_end:right_start]
        left_tail = text[max(0, left_end - 4) : left_end]
        if left_kind == HEADING:
            strength = GLUE  # inside the heading, and between the heading and the section's first word
        elif left_kind == FENCE or right_kind == FENCE:
            strength = BLOCK
        elif _BLANK_LINE.search(gap) or ("\n" in gap and _HEADING_START.match(text, right_start)):
            strength = BLOCK
        elif (gap and _SENTENCE_END.search(left_tail)) or (not gap and _CJK_SENTENCE_END_AT_END.search(left_tail)):
            strength = SENTENCE
        elif "\n" in gap:
            strength = LINE
        elif gap:
            strength = SPACE
        else:
            strength = CHAR  # cannot happen: words touch only after a CJK sentence end
        strengths.append(strength)
    return strengths


def cut(text: str, tokens: list[tuple[int, int, int]], limit: int) -> list[tuple[int, int]]:
    """(start, end) of each piece: the strongest boundary that fits, the farthest among equals."""
    sizes = list(accumulate((len(char.encode("utf-8")) for char in text), initial=0))
    strengths = _strengths(text, tokens)
    heading_words = sum(1 for _, _, kind in tokens if kind == HEADING)
    if heading_words and sizes[tokens[heading_words - 1][1]] > limit:  # a heading too long to keep whole
        strengths[: heading_words - 1] = [SPACE] * (heading_words - 1)
    starts = [start for start, _, _ in tokens]
    last = len(tokens) - 1
    pieces: list[tuple[int, int]] = []
    i, pos = 0, tokens[0][0]
    while True:
        if sizes[tokens[last][1]] - sizes[pos] <= limit:
            pieces.append((pos, tokens[last][1]))
            return pieces
        best, best_strength = -1, GLUE
        k = i
        while k < last and sizes[tokens[k][1]] - sizes[pos] <= limit:
            if strengths[k] != GLUE and strengths[k] >= best_strength:
                best, best_strength = k, strengths[k]
            k += 1
        if best >= 0:
            pieces.append((pos, tokens[best][1]))
            i, pos = best + 1, tokens[best + 1][0]
            continue
        # Nothing whole fits: the unit up to the first cuttable boundary is too big.
        unit_end = i
        while unit_end < last and strengths[unit_end] == GLUE:
            unit_end += 1
        if any(tokens[j][2] == FENCE for j in range(i, unit_end + 1)):
            pieces.append((pos, tokens[unit_end][1]))  # a code block is never cut
            if unit_end == last:
                return pieces
            i, pos = unit_end + 1, tokens[unit_end + 1][0]
            continue
        cut = _hard_cut(text, sizes, pos, max(pos, tokens[unit_end][0]), tokens[unit_end][1], limit)
        end = cut
        while end > pos + 1 and text[end - 1].isspace():
            end -= 1
        pieces.append((pos, end))
        pos = cut
        while text[pos].isspace():
            pos += 1
        i = bisect_right(starts, pos) - 1


def _hard_cut(text: str, sizes: list[int], pos: int, low: int, high: int, limit: int) -> int:
    """The farthest character boundary c in (low, high) with text[pos:c] within limit bytes.

    Never between a character and the combining mark, variation selector, skin tone or joiner
    that belongs to it, nor inside a flag; falls back to any code point boundary after pos.
    """
    budget = sizes[pos] + limit
    farthest = bisect_right(sizes, budget, pos, high) - 1  # sizes[farthest] <= budget
    for floor in (low, pos):
        cut = farthest
        while cut > floor and not _safe_cut(text, cut):
            cut -= 1
        if cut > floor:
            return cut
    return max(farthest, pos + 1)


def _safe_cut(text: str, at: int) -> bool:
    char = text[at]
    if text[at - 1] == _ZWJ or char == _ZWJ:
        return False
    if _regional_indicator(char) and _regional_indicator(text[at - 1]):
        run = 0
        while at - 1 - run >= 0 and _regional_indicator(text[at - 1 - run]):
            run += 1
        if run % 2:  # between the two halves of a flag
            return False
    code = ord(char)
    if 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF or 0x1F3FB <= code <= 0x1F3FF or 0xE0020 <= code <= 0xE007F:
        return False
    return unicodedata.category(char) not in ("Mn", "Me", "Mc")


def _regional_indicator(char: str) -> bool:
    return 0x1F1E6 <= ord(char) <= 0x1F1FF
