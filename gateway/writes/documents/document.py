"""Markdown documents into section items: a pure module (no I/O) whose items go to ``gateway.writes.items``.

See docs/documents.md.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import gateway.writes.documents.cutting as cutting
import gateway.writes.documents.frontmatter as frontmatter
import gateway.writes.documents.headings as headings
from core.errors import BadRequest
from gateway.writes.envelope import MAX_SECTION_CHARS, MAX_TEXT_CHARS

DEFAULT_MAX_BYTES = 2_000
MIN_MAX_BYTES = 16
# ItemIn ids allow only [A-Za-z0-9_.:@-]; "#" is not among them, so pieces are "<document>:<0000>".
PIECE_ID_SEPARATOR = ":"
SECTION_SEPARATOR = " > "
MAX_ID_CHARS = 200
DOCUMENT_ID = re.compile(r"[A-Za-z0-9_.:@-]{1,200}")


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
    fields, title, body_start = frontmatter.front_matter(lines)
    envelope = frontmatter.envelope(fields)
    sections = headings.sections(lines, body_start, title or document_id)
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


def _pieces(sections: list[headings.Section], max_bytes: int) -> tuple[Piece, ...]:
    """Each section's text cut into pieces; a section key is made unique by a ~N suffix."""
    pieces: list[Piece] = []
    seen: dict[str, int] = {}
    for section in sections:
        composed = cutting.compose(section)
        if composed is None:
            continue  # nothing but a heading
        text, tokens = composed
        key = headings.slug(section.path)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            key = f"{key}~{seen[key]}"
        for part, (start, end) in enumerate(cutting.cut(text, tokens, max_bytes)):
            piece_text = text[start:end]
            if len(piece_text) > MAX_TEXT_CHARS:
                raise BadRequest(
                    f"document: the section at line {section.line} holds a code block over {MAX_TEXT_CHARS} characters; split it"
                )
            pieces.append(Piece(len(pieces), section.path, key, part, piece_text))
    return tuple(pieces)
