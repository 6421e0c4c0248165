"""CSV that a spreadsheet opens as data, never as formulas (OWASP "CSV Injection"): every text cell
that begins with `=`, `+`, `-`, `@`, a tab or a carriage return gets a single quote in front, so
Excel, LibreOffice and Google Sheets show it as text instead of evaluating it. Every CSV the gateway
writes goes through `csv_line` (the audit export, the subject report).

Only text is neutralised. A cell that is a number by construction (an `int`, `float` or `Decimal`
the code put there, such as a status code or a chain position) is written as the number, sign
included; a string that merely looks like a number (`-2` as an item id) is text and gets the quote,
since a cell whose content a caller chose must never be read as a formula. The quote is part of the
value a CSV reader sees (`'@acme`): it is what OWASP recommends, and what makes the file safe in any
spreadsheet, whatever its import settings.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from decimal import Decimal

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # OWASP's list: what makes a spreadsheet read a formula


def cell(value: object) -> object:
    """The value as a CSV cell: None as empty, numbers as they are, text with a leading `'` when it
    begins with a formula character."""
    if value is None:
        return ""
    if isinstance(value, (int, float, Decimal)):  # bool too: numbers by construction
        return value
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def joined(values: Iterable[object], separator: str = ";") -> str:
    """Several values in one cell, each neutralised: a spreadsheet whose list separator is `;`
    splits the cell there, and each part must not start a formula either."""
    return separator.join(str(cell(v)) for v in values)


def csv_line(values: Iterable[object]) -> str:
    """One CSV row (RFC 4180 quoting, CRLF), every cell through `cell`."""
    buffer = io.StringIO()
    csv.writer(buffer).writerow([cell(v) for v in values])
    return buffer.getvalue()
