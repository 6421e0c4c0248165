"""What the process logs, set once at start (`configure`): the gateway's own lines at
GATEWAY_LOG_LEVEL, every library at WARNING or quieter (Presidio, spaCy, onnxruntime, httpx, uvicorn's
own), as text or as one JSON object a line (GATEWAY_LOG_FORMAT), on standard error.

The standard library's logging, configured by hand: a handler and a formatter of ours, because the
access line (gateway/http/access.py) carries its fields as a record attribute, which the JSON form
writes as fields and the text form as `key=value` pairs. No line holds query text, item text,
personal data or a credential: those never reach a log call."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any

LIBRARIES = (
    "presidio-analyzer",
    "presidio-anonymizer",
    "spacy",
    "onnxruntime",
    "httpx",
    "httpcore",
    "uvicorn",
    "uvicorn.error",
    "uvicorn.access",
    "mcp",
    "sqlalchemy",
    "weaviate",
    "tldextract",
    "filelock",
    "urllib3",
    "opentelemetry",
)
FIELDS = "fields"  # the record attribute an access line's fields travel in
SHOWN = "shown"  # the fields the message already says (the text form does not repeat them)


def _time(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TextFormatter(logging.Formatter):
    """`<time> <LEVEL> <logger>: <message>`, then the access fields as `key=value`."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_time(record)} {record.levelname} {record.name}: {record.getMessage()}"
        fields: dict[str, Any] | None = getattr(record, FIELDS, None)
        if fields:
            shown = getattr(record, SHOWN, ())  # already in the message
            line += " " + " ".join(f"{k}={_text(v)}" for k, v in fields.items() if v is not None and k not in shown)
        if record.exc_info and record.levelno >= logging.ERROR:
            line += f" ({record.exc_info[0].__name__ if record.exc_info[0] else 'error'})"  # the type, never a traceback
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, and the access fields."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {"time": _time(record), "level": record.levelname, "logger": record.name}
        body["message"] = record.getMessage()
        body.update(getattr(record, FIELDS, None) or {})
        return json.dumps(body, ensure_ascii=False, default=str)


def _text(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if (not text or any(c.isspace() or c in '"=' for c in text)) else text


def configure(level: str = "info", form: str = "text") -> None:
    """The process's logging: one handler on standard error, the gateway's loggers at `level`,
    libraries at WARNING (their own INFO chatter, such as Presidio's recognizer list, is not news)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if form == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    for name in LIBRARIES:
        library = logging.getLogger(name)
        library.setLevel(logging.WARNING)
        library.handlers[:] = []
        library.propagate = True
    logging.getLogger("gateway").setLevel(level.upper())
