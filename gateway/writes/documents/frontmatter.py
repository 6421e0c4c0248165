"""Front matter: the restricted YAML subset at the top of a document, read into the item envelope.

See docs/documents.md.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from core.errors import BadRequest
from core.validation import describe_validation_error
from gateway.writes.envelope import ItemIn

LIST_KEYS = frozenset({"acl", "scope", "tags"})
SCALAR_KEYS = frozenset(
    {"sensitivity", "valid_from", "valid_to", "authority", "status", "attached_to", "entity", "recorded_at", "slot"}
)
OTHER_KEYS = frozenset({"source_system", "source_uri", "title"})
ALLOWED_KEYS = LIST_KEYS | SCALAR_KEYS | OTHER_KEYS

_KEY_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)[ \t]*:(?:[ \t]+(.*))?$")
_DASH_LINE = re.compile(r"[ \t]*-(?:[ \t]+(.*))?$")
_PLAIN_FORBIDDEN_START = set("{}[]|>&*!%@`,")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "n": "\n", "t": "\t"}


def front_matter(lines: list[str]) -> tuple[dict[str, tuple[int, str | list[str]]], str | None, int]:
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


def envelope(fields: dict[str, tuple[int, str | list[str]]]) -> dict[str, Any]:
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
        raise BadRequest(f'{where}: unsupported syntax; quote the value ("...") if it is a string')
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
