"""The report on one data subject (GDPR art. 15, CCPA's right to know): every call of the tenant
whose lineage asked about the entity, retrieved, returned, sent to a model or used an item about
it, or about an entity merged with it; with actor, task, time, the furthest stage reached, and
the masking applied.

Driven from the facet index (core.audit_facts: `subject:<stage>` = entity id), then read back from
each row's own hashed lineage: an index row someone added never puts a call in the report. The
merge group is read from the entity envelopes (merged_into) and the chain's own merge rows, never
item text; the report holds ids, types and counts the trail already holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import or_, select, union_all
from sqlalchemy.engine import Connection, Engine

from api.audit import SubjectCall, SubjectReport
from audit.chain import StoredTrace, audit_facet, audit_trace, chain_of, utc_instant
from core.audit_facts import MERGE_FACETS, SUBJECT, SUBJECT_STAGES, counts_of, dict_of, merge_of, subject_stages, texts_of
from core.csv_cells import csv_line, joined
from core.tables import Item

item_table = Item.__table__  # type: ignore[attr-defined]
MAX_GROUP = 500  # entities of one merge group followed at most
MAX_SUBJECT_PAGE = 500
WALKED_STAGES = ("asked", "retrieved", "used")  # every call about an entity has one of these facets
MAX_RANGES = 200  # index ranges walked in one statement (a big merge group takes several)
MAX_WALK = 20_000  # index entries a range gives at most per step, when other tenants' calls share the ids
CSV_COLUMNS = (
    "trace_id",
    "created_at",
    "actor",
    "endpoint",
    "task",
    "decision",
    "status_code",
    "reached",
    "stages",
    "returned",
    "masked",
    "about",
)


def merge_group(conn: Connection, tenant: str, entity_id: str) -> list[str]:
    """Every id the entity has had: the entities joined to it by a merge, one after another (the one
    it went into, those merged into it, and so on), as the entity envelopes say (merged_into) and as
    the chain's merge rows say. The chain is read too because an envelope someone edited in the
    database could otherwise take a merged id, and its calls, out of the report."""
    if "\x00" in entity_id:
        return []
    group, frontier = {entity_id}, [entity_id]
    while frontier and len(group) < MAX_GROUP:
        found = _envelope_merges(conn, tenant, frontier) | _chain_merges(conn, tenant, frontier)
        frontier = sorted(found - group)
        group.update(frontier)
    return sorted(group)[:MAX_GROUP]


def _envelope_merges(conn: Connection, tenant: str, frontier: list[str]) -> set[str]:
    ids, into = item_table.c.id, item_table.c.merged_into
    rows = conn.execute(
        select(ids, into).where(
            item_table.c.tenant == tenant, item_table.c.kind == "entity", or_(ids.in_(frontier), into.in_(frontier))
        )
    ).all()
    return {value for pair in rows for value in pair if value is not None}


def _chain_merges(conn: Connection, tenant: str, frontier: list[str]) -> set[str]:
    """Both ends of the tenant's merge rows that name an entity of `frontier`, each read from the
    row's own hashed lineage (merge_of), so an index row someone added joins nothing."""
    marked = select(audit_facet.c.trace_pk).where(audit_facet.c.facet.in_(MERGE_FACETS), audit_facet.c.value.in_(frontier))
    found: set[str] = set()
    rows = conn.execute(select(audit_trace).where(audit_trace.c.chain == chain_of(tenant), audit_trace.c.pk.in_(marked)))
    for row in rows:
        pair = merge_of(row._mapping)
        if pair is not None and set(pair) & set(frontier):
            found.update(pair)
    return found


def _entry(row: StoredTrace, group: set[str]) -> SubjectCall | None:
    """One call of the report, from its own lineage; None when it holds nothing about the group."""
    lineage = dict_of(row.lineage)
    reached: set[str] = set()
    for entity, its_stages in subject_stages(lineage).items():
        if entity in group:
            reached |= its_stages
    if not reached:
        return None
    named = dict_of(lineage.get("named_entities"))
    about_group = {i for entity, ids in named.items() if entity in group for i in texts_of(ids)}
    packed = texts_of(lineage.get("packed"))
    synthesis, pii, returned = (dict_of(lineage.get(part)) for part in ("synthesis", "pii", "returned"))
    stages: list[Any] = [s for s in SUBJECT_STAGES if s in reached]  # SubjectCall checks each is a stage
    return SubjectCall(
        trace_id=row.trace_id,
        created_at=row.created_at,
        actor=row.actor,
        endpoint=row.endpoint,
        channel=lineage.get("channel") or "http",
        task=row.task_type,
        decision=row.decision,
        status_code=row.status_code,
        stages=stages,
        reached=stages[-1],
        items={
            "retrieved": sorted(about_group),
            "returned": sorted(about_group & set(packed)),
            "sent": sorted(about_group & set(texts_of(synthesis.get("sent")))),
            "used": sorted(texts_of(lineage.get("used"))) if "used" in reached else [],
        },
        masking={
            "masked": dict(sorted(counts_of(pii.get("masked")).items())),
            "masked_for_model": dict(sorted(counts_of(synthesis.get("masked_for_model")).items())),
            "items_masked": sum(counts_of({"n": returned.get("masked_items")}).values()),
            "revealed": texts_of(returned.get("revealed")),
        },
        about=row.about,
    )


def _newest_marked(conn: Connection, group: list[str], before: int | None, k: int) -> list[int]:
    """The k highest trace_pk below `before` with a subject facet of the group, newest first. Each
    (stage, entity) is its own range of ix_audit_facet_value, ordered by trace_pk: walked from its
    top and cut at k, so a page costs k index entries per range, not every call the subject ever had.
    Only the stages every call about an entity reaches first are walked: returned and sent are
    always also retrieved (they come from the same named_entities)."""
    ranges = []
    for stage in WALKED_STAGES:
        for entity in group:
            walk = select(audit_facet.c.trace_pk).where(audit_facet.c.facet == SUBJECT + stage, audit_facet.c.value == entity)
            if before is not None:
                walk = walk.where(audit_facet.c.trace_pk < before)
            ranges.append(walk.order_by(audit_facet.c.trace_pk.desc()).limit(k).subquery().select())
    marked: set[int] = set()
    for chunk in range(0, len(ranges), MAX_RANGES):
        marked.update(pk for (pk,) in conn.execute(union_all(*ranges[chunk : chunk + MAX_RANGES])))
    return sorted(marked, reverse=True)[:k]


def subject_report(engine: Engine, tenant: str, entity_id: str, after: int | None = None, limit: int = 100) -> SubjectReport:
    """Newest first, paged by the row's key (`c_<pk>`; a chain's keys grow with its positions)."""
    limit = max(1, min(limit, MAX_SUBJECT_PAGE))
    with engine.connect() as conn:
        group = merge_group(conn, tenant, entity_id)
        if not group:
            return SubjectReport(entity_id=entity_id, entities=[], calls=[], cursor=None)
        kept: list[int] = []
        before, k = after, limit + 1
        # Another tenant's calls about an entity of the same id share the ranges: only the keys are
        # read to drop them (the row's lineage is not), and the walk goes on below the last key seen,
        # twice as far each step, until the page is full or the ranges run out.
        while len(kept) <= limit:
            marked = _newest_marked(conn, group, before, k)
            if marked:
                ours = select(audit_trace.c.pk).where(audit_trace.c.chain == chain_of(tenant), audit_trace.c.pk.in_(marked))
                found = {pk for (pk,) in conn.execute(ours)}
                kept.extend(pk for pk in marked if pk in found)
            if len(marked) < k:
                break
            before, k = marked[-1], min(k * 2, MAX_WALK)
        kept = kept[: limit + 1]
        statement = select(audit_trace).where(audit_trace.c.pk.in_(kept)) if kept else None
        keyed = [(r.pk, StoredTrace.of(r._mapping)) for r in conn.execute(statement)] if statement is not None else []
    rows = sorted(keyed, key=lambda pair: -pair[0])
    page, members = rows[:limit], set(group)
    calls = [entry for _, row in page if (entry := _entry(row, members)) is not None]
    more = len(rows) > limit
    return SubjectReport(entity_id=entity_id, entities=group, calls=calls, cursor=f"c_{page[-1][0]}" if more and page else None)


def report_csv(engine: Engine, tenant: str, entity_id: str) -> Iterator[bytes]:
    """Every call of the report (all pages), one CSV row each, newest first. Text cells, and each
    part of the `;`-joined ones, are neutralised against formulas (core.csv_cells); status_code is
    an integer, written as a number."""
    after: int | None = None
    header = True
    while True:
        report = subject_report(engine, tenant, entity_id, after, MAX_SUBJECT_PAGE)
        lines = [csv_line(CSV_COLUMNS)] if header else []
        header = False
        for call in report.calls:
            lines.append(
                csv_line(
                    [
                        call.trace_id,
                        utc_instant(call.created_at),
                        call.actor,
                        call.endpoint,
                        call.task,
                        call.decision,
                        call.status_code,
                        call.reached,
                        joined(call.stages),
                        joined(call.items["returned"]),
                        joined(f"{k}:{v}" for k, v in call.masking["masked"].items()),
                        call.about,
                    ]
                )
            )
        yield "".join(lines).encode()
        if report.cursor is None:
            return
        after = int(report.cursor[2:])
