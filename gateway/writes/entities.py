"""Writes that change what an entity is: merge into a survivor, mark pending deletion.

Both run in one transaction. A tombstone takes effect for every connector the moment it commits,
because the shared pushdown hides every item that names a tombstoned entity.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, insert, or_, select, update
from sqlalchemy.engine import Connection, Engine

from core.errors import BadRequest, Conflict, NotFound
from core.instants import utc_now
from core.store import writer
from gateway.writes.item_batch import item_table, tombstone_table

MAX_CHAIN = 50
NO_SUCH = "entity: no such entity in this tenant"


def _entity(conn: Connection, tenant: str, entity_id: str) -> Any:
    return conn.execute(
        select(item_table.c.id, item_table.c.status, item_table.c.merged_into).where(
            item_table.c.tenant == tenant, item_table.c.id == entity_id, item_table.c.kind == "entity"
        )
    ).first()


def _tombstoned(conn: Connection, tenant: str, entity_id: str) -> bool:
    return (
        conn.execute(
            select(tombstone_table.c.entity_id).where(
                tombstone_table.c.tenant == tenant, tombstone_table.c.entity_id == entity_id
            )
        ).first()
        is not None
    )


def merge(engine: Engine, tenant: str, source_id: str, into_id: str) -> dict[str, Any]:
    """Point `source_id` at `into_id`. Refuses a merge into itself, into or from an entity pending
    deletion, and one that would close a cycle."""
    if source_id == into_id:
        raise BadRequest("into: an entity cannot be merged into itself")
    with writer(engine).begin() as conn:
        source, target = _entity(conn, tenant, source_id), _entity(conn, tenant, into_id)
        if source is None:
            raise NotFound(NO_SUCH)
        if target is None:
            raise NotFound("into: no such entity in this tenant")
        if _tombstoned(conn, tenant, source_id) or _tombstoned(conn, tenant, into_id):
            raise Conflict("entity: an entity pending deletion cannot be merged")
        survivor, hops = target, 0
        while survivor.merged_into is not None:
            hops += 1
            if survivor.merged_into == source_id or hops > MAX_CHAIN:
                raise Conflict("into: this merge would make a cycle")
            following = _entity(conn, tenant, survivor.merged_into)
            if following is None:
                break
            survivor = following
        if source.merged_into == into_id:
            return {"id": source_id, "into": into_id, "survivor": survivor.id, "changed": False}
        conn.execute(
            update(item_table)
            .where(item_table.c.tenant == tenant, item_table.c.id == source_id)
            .values(merged_into=into_id, updated_at=utc_now())
        )
    return {"id": source_id, "into": into_id, "survivor": survivor.id, "changed": True}


def mark_pending_deletion(engine: Engine, tenant: str, entity_id: str) -> dict[str, Any]:
    """The entity becomes a bare tombstone and everything naming it disappears, in one commit."""
    with writer(engine).begin() as conn:
        if _entity(conn, tenant, entity_id) is None:
            raise NotFound(NO_SUCH)
        changed = not _tombstoned(conn, tenant, entity_id)
        if changed:
            conn.execute(insert(tombstone_table).values(tenant=tenant, entity_id=entity_id, deleted_at=utc_now()))
            conn.execute(
                update(item_table)
                .where(item_table.c.tenant == tenant, item_table.c.id == entity_id, item_table.c.kind == "entity")
                .values(status="pending_deletion", updated_at=utc_now())
            )
        hidden = conn.execute(
            select(func.count()).where(
                item_table.c.tenant == tenant,
                item_table.c.kind != "entity",
                or_(
                    item_table.c.entity == entity_id,
                    item_table.c.attached_to == entity_id,
                    item_table.c.edge_from == entity_id,
                    item_table.c.edge_to == entity_id,
                ),
            )
        ).scalar_one()
    return {"id": entity_id, "status": "pending_deletion", "changed": changed, "hidden_items": int(hidden)}
