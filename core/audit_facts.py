"""What the compliance overview and the subject report count, derived from one audit row: its
columns and its (hashed) lineage, never item text.

One pure function, `facts_of`, feeds three places that must agree: the append (which keeps the
hourly rollup and the facet index in the row's own transaction), the verify walk (which recomputes
both from the rows and names any difference), and the overview's edges (rows of a partial hour,
counted directly). Lineage is read as stored, without model validation, because verify reads every
row; anything of an unexpected type counts as absent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

RETRIEVAL = "retrieve"  # the endpoint of retrieve, expand and fetch, over HTTP and MCP alike
OUTCOMES = ("allow", "deny", "error", "rate_limited", "invalid")
SUBJECT_STAGES = ("asked", "retrieved", "returned", "sent", "used")
SUBJECT = "subject:"  # facet prefix of the subject stages: subject:returned = an item about the entity was returned
VERIFIED = ("audit_verify", "audit_page_verify")
MERGE = "entity_merge"  # the endpoint of POST /v1/entities/{id}/merge
MERGE_FACETS = ("merged", "merged_into")  # facet of a merge's entity and of the one it went into
MAX_KEY = 400  # characters of a rollup key or facet value (longer values are cut, the same everywhere)
HOUR_S = 3600

Tally = tuple[str, str, int]  # (measure, key, n)
Facet = tuple[str, str]  # (facet, value)


@dataclass(frozen=True, slots=True)
class Facts:
    hour: int
    tallies: tuple[Tally, ...]
    facets: frozenset[Facet]


def hour_of(instant: datetime) -> int:
    """Hours since the epoch, UTC (SQLite hands back naive UTC)."""
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=timezone.utc)
    return int(instant.timestamp() // HOUR_S)


def outcome(endpoint: str, status: int, decision: str) -> str | None:
    """A retrieval call's outcome; None for any other endpoint."""
    if endpoint != RETRIEVAL:
        return None
    if status == 429:
        return "rate_limited"
    if decision == "deny":
        return "deny"
    if status >= 500 or decision == "error":
        return "error"
    return "allow" if 200 <= status < 300 else "invalid"


def dict_of(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def texts_of(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def counts_of(value: Any) -> dict[str, int]:
    return {k: v for k, v in dict_of(value).items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}


def _cut(value: str) -> str:
    return value[:MAX_KEY]


def subject_stages(lineage: Mapping[str, Any]) -> dict[str, set[str]]:
    """Entity id -> the stages a call reached with an item about it (or with it as a subject)."""
    stages: dict[str, set[str]] = {}
    for entity in texts_of(lineage.get("subjects")):
        stages.setdefault(entity, set()).add("asked")
    packed = set(texts_of(lineage.get("packed")))
    sent = set(texts_of(dict_of(lineage.get("synthesis")).get("sent")))
    for entity, items in dict_of(lineage.get("named_entities")).items():
        ids = set(texts_of(items))
        if not isinstance(entity, str) or not ids:
            continue
        reached = stages.setdefault(entity, set())
        reached.add("retrieved")
        if ids & packed:
            reached.add("returned")
        if ids & sent:
            reached.add("sent")
    for entity in texts_of(lineage.get("used_about")):
        stages.setdefault(entity, set()).add("used")
    return stages


def merge_of(row: Mapping[str, Any] | Any) -> tuple[str, str] | None:
    """(entity, into) of a merge that succeeded, from the row's own lineage; None for any other row."""
    if row.get("endpoint") != MERGE or row.get("status_code") != 200:
        return None
    merge = dict_of(dict_of(row.get("lineage")).get("merge"))
    entity, into = merge.get("entity"), merge.get("into")
    if isinstance(entity, str) and isinstance(into, str) and entity and into and entity != into:
        return entity, into
    return None


def facts_of(row: Mapping[str, Any] | Any) -> Facts:
    """The row's tallies (measure, key, n) for the hourly rollup and its facets for the filters.
    `row` has the audit_trace columns (created_at, endpoint, status_code, decision, actor,
    task_type, policy_revision, lineage)."""
    lineage = dict_of(row.get("lineage"))
    endpoint, actor = str(row.get("endpoint") or ""), _cut(row.get("actor") or "")
    tallies: Counter[tuple[str, str]] = Counter({("endpoint", _cut(endpoint)): 1})
    facets: set[Facet] = set()
    result = outcome(endpoint, int(row.get("status_code") or 0), str(row.get("decision") or ""))
    if result is not None:
        tallies["calls", _cut(f"{result}|{row.get('policy_revision') or ''}")] += 1
    if result == "deny":
        for reason in dict.fromkeys(texts_of(dict_of(lineage.get("decision")).get("reasons"))):
            tallies["denied_reason", _cut(reason)] += 1
            facets.add(("reason", _cut(reason)))
        tallies["denied_task", _cut(row.get("task_type") or "")] += 1
    if result is not None and isinstance(lineage.get("packed"), list):  # delivered (not `not_delivered`)
        returned = dict_of(lineage.get("returned"))
        for sensitivity, n in counts_of(returned.get("sensitivity")).items():
            tallies["returned", _cut(sensitivity)] += n
            facets.add(("returned", _cut(sensitivity)))
        restricted = counts_of(returned.get("sensitivity")).get("restricted", 0)
        if restricted:
            tallies["restricted_by", actor] += restricted
        masked_items = returned.get("masked_items")
        if isinstance(masked_items, int) and not isinstance(masked_items, bool) and masked_items > 0:
            tallies["masked_items", ""] += masked_items
        for kind, n in counts_of(dict_of(lineage.get("pii")).get("masked")).items():
            tallies["placeholders", _cut(kind)] += n
            facets.add(("masked", _cut(kind)))
        revealed = sorted(set(texts_of(returned.get("revealed"))))
        for kind in revealed:
            tallies["revealed", _cut(kind)] += 1
            facets.add(("revealed", _cut(kind)))
        if revealed:
            tallies["revealed_by", actor] += 1
    for entity, stages in subject_stages(lineage).items():
        facets.update((SUBJECT + stage, _cut(entity)) for stage in stages)
    if (merged := merge_of(row)) is not None:
        facets.update((facet, _cut(entity)) for facet, entity in zip(MERGE_FACETS, merged, strict=True))
    if endpoint in VERIFIED and row.get("status_code") == 200:
        ok = dict_of(lineage.get("audit_verify")).get("ok")
        facets.add(("checked", "ok" if ok is True else "broken"))
    return Facts(
        hour=hour_of(row["created_at"]),
        tallies=tuple((measure, key, n) for (measure, key), n in sorted(tallies.items())),
        facets=frozenset(facets),
    )


def tally_rows(rows: Any) -> Counter[tuple[int, str, str]]:
    """(hour, measure, key) -> n over rows, as the rollup holds it."""
    total: Counter[tuple[int, str, str]] = Counter()
    for row in rows:
        facts = facts_of(row)
        for measure, key, n in facts.tallies:
            total[facts.hour, measure, key] += n
    return total
