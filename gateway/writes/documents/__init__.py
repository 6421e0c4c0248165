"""Markdown documents with front matter, cut into section pieces that become items. See docs/documents.md."""

from gateway.writes.documents.document import (
    DEFAULT_MAX_BYTES,
    DOCUMENT_ID,
    MAX_ID_CHARS,
    MIN_MAX_BYTES,
    PIECE_ID_SEPARATOR,
    SECTION_SEPARATOR,
    Document,
    Piece,
    join_section,
    parse_document,
    piece_id,
    section_items,
)
from gateway.writes.documents.frontmatter import ALLOWED_KEYS, LIST_KEYS, OTHER_KEYS, SCALAR_KEYS
from gateway.writes.envelope import MAX_SECTION_CHARS, MAX_TEXT_CHARS

__all__ = [
    "ALLOWED_KEYS",
    "DEFAULT_MAX_BYTES",
    "DOCUMENT_ID",
    "LIST_KEYS",
    "MAX_ID_CHARS",
    "MAX_SECTION_CHARS",
    "MAX_TEXT_CHARS",
    "MIN_MAX_BYTES",
    "OTHER_KEYS",
    "PIECE_ID_SEPARATOR",
    "SCALAR_KEYS",
    "SECTION_SEPARATOR",
    "Document",
    "Piece",
    "join_section",
    "parse_document",
    "piece_id",
    "section_items",
]
