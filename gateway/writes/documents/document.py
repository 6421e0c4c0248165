"""Markdown documents into section items: front matter for the envelope, ATX headings for the cuts.

A pure module (no I/O): ``parse_document`` reads the text, ``section_items`` turns the result into
item dicts for ``gateway.writes.items``.

    ---
    acl: [group:sales]            # required: the gateway never defaults visibility
    sensitivity: internal
    scope:
      - sales
    title: "Pricing guideline"
    source_system: wiki
    source_uri: wiki://pricing
    ---
    Text before the first heading (path: the title, else the document id).
    # Pricing guideline
    ## Discounts
    ### Annual billing
    ...

Front matter is a subset of YAML, without a YAML dependency: one ``key: value`` per line, values
plain or quoted (``"..."`` with ``\\" \\\\ \\n \\t`` escapes, ``'...'`` with ``''``), lists inline
``[a, "b"]`` or as ``- item`` lines under a key with no value, ``#`` comments. Anything else
(nesting, block scalars, anchors, flow mappings) is refused with a BadRequest naming the line and key.

Sections are cut at headings of levels 1-3 outside fenced code blocks; deeper headings stay in their
section. A section longer than ``max_bytes`` (UTF-8) is cut again at the last paragraph boundary that
fits, else the last sentence boundary, else the last line break or space, else at a character
boundary. A fenced code block is never cut: one larger than the limit is a piece of its own.
Messages never quote the document's text, only line numbers and key names.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from pydantic import ValidationError

from core.errors import BadRequest
from core.validation import describe_validation_error

DEFAULT_MAX_BYTES = 2_000
MIN_MAX_BYTES = 16
# ItemIn ids allow only [A-Za-z0-9_.:@-]; "#" is not among them, so pieces are "<document>:<0000>".
PIECE_ID_SEPARATOR = ":"
SECTION_SEPARATOR = " > "
MAX_SECTION_CHARS = 500  # ItemIn.section
MAX_TEXT_CHARS = 100_000  # ItemIn.text
MAX_ID_CHARS = 200
DOCUMENT_ID = re.compile(r"[A-Za-z0-9_.:@-]{1,200}")

LIST_KEYS = frozenset({"acl", "scope", "tags"})
SCALAR_KEYS = frozenset(
    {"sensitivity", "valid_from", "valid_to", "authority", "status", "attached_to", "entity", "recorded_at", "slot"}
)
OTHER_KEYS = frozenset({"source_system", "source_uri", "title"})
ALLOWED_KEYS = LIST_KEYS | SCALAR_KEYS | OTHER_KEYS


@dataclass(frozen=True, slots=True)
class Piece:
    index: int  # 0-based order in the document; the item id's suffix
    heading_path: tuple[str, ...]
    section_key: str  # stable slug of the heading path, unique per section within the document
    part: int  # 0-based within the section
    text: str

    @property
    def section(self) -> str:
        return SECTION_SEPARATOR.join(self.heading_path)


@dataclass(frozen=True, slots=True)
class Document:
    id: str
    sha256: str  # of the raw input's UTF-8 bytes, hex
    envelope: dict[str, Any]  # ItemIn envelope fields from the front matter
    pieces: tuple[Piece, ...]
    title: str | None = field(default=None)


def piece_id(document_id: str, index: int) -> str:
    return f"{document_id}{PIECE_ID_SEPARATOR}{index:04d}"


def parse_document(document_id: str, raw: str | bytes, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Document:
    """The document's envelope and its pieces, each at most max_bytes (an oversized code block excepted)."""
    if max_bytes < MIN_MAX_BYTES:
        raise ValueError(f"max_bytes must be at least {MIN_MAX_BYTES}")
    if not isinstance(document_id, str) or not DOCUMENT_ID.fullmatch(document_id):
        raise BadRequest("document id: 1-200 characters of letters, digits and _.:@-")
    if isinstance(raw, bytes):
        try:
            data, text = raw, raw.decode("utf-8", errors="strict")
        except UnicodeDecodeError as exc:
            raise BadRequest("document: not valid UTF-8") from exc
    else:
        try:
            data, text = raw.encode("utf-8", errors="strict"), raw
        except UnicodeEncodeError as exc:  # lone surrogates
            raise BadRequest("document: not valid Unicode text") from exc
    if "\x00" in text:
        raise BadRequest("document: must not contain the NUL character")
    digest = hashlib.sha256(data).hexdigest()

    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    fields, title, body_start = _front_matter(lines)
    envelope = _envelope(fields)
    sections = _sections(lines, body_start, title or document_id)
    pieces = _pieces(sections, max_bytes)
    if pieces and len(piece_id(document_id, len(pieces) - 1)) > MAX_ID_CHARS:
        raise BadRequest(f"document id: too long for {len(pieces)} section ids of at most {MAX_ID_CHARS} characters")
    return Document(id=document_id, sha256=digest, envelope=envelope, pieces=pieces, title=title)


def section_items(doc: Document) -> list[dict[str, Any]]:
    """One item per piece, in document order: id, kind, document, section, text and the envelope."""
    items = []
    for piece in doc.pieces:
        section = piece.section
        if len(section) > MAX_SECTION_CHARS:
            section = section[: MAX_SECTION_CHARS - 1] + "…"
        item: dict[str, Any] = {
            "id": piece_id(doc.id, piece.index),
            "kind": "document",
            "document": doc.id,
            "section": section,
            "text": piece.text,
        }
        for key, value in doc.envelope.items():
            item[key] = list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value
        items.append(item)
    return items


def join_section(pieces_texts_in_order: list[str]) -> str:
    """Adjacent pieces of one section back into the whole section, a blank line between them."""
    return "\n\n".join(text.strip() for text in pieces_texts_in_order if text.strip())


# --- front matter -----------------------------------------------------------------------------

_KEY_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)[ \t]*:(?:[ \t]+(.*))?$")
_DASH_LINE = re.compile(r"[ \t]*-(?:[ \t]+(.*))?$")
_PLAIN_FORBIDDEN_START = set("{}[]|>&*!%@`,")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "n": "\n", "t": "\t"}


def _front_matter(lines: list[str]) -> tuple[dict[str, tuple[int, str | list[str]]], str | None, int]:
    """The front matter's key -> (line, value), the title, and the index of the first body line."""
    if not lines or lines[0].rstrip() != "---":
        raise BadRequest("document: front matter with at least acl is required (--- lines at the very top)")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() in ("---", "...")), None)
    if end is None:
        raise BadRequest("front matter: no closing --- line")
    fields: dict[str, tuple[int, str | list[str]]] = {}
    pending: tuple[str, int, list[str]] | None = None  # a key with no value, collecting "- item" lines

    def close_pending() -> None:
        if pending is not None:
            key, number, items = pending
            if not items:
                raise BadRequest(f"front matter line {number}: {key}: no value (write [] for an empty list)")
            fields[key] = (number, items)

    for index in range(1, end):
        number, line = index + 1, lines[index]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        dash = _DASH_LINE.match(line)
        if dash:
            if pending is None:
                raise BadRequest(f"front matter line {number}: a '- item' line must follow a key with no value")
            key = pending[0]
            if not dash.group(1) or dash.group(1).lstrip().startswith("#"):
                raise BadRequest(f"front matter line {number}: {key}: empty list item")
            pending[2].append(_scalar(dash.group(1), key, number))
            continue
        if line[0] in " \t":
            raise BadRequest(f"front matter line {number}: indented line: nested values are not supported")
        match = _KEY_LINE.match(line)
        if not match:
            raise BadRequest(f"front matter line {number}: expected 'key: value'")
        close_pending()
        pending = None
        key = match.group(1)
        if key not in ALLOWED_KEYS:
            allowed = ", ".join(sorted(ALLOWED_KEYS))
            raise BadRequest(f"front matter line {number}: unknown key {key[:64]!r} (allowed: {allowed})")
        if key in fields:
            raise BadRequest(f"front matter line {number}: {key}: given twice")
        value = (match.group(2) or "").strip()
        if value.startswith("#"):
            value = ""
        if not value:
            if key not in LIST_KEYS:
                raise BadRequest(f"front matter line {number}: {key}: no value")
            pending = (key, number, [])
            continue
        parsed: str | list[str] = _inline_list(value, key, number) if value.startswith("[") else _scalar(value, key, number)
        fields[key] = (number, parsed)
    close_pending()

    title_entry = fields.pop("title", None)
    title: str | None = None
    if title_entry is not None:
        number, value = title_entry
        if not isinstance(value, str) or not value.strip():
            raise BadRequest(f"front matter line {number}: title: expected a single non-empty value")
        title = value.strip()
    return fields, title, end + 1


def _envelope(fields: dict[str, tuple[int, str | list[str]]]) -> dict[str, Any]:
    if "acl" not in fields:
        raise BadRequest("front matter: acl is required (the gateway never defaults visibility)")
    envelope: dict[str, Any] = {}
    source: dict[str, str] = {}
    for key, (number, value) in fields.items():
        if key in LIST_KEYS:
            if isinstance(value, str):
                if "," in value:
                    raise BadRequest(f"front matter line {number}: {key}: write a list as [a, b] or as '- item' lines")
                value = [value]
            envelope[key] = value
            continue
        if isinstance(value, list):
            raise BadRequest(f"front matter line {number}: {key}: expected a single value, not a list")
        if key in ("source_system", "source_uri"):
            source[key.removeprefix("source_")] = value
        else:
            envelope[key] = value
    if source:
        envelope["source"] = {k: source[k] for k in ("system", "uri") if k in source}
    _check_envelope(envelope)
    return envelope


def _check_envelope(envelope: dict[str, Any]) -> None:
    """The envelope's values checked once, as ingest would check them on every section."""
    from gateway.writes.items import ItemIn  # here, not at the top: ingest may come to import this module

    try:
        ItemIn.model_validate({"id": "front_matter", "kind": "document", "text": "-", **envelope})
    except ValidationError as exc:
        message = describe_validation_error(exc, root="front matter")
        raise BadRequest(f"front matter: {message}") from exc


def _scalar(text: str, key: str, number: int) -> str:
    text = text.strip()
    if text[:1] in ('"', "'"):
        value, end = _quoted(text, 0, key, number)
        _only_comment_after(text[end:], key, number)
        return value
    comment = re.search(r"[ \t]#", text)
    if comment:
        text = text[: comment.start()].rstrip()
    _check_plain(text, key, number)
    return text


def _check_plain(text: str, key: str, number: int) -> None:
    where = f"front matter line {number}: {key}"
    if not text:
        raise BadRequest(f"{where}: empty value")
    if text[0] in _PLAIN_FORBIDDEN_START or text.startswith(("- ", "? ")) or text == "-":
        raise BadRequest(f"{where}: unsupported syntax; quote the value (\"...\") if it is a string")
    if ": " in text or text.endswith(":"):
        raise BadRequest(f"{where}: a value containing ': ' must be quoted; nested mappings are not supported")


def _quoted(text: str, start: int, key: str, number: int) -> tuple[str, int]:
    """The string quoted at text[start], and the index just after its closing quote."""
    quote, i = text[start], start + 1
    out: list[str] = []
    where = f"front matter line {number}: {key}"
    while i < len(text):
        char = text[i]
        if quote == "'" and char == "'":
            if text[i + 1 : i + 2] == "'":
                out.append("'")
                i += 2
                continue
            return "".join(out), i + 1
        if quote == '"' and char == '"':
            return "".join(out), i + 1
        if quote == '"' and char == "\\":
            escaped = text[i + 1 : i + 2]
            if escaped not in _ESCAPES:
                raise BadRequest(f'{where}: unsupported escape in a "..." string (use \\" \\\\ \\n \\t)')
            out.append(_ESCAPES[escaped])
            i += 2
            continue
        out.append(char)
        i += 1
    raise BadRequest(f"{where}: unterminated quoted string")


def _only_comment_after(rest: str, key: str, number: int) -> None:
    rest = rest.strip()
    if rest and not rest.startswith("#"):
        raise BadRequest(f"front matter line {number}: {key}: unexpected text after the value")


def _inline_list(text: str, key: str, number: int) -> list[str]:
    where = f"front matter line {number}: {key}"
    items: list[str] = []
    i = 1
    while True:
        while i < len(text) and text[i] in " \t":
            i += 1
        if i >= len(text):
            raise BadRequest(f"{where}: list not closed with ]")
        if text[i] == "]" and not items:
            i += 1
            break
        if text[i] in ('"', "'"):
            value, i = _quoted(text, i, key, number)
        else:
            j = i
            while j < len(text) and text[j] not in ",]":
                if text[j] in "[{}":
                    raise BadRequest(f"{where}: nested lists and mappings are not supported")
                j += 1
            value = text[i:j].strip()
            if not value:
                raise BadRequest(f"{where}: empty entry in list")
            _check_plain(value, key, number)
            i = j
        items.append(value)
        while i < len(text) and text[i] in " \t":
            i += 1
        if i >= len(text):
            raise BadRequest(f"{where}: list not closed with ]")
        if text[i] == "]":
            i += 1
            break
        if text[i] != ",":
            raise BadRequest(f"{where}: expected , or ] after a list entry")
        i += 1
    _only_comment_after(text[i:], key, number)
    return items


# --- sections ---------------------------------------------------------------------------------

_ATX = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_ATX_CLOSING = re.compile(r"(?:^|[ \t]+)#+$")
_FENCE_OPEN = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)$")


@dataclass(slots=True)
class _Section:
    path: tuple[str, ...]
    heading: str | None
    line: int  # 1-based line of the heading (or of the first body line)
    lines: list[str] = field(default_factory=list)
    fences: list[tuple[int, int]] = field(default_factory=list)  # (first, last) indexes into lines


def _sections(lines: list[str], body_start: int, root: str) -> list[_Section]:
    current = _Section(path=(root,), heading=None, line=body_start + 1)
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
            current = _Section(path=tuple(t for _, t in stack), heading=title, line=index + 1)
            sections.append(current)
            continue
        current.lines.append(line)
    if fence is not None:  # unclosed: runs to the end of the document
        last = len(current.lines) - 1
        while last > fence[2] and not current.lines[last].strip():
            last -= 1
        current.fences.append((fence[2], last))
    return sections


def _slug(path: tuple[str, ...]) -> str:
    parts = []
    for title in path:
        normal = unicodedata.normalize("NFKC", title).casefold()
        parts.append("-".join(re.findall(r"[^\W_]+", normal)) or "section")
    return "/".join(parts)


# --- cutting ----------------------------------------------------------------------------------

TEXT, HEADING, FENCE = 0, 1, 2
GLUE, CHAR, SPACE, LINE, SENTENCE, BLOCK = -1, 0, 1, 2, 3, 4  # boundary strengths; GLUE is never cut
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_SENTENCE_END = re.compile(r"[.?!。！？][\"'”’)\]»」』）]*$")
_CJK_SENTENCE_END = re.compile(r"[。！？]+[」』）)\"'”’]*")
_CJK_SENTENCE_END_AT_END = re.compile(r"[。！？][」』）)\"'”’]*$")
_HEADING_START = re.compile(r"#{1,6}(?:[ \t]|$)")
_ZWJ = "\u200d"


def _pieces(sections: list[_Section], max_bytes: int) -> tuple[Piece, ...]:
    pieces: list[Piece] = []
    seen: dict[str, int] = {}
    for section in sections:
        composed = _compose(section)
        if composed is None:
            continue  # nothing but a heading
        text, tokens = composed
        key = _slug(section.path)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            key = f"{key}~{seen[key]}"
        for part, (start, end) in enumerate(_cut(text, tokens, max_bytes)):
            piece_text = text[start:end]
            if len(piece_text) > MAX_TEXT_CHARS:
                raise BadRequest(
                    f"document: the section at line {section.line} holds a code block over {MAX_TEXT_CHARS} characters; split it"
                )
            pieces.append(Piece(len(pieces), section.path, key, part, piece_text))
    return tuple(pieces)


def _compose(section: _Section) -> tuple[str, list[tuple[int, int, int]]] | None:
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


def _cut(text: str, tokens: list[tuple[int, int, int]], limit: int) -> list[tuple[int, int]]:
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
