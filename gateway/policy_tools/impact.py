"""Impact: replay the shapes of recorded retrieve calls against the policy in force and a candidate.

Each recorded call is decided again, at its own time, by both policies; a decision that differs is a
flip. For calls both allow, the items the call can reach (those it recorded, and the items of the
entities it was about) are verified by both, with their current envelopes: an item one allows and
the other does not is newly allowed or newly denied. Only envelopes are read, never item text, and
the report holds counts, task types, roles and trace ids, never a query fingerprint or any text.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import anyio
import anyio.to_thread
from pydantic import ValidationError
from sqlalchemy import BindParameter, Select, bindparam, or_, select
from sqlalchemy.engine import Engine

from audit.chain import NO_TENANT, audit_trace, chain_of
from audit.record import RequestShape, RetrieveCall
from connectors.sql.pushdown import item, record_from_row
from core.actor import Actor
from core.errors import BadRequest, PolicyUnavailable
from core.instants import parse_rfc3339, rfc3339, to_utc
from core.records import Record
from core.request import Task
from core.tables import ApiKey
from gateway.policy.base import PolicyEngine, check_request_result
from gateway.policy.decide import Constraints, constraints_from
from gateway.policy.verify import verify
from gateway.policy_tools.impact_report import DEFAULT_LIMIT, Outcome, Prepared, Replay, Window, report

MAX_LIMIT = 10_000
CONCURRENCY = 8  # calls replayed at once
REACH_PER_CALL = 500  # items of a call's subjects verified at most
ID_CHUNK = 500  # ids per IN (...) read
FAILURE_LIMIT = 10  # calls a policy may fail on before the run stops
NO_GRAPH = {"max_depth": None, "relations": None}  # the request's graph options when it gave none
key_table = ApiKey.__table__  # type: ignore[attr-defined]


def parse_window(tenant: str | None, since: Any, limit: Any) -> Window:
    """A window from caller input; a bad value is a 400 naming the field."""
    instant = None
    if since is not None:
        try:
            instant = parse_rfc3339(since)
        except ValueError as exc:
            raise BadRequest("since: expected an instant with its offset, such as 2026-11-30T00:00:00Z") from exc
    if limit is None:
        limit = DEFAULT_LIMIT
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(f"limit: expected a whole number from 1 to {MAX_LIMIT}")
    return Window(tenant, instant, limit)


# ------------------------------------------------------------------------------------------ reading


def _calls(store: Engine, window: Window) -> list[Any]:
    """The window's retrieve calls that reached a decision, newest first."""
    t = audit_trace.c
    statement = select(t.trace_id, t.tenant, t.actor, t.created_at, t.decision, t.lineage).where(
        t.endpoint == "retrieve", t.decision.in_(("allow", "deny"))
    )
    if window.tenant is not None:
        statement = statement.where(t.chain == chain_of(window.tenant)).order_by(t.seq.desc())
    else:
        statement = statement.where(t.chain != NO_TENANT).order_by(t.created_at.desc(), t.seq.desc())
    if window.since is not None:
        statement = statement.where(t.created_at >= window.since)
    with store.connect() as conn:
        return [row._mapping for row in conn.execute(statement.limit(window.limit))]


def _key_actors(store: Engine, tenants: set[str]) -> dict[tuple[str, str], set[tuple[Any, ...]]]:
    """Per (tenant, principal), the distinct attributes of its live keys: older rows' fallback."""
    if not tenants:
        return {}
    k = key_table.c
    statement = select(k.tenant, k.principal, k.roles, k.groups, k.clearance).where(
        k.tenant.in_(sorted(tenants)), k.revoked_at.is_(None)
    )
    found: dict[tuple[str, str], set[tuple[Any, ...]]] = defaultdict(set)
    with store.connect() as conn:
        for row in conn.execute(statement):
            found[(row.tenant, row.principal)].add((tuple(row.roles), tuple(row.groups), row.clearance))
    return found


def replay_input(shape: RequestShape, actor: Actor, at: datetime) -> dict[str, Any]:
    """The input data.gateway.request had for this call, rebuilt from its recorded shape
    (mirrors gateway.policy.decide.request_input)."""
    return {
        "actor": actor.as_policy_input(),
        "task": shape.task,
        "request": {
            "mode": shape.mode,
            "kinds": shape.kinds,
            "as_of": shape.as_of and rfc3339(parse_rfc3339(shape.as_of)),
            "graph": shape.graph if shape.graph is not None else dict(NO_GRAPH),
            "sources": shape.sources,
            "depth": shape.depth,
            "include_historical": shape.include_historical,
            "entity_count": len(shape.entities),
            "has_query": shape.query is not None,
        },
        "now": rfc3339(at),
    }


def prepare(store: Engine, window: Window) -> Prepared:
    """The window's calls as replays, and why the others cannot be replayed (never guessed)."""
    rows = _calls(store, window)
    keys = _key_actors(store, {m["tenant"] for m in rows if m["tenant"]})
    prepared = Prepared(read=len(rows))
    for m in rows:
        replay = _replay(m, keys)
        if isinstance(replay, str):
            prepared.unreplayable[replay] += 1
        else:
            prepared.replays.append(replay)
    return prepared


def _replay(m: Any, keys: dict[tuple[str, str], set[tuple[Any, ...]]]) -> Replay | str:
    """The call as a replay, or the reason it cannot be one."""
    try:
        lineage = RetrieveCall.read(m["lineage"])
    except ValidationError:
        return "lineage_unreadable"
    shape = lineage.request
    if shape is None or not m["tenant"] or not m["actor"]:
        return "request_not_recorded"
    if shape.mode == "expand":
        return "expand"  # decided on the shape its cursor carries, which the row does not hold
    try:
        task = Task.model_validate(shape.task)
    except ValidationError:
        return "task_not_recorded"
    assumed: list[str] = []
    actor = _actor_of(m, lineage, keys, assumed)
    if isinstance(actor, str):
        return actor
    if shape.graph is None:
        assumed.append("graph_defaults")
    at = to_utc(m["created_at"])
    try:
        request_input = replay_input(shape, actor, at)
    except ValueError:
        return "as_of_unreadable"
    return Replay(
        m["trace_id"],
        m["tenant"],
        at,
        m["decision"] == "allow",
        actor,
        task,
        request_input,
        tuple(lineage.subjects or ()),
        _recorded_items(lineage),
        tuple(assumed),
    )


def _actor_of(
    m: Any, lineage: RetrieveCall, keys: dict[tuple[str, str], set[tuple[Any, ...]]], assumed: list[str]
) -> Actor | str:
    actor_id = str(m["actor"]).removeprefix("user:")
    if lineage.actor is not None:
        recorded = lineage.actor
        return Actor(actor_id, m["tenant"], tuple(recorded.roles), tuple(recorded.groups), recorded.clearance)
    candidates = keys.get((m["tenant"], m["actor"]), set())
    if not candidates:
        return "actor_not_recorded"  # no live key says who it is (a JWT actor, a revoked key)
    if len(candidates) > 1:
        return "actor_ambiguous"  # its live keys disagree
    roles, groups, clearance = next(iter(candidates))
    assumed.append("actor_from_key")
    return Actor(actor_id, m["tenant"], roles, groups, clearance)


def _recorded_items(lineage: RetrieveCall) -> tuple[str, ...]:
    ids = [i for found in (lineage.retrieved or {}).values() for i in found]
    ids += [d.id for d in lineage.dropped_by_policy or ()]
    ids += list(lineage.section_pieces or ()) + list(lineage.packed or ())
    return tuple(dict.fromkeys(ids))


def _chunks(ids: Sequence[str]) -> Iterable[list[str]]:
    for start in range(0, len(ids), ID_CHUNK):
        yield list(ids[start : start + ID_CHUNK])


def _read(store: Engine, tenant: str, statement: Select[Any], ids: list[str]) -> list[Record]:
    if not ids:
        return []
    with store.connect() as conn:
        return [
            record_from_row(row) for chunk in _chunks(ids) for row in conn.execute(statement, {"ids": chunk, "tenant": tenant})
        ]


@dataclass(slots=True)
class Envelopes:
    """One tenant's items as stored now: by id, and the ids of each subject's items."""

    records: dict[str, Record] = field(default_factory=dict)
    of_subject: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def reach(self, replay: Replay) -> list[Record]:
        """The call's recorded items and its subjects' items (bounded), as stored now."""
        around = [i for s in replay.subjects for i in [s, *self.of_subject.get(s, [])[:REACH_PER_CALL]]]
        return [self.records[i] for i in dict.fromkeys([*replay.recorded_items, *around]) if i in self.records]

    def linked(self, records: list[Record]) -> list[Record]:
        return [self.records[e] for e in dict.fromkeys(e for r in records for e in r.linked_entities()) if e in self.records]


def load_envelopes(store: Engine, tenant: str, replays: list[Replay]) -> Envelopes:
    """Every envelope the tenant's replays need, read in a few batched queries (tenant-scoped)."""
    ids: BindParameter[Any] = bindparam("ids", expanding=True)
    tenant_is = item.c.tenant == bindparam("tenant")
    by_id = select(item).where(tenant_is, item.c.id.in_(ids))
    about = select(item).where(
        tenant_is,
        item.c.kind != "entity",
        or_(item.c.entity.in_(ids), item.c.attached_to.in_(ids), item.c.edge_from.in_(ids), item.c.edge_to.in_(ids)),
    )
    envelopes = Envelopes()
    subjects = sorted({s for r in replays for s in r.subjects})
    wanted = sorted({i for r in replays for i in r.recorded_items} | set(subjects))
    for record in _read(store, tenant, by_id, wanted) + _read(store, tenant, about.order_by(item.c.id), subjects):
        envelopes.records[record.id] = record
    subject_set = set(subjects)
    for record in sorted(envelopes.records.values(), key=lambda r: r.id):
        for s in dict.fromkeys(e for e in record.linked_entities() if e in subject_set and e != record.id):
            envelopes.of_subject[s].append(record.id)
    missing = sorted({e for r in envelopes.records.values() for e in r.linked_entities()} - envelopes.records.keys())
    for record in _read(store, tenant, by_id.where(item.c.kind == "entity"), missing):
        envelopes.records[record.id] = record
    return envelopes


# ---------------------------------------------------------------------------------------- replaying


async def _decide(engine: PolicyEngine, replay: Replay) -> Constraints | None:
    """The engine's constraints for the call (None for a deny); PolicyUnavailable when it cannot say."""
    result = check_request_result(await engine.evaluate("request", replay.request_input))
    if not result["allow"]:
        return None
    constraints = constraints_from(result)
    if constraints.tenant != replay.tenant:
        raise PolicyUnavailable("policy constraints name a tenant other than the actor's")
    return constraints.with_subjects(replay.subjects)


async def replay_one(current: PolicyEngine, candidate: PolicyEngine, replay: Replay, envelopes: Envelopes) -> Outcome:
    """Both policies on one call: their decisions and, when both allow, their item verdicts."""
    try:
        now = await _decide(current, replay)
    except PolicyUnavailable:
        return Outcome(replay, None, None, failed="current")
    try:
        then = await _decide(candidate, replay)
    except PolicyUnavailable:
        return Outcome(replay, now is not None, None, failed="candidate")
    if now is None or then is None:
        return Outcome(replay, now is not None, then is not None)
    records = envelopes.reach(replay)
    linked = envelopes.linked(records)
    try:
        before = await verify(current, replay.actor, replay.task, now, records, linked)
    except PolicyUnavailable:
        return Outcome(replay, True, True, failed="current")
    try:
        after = await verify(candidate, replay.actor, replay.task, then, records, linked)
    except PolicyUnavailable:
        return Outcome(replay, True, True, failed="candidate")
    by_id = {r.id: r for r in records}
    denied_before, denied_after = dict(before.denied), dict(after.denied)
    return Outcome(
        replay,
        True,
        True,
        newly_allowed=tuple(
            (by_id[i], denied_before.get(i, "not_allowed")) for i in sorted(after.allowed_ids - before.allowed_ids)
        ),
        newly_denied=tuple(
            (by_id[i], denied_after.get(i, "not_allowed")) for i in sorted(before.allowed_ids - after.allowed_ids)
        ),
    )


async def impact(store: Engine, current: PolicyEngine, candidate: PolicyEngine, window: Window) -> dict[str, Any]:
    """Replay the window's calls against both policies; the JSON report (see `report`)."""
    prepared = await anyio.to_thread.run_sync(prepare, store, window)
    by_tenant: dict[str, list[Replay]] = defaultdict(list)
    for replay in prepared.replays:
        by_tenant[replay.tenant].append(replay)
    envelopes = {
        tenant: await anyio.to_thread.run_sync(load_envelopes, store, tenant, replays) for tenant, replays in by_tenant.items()
    }
    outcomes: list[Outcome] = []
    failures: Counter[str] = Counter()
    limiter = anyio.CapacityLimiter(CONCURRENCY)

    async def run(replay: Replay) -> None:
        async with limiter:
            if max(failures.values(), default=0) >= FAILURE_LIMIT:
                return  # a policy that keeps failing would only make the run slow
            outcome = await replay_one(current, candidate, replay, envelopes[replay.tenant])
            outcomes.append(outcome)
            if outcome.failed:
                failures[outcome.failed] += 1

    async with anyio.create_task_group() as group:
        for replay in prepared.replays:
            group.start_soon(run, replay)
    if failures["candidate"] >= FAILURE_LIMIT:
        raise BadRequest(
            f"policies: the candidate failed (it would answer 503) on {FAILURE_LIMIT} recorded calls; impact stopped"
        )
    if failures["current"] >= FAILURE_LIMIT:
        raise PolicyUnavailable(f"the policy in force failed on {FAILURE_LIMIT} recorded calls; impact stopped")
    order = {r.trace_id: n for n, r in enumerate(prepared.replays)}
    outcomes.sort(key=lambda o: order[o.replay.trace_id])
    return report(prepared, outcomes, window, current.revision, candidate.revision)
