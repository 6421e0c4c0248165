"""Ingest: items validated one by one, each written all-or-nothing, idempotent by id.

A bad item is reported with its index and reasons; it never blocks or half-writes the others.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import ValidationError
from sqlalchemy import delete, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from core import identifiers
from core.errors import BadRequest, ConnectorError
from core.instants import parse_rfc3339, utc_now
from core.store import ensure_tenant_index, writer
from core.tables import Item, SourceDocument
from core.validation import describe_validation_error, has_nul, loads_json
from gateway.writes.documents import Document, piece_id, section_items
from gateway.writes.envelope import ID as ID  # re-exported
from gateway.writes.envelope import NAME as NAME
from gateway.writes.envelope import PRINCIPAL as PRINCIPAL
from gateway.writes.envelope import ItemIn as ItemIn
from gateway.writes.item_batch import Outcome, write_batch
from gateway.writes.supplied import Intake, Vector, publish_supplied, resolve, store_supplied, supplied_vector

log = logging.getLogger("gateway.writes")
item_table = Item.__table__  # type: ignore[attr-defined]
source_table = SourceDocument.__table__  # type: ignore[attr-defined]


MAX_REJECTIONS = 1000  # rejections reported one by one; past them, only counted


@dataclass(slots=True)
class IngestReport:
    """What a write did. A stream of a million bad lines is reported by its first MAX_REJECTIONS
    rejections and the count of the rest (`rejected_omitted`), so the answer stays small."""

    created: int = 0
    updated: int = 0
    unchanged: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)
    rejected_omitted: int = 0

    def reject(self, index: int, item_id: str | None, errors: list[str]) -> None:
        if len(self.rejected) < MAX_REJECTIONS:
            self.rejected.append({"index": index, "id": item_id, "errors": errors})
        else:
            self.rejected_omitted += 1

    def add(self, other: IngestReport) -> None:
        """Fold the report of a later part of the same stream into this one."""
        self.created += other.created
        self.updated += other.updated
        self.unchanged += other.unchanged
        for rejection in other.rejected:
            self.reject(rejection["index"], rejection["id"], rejection["errors"])
        self.rejected_omitted += other.rejected_omitted

    def count(self, written: list[tuple[int, str, Outcome]]) -> None:
        """Count what became of each written entry (by its index and id)."""
        for index, item_id, outcome in written:
            if outcome.kind == "rejected":
                self.reject(index, item_id, [outcome.error or "store: refused"])
            else:
                setattr(self, outcome.kind, getattr(self, outcome.kind) + 1)

    @property
    def rejected_count(self) -> int:
        return len(self.rejected) + self.rejected_omitted

    def as_dict(self) -> dict[str, Any]:
        """The report's fields; `rejected_omitted` only when rejections were left out."""
        fields = asdict(self)
        if not self.rejected_omitted:
            del fields["rejected_omitted"]
        return fields


def parse_items_body(raw: bytes, content_type: str | None) -> list[Any]:
    """A JSON array, or NDJSON (one item per line). A line that is not JSON stays in place as a
    rejection; a number JSON cannot carry (NaN, Infinity, 1e999) refuses the whole body, naming it."""
    try:
        text = raw.decode("utf-8", errors="strict") if raw else ""
    except UnicodeDecodeError as exc:
        raise BadRequest("body: not valid UTF-8") from exc
    stripped = text.lstrip()
    if not stripped:
        raise BadRequest("body: expected a JSON array of items or NDJSON")
    if stripped.startswith("[") and "ndjson" not in (content_type or ""):
        try:
            body = loads_json(text)  # a non-finite number is a 400 naming it: `[0].weight`
        except (ValueError, RecursionError) as exc:  # also over-long integers and too-deep nesting
            where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
            raise BadRequest(f"body: malformed JSON{where}") from exc
        if not isinstance(body, list):
            raise BadRequest("body: expected a JSON array of items")
        return body
    if stripped.startswith("{") and "ndjson" not in (content_type or ""):
        try:  # one item written as a single (possibly pretty-printed) JSON object
            single = loads_json(text, at="[0]")
        except (ValueError, RecursionError):
            single = None
        if isinstance(single, dict):
            return [single]
    entries: list[Any] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append(loads_json(line, at=f"[{len(entries)}]"))
        except (ValueError, RecursionError):
            entries.append(_Unparsable(number))
    return entries


def parse_line(line: bytes | None, number: int, index: int) -> Any:
    """One line of a streamed NDJSON body (line `number`, entry `index`): its JSON value, or why it
    is refused, reported by `ingest` at its index. `None` is a line past the length limit, dropped
    as it arrived. Unlike a whole body, a number JSON cannot carry refuses its line only: the
    lines before it may already be written."""
    if line is None:
        return Rejected((f"line {number}: longer than the line limit (GATEWAY_MAX_BODY_BYTES)",))
    try:
        return loads_json(line.decode("utf-8", errors="strict"), at=f"[{index}]")
    except UnicodeDecodeError:
        return Rejected((f"line {number}: not valid UTF-8",))
    except BadRequest as exc:
        return Rejected((exc.message,))
    except (ValueError, RecursionError):
        return _Unparsable(number)


@dataclass(frozen=True, slots=True)
class _Unparsable:
    line: int


@dataclass(frozen=True, slots=True)
class Rejected:
    """An entry an endpoint already found wanting: reported with its reasons, never written."""

    errors: tuple[str, ...]


def _identifier_columns(item: ItemIn) -> dict[str, str | None]:
    """Normalised identifiers. A contact's company domain comes from its email unless a company
    website is given; a person-profile URL is kept as the contact's profile."""
    site = identifiers.website(item.website) if item.website else None
    domain = site.value if site is not None and site.kind == "domain" else None
    if domain is None and item.email and item.entity_type == "contact":
        domain = identifiers.domain_of_email(item.email)
    return {
        "email": identifiers.email(item.email) if item.email else None,
        "domain": domain or None,
        "phone": identifiers.phone(item.phone) if item.phone else None,
        "profile": site.value if site is not None and site.kind == "profile" else None,
    }


def row_for(item: ItemIn, tenant: str) -> dict[str, Any]:
    """The item's columns, normalised; content_hash makes re-ingesting the same item a no-op."""
    text = item.text or ""
    if item.kind == "property" and not text:
        text = f"{item.name}: {item.value if isinstance(item.value, str) else json.dumps(item.value)}"
    if item.kind == "entity" and not text:
        text = item.name or ""
    if item.kind == "edge" and not text:
        text = f"{item.from_} {item.relation} {item.to}"
    row: dict[str, Any] = {
        "tenant": tenant,
        "id": item.id,
        "kind": item.kind,
        "text": text,
        "name": item.name,
        "value": item.value,
        "entity": item.entity,
        "section": item.section,
        "document": item.document,
        "entity_type": item.entity_type,
        **_identifier_columns(item),
        "relation": item.relation,
        "edge_from": item.from_,
        "edge_to": item.to,
        "confidence": item.confidence,
        "weight": item.weight,
        "tags": sorted(set(item.tags)),
        "acl": sorted(set(item.acl)),
        "sensitivity": item.sensitivity,
        "valid_from": parse_rfc3339(item.valid_from) if item.valid_from else None,
        "valid_to": parse_rfc3339(item.valid_to) if item.valid_to else None,
        "scope": sorted(set(item.scope)),
        "scoped": bool(item.scope),
        "authority": item.authority,
        "status": item.status,
        "slot": item.slot,
        "attached_to": item.attached_to,
        "source_system": (item.source or {}).get("system"),
        "source_uri": (item.source or {}).get("uri"),
        "recorded_at": parse_rfc3339(item.recorded_at) if item.recorded_at else None,
    }
    canonical = json.dumps(row, sort_keys=True, default=str)
    row["content_hash"] = hashlib.sha256(canonical.encode()).hexdigest()
    return row


def ingest(
    engine: Engine,
    tenant: str,
    entries: Iterable[Any],
    *,
    chunk: int = 500,
    first: int = 0,
    intake: Intake = None,
) -> IngestReport:
    """Validate and write each entry, `chunk` at a time in a transaction each (so `entries` may be a
    stream of any length: memory holds two chunks); every item lands whole or not at all. Entries
    are numbered from `first` in the report (a stream read in parts numbers each part on from the
    last). A chunk is written on a thread of its own while the next is validated: SQLite and
    PostgreSQL's drivers let go of the GIL while the store works, so the two overlap. An item may
    carry its vector (gateway/writes/supplied.py), checked against `intake`, the index's model (None:
    no vector is taken)."""
    report = IngestReport()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest") as pool:
        writing: Future[list[tuple[int, str, Outcome]]] | None = None
        for rows in _chunks(entries, tenant, chunk, first, report, intake):
            if writing is not None:
                report.count(writing.result())
            writing = pool.submit(_write_chunk, engine, tenant, rows, intake)
        if writing is not None:
            report.count(writing.result())
    report.rejected.sort(key=lambda rejection: rejection["index"])
    return report


@dataclass(frozen=True, slots=True)
class _Row:
    """A valid entry: its index in the request, its columns, and the vector it carried (unit length)."""

    index: int
    row: dict[str, Any]
    vector: Vector | None = None


def _chunks(
    entries: Iterable[Any], tenant: str, chunk: int, first: int, report: IngestReport, intake: Intake
) -> Iterator[list[_Row]]:
    """The valid entries' rows, `chunk` at a time; each invalid one is rejected in `report`."""
    rows: list[_Row] = []
    for index, entry in enumerate(entries, start=first):
        checked = _checked(entry, tenant, intake)
        if isinstance(checked, Rejected):
            item_id = entry.get("id") if isinstance(entry, dict) and isinstance(entry.get("id"), str) else None
            report.reject(index, item_id, list(checked.errors))
            continue
        rows.append(_Row(index, *checked))
        if len(rows) >= chunk:
            yield rows
            rows = []
    if rows:
        yield rows


def _checked(entry: Any, tenant: str, intake: Intake) -> tuple[dict[str, Any], Vector | None] | Rejected:
    """The entry's row and supplied vector, or why it is refused."""
    if isinstance(entry, _Unparsable):
        return Rejected((f"line {entry.line}: not valid JSON",))
    if isinstance(entry, Rejected):
        return entry
    if not isinstance(entry, dict):
        return Rejected(("item: expected a JSON object",))
    if has_nul(entry):
        return Rejected(("item: strings must not contain the NUL character",))
    if "tenant" in entry:
        return Rejected(("tenant: set by the writer's credential; omit it",))
    try:
        item = ItemIn.model_validate(entry)
    except ValidationError as exc:
        return Rejected(tuple(describe_validation_error(exc, root="item").split("; ")))
    vector = supplied_vector(item, intake)
    if isinstance(vector, tuple):
        return Rejected(vector)
    return row_for(item, tenant), vector


def _write_chunk(engine: Engine, tenant: str, rows: list[_Row], given: Intake) -> list[tuple[int, str, Outcome]]:
    """Write one chunk in one transaction, with the vectors its items carried; what became of each
    entry, by its index and id."""
    intake = resolve(given) if any(r.vector is not None for r in rows) else None
    with writer(engine).begin() as conn:
        ensure_tenant_index(conn, tenant)  # before its first item: the index entry commits with the item
        outcomes = write_batch(conn, tenant, [r.row for r in rows])
        vectors = [
            (outcome.pk, r.row["content_hash"], r.vector)
            for r, outcome in zip(rows, outcomes, strict=True)
            if r.vector is not None and outcome.pk is not None
        ]
        if intake is not None and intake.publish is None:
            store_supplied(conn, intake, vectors)
    if intake is not None and intake.publish is not None:
        try:
            publish_supplied(engine, intake, vectors)
        except (ConnectorError, SQLAlchemyError) as exc:  # the items stand; the worker embeds them
            log.warning("supplied vectors not copied to the index (%s): their items wait for the worker", type(exc).__name__)
    return [(r.index, r.row["id"], outcome) for r, outcome in zip(rows, outcomes, strict=True)]


def ingest_document(engine: Engine, tenant: str, document: Document) -> dict[str, Any]:
    """Write a parsed Markdown document as section items.

    An unchanged document (same SHA-256) writes nothing and so embeds nothing; a changed one is
    ingested piece by piece (unchanged pieces stay unchanged and keep their vectors), and pieces
    beyond the new end are removed.
    """
    with engine.connect() as conn:
        previous = conn.execute(
            select(source_table.c.sha256, source_table.c.pieces).where(
                source_table.c.tenant == tenant, source_table.c.id == document.id
            )
        ).first()
    if previous is not None and previous.sha256 == document.sha256:
        return {
            "document": document.id,
            "sha256": document.sha256,
            "changed": False,
            "pieces": previous.pieces,
            "created": 0,
            "updated": 0,
            "unchanged": previous.pieces,
            "removed": 0,
            "rejected": [],
        }
    report = ingest(engine, tenant, section_items(document))
    if report.rejected:
        return {
            "document": document.id,
            "sha256": document.sha256,
            "changed": False,
            "pieces": len(document.pieces),
            **report.as_dict(),
            "removed": 0,
        }
    kept = {piece_id(document.id, p.index) for p in document.pieces}
    with writer(engine).begin() as conn:
        stale = conn.execute(
            select(item_table.c.pk, item_table.c.id).where(
                item_table.c.tenant == tenant, item_table.c.kind == "document", item_table.c.document == document.id
            )
        ).all()
        removed = [row.pk for row in stale if row.id not in kept]
        if removed:
            conn.execute(delete(item_table).where(item_table.c.pk.in_(removed)))
        values = {"sha256": document.sha256, "pieces": len(document.pieces), "updated_at": utc_now()}
        if previous is None:
            conn.execute(insert(source_table).values(tenant=tenant, id=document.id, **values))
        else:
            conn.execute(
                update(source_table).where(source_table.c.tenant == tenant, source_table.c.id == document.id).values(**values)
            )
    return {
        "document": document.id,
        "sha256": document.sha256,
        "changed": True,
        "pieces": len(document.pieces),
        **report.as_dict(),
        "removed": len(removed),
    }
