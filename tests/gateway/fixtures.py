"""A planted data set: for each hard filter, one item that must surface and one that must never."""

from __future__ import annotations

from typing import Any

from tests.conftest import Gateway

SALES_TASK = {"type": "account_followup", "scope": "sales"}


def doc(item_id: str, text: str, **envelope: Any) -> dict[str, Any]:
    """A document anyone in the tenant may read, in no scope."""
    return {"id": item_id, "kind": "document", "text": text, "acl": ["*"], **envelope}


def memory(item_id: str, text: str, **envelope: Any) -> dict[str, Any]:
    return {"id": item_id, "kind": "memory", "text": text, "acl": ["*"], "scope": ["sales"], **envelope}


# Forbidden for alice (tenant acme, group sales, clearance confidential, task account_followup/sales).
FORBIDDEN = {
    "acl": memory("mem_acl", "quokkaacl finance only note", acl=["group:finance", "user:someoneelse"]),
    "sensitivity": memory("mem_restricted", "quokkasens restricted margin note", sensitivity="restricted"),
    "expired": memory(
        "mem_expired", "quokkaexpired old quote", valid_from="2025-01-01T00:00:00Z", valid_to="2026-01-01T00:00:00Z"
    ),
    "not_yet_valid": memory("mem_future", "quokkafuture next year plan", valid_from="2030-01-01T00:00:00Z"),
    "scope": memory("mem_support_scope", "quokkascope support ticket note", scope=["support"]),
    "attachment": memory("mem_attached_other", "quokkaattach other customer note", entity="ent_other", attached_to="ent_other"),
    "status": memory("mem_retracted", "quokkastatus retracted claim", status="retracted"),
}
# The visible twin of each: same shape, passing every filter.
VISIBLE = {
    "acl": memory("mem_acl_ok", "wombatacl sales group note", acl=["group:sales"]),
    "sensitivity": memory("mem_confidential_ok", "wombatsens confidential note", sensitivity="confidential"),
    "expired": memory(
        "mem_valid_ok", "wombatexpired current quote", valid_from="2025-01-01T00:00:00Z", valid_to="2030-01-01T00:00:00Z"
    ),
    "not_yet_valid": memory("mem_started_ok", "wombatfuture started plan", valid_from="2020-01-01T00:00:00Z"),
    "scope": memory("mem_sales_scope_ok", "wombatscope sales note", scope=["sales", "support"]),
    "attachment": memory("mem_attached_jane_ok", "wombatattach jane note", entity="ent_jane", attached_to="ent_jane"),
    "status": memory("mem_disputed_ok", "wombatstatus disputed claim", status="disputed"),
}
ENTITIES = [
    {"id": "ent_jane", "kind": "entity", "entity_type": "contact", "name": "Jane", "email": "jane@globex.example", "acl": ["*"]},
    {
        "id": "ent_other",
        "kind": "entity",
        "entity_type": "contact",
        "name": "Other",
        "email": "other@initech.example",
        "acl": ["*"],
    },
    {
        "id": "ent_secret",
        "kind": "entity",
        "entity_type": "contact",
        "name": "Secret",
        "email": "secret@initech.example",
        "acl": ["group:executives"],
    },
]
JANE_PRIVATE = [
    memory("mem_jane_finance", "quokkajane finance remark", entity="ent_jane", attached_to="ent_jane", acl=["group:finance"]),
    memory("mem_secret_note", "quokkasecretent note", entity="ent_secret", attached_to="ent_secret"),
]
OTHER_TENANT = [
    memory("mem_other_tenant", "quokkatenant globex pricing"),
    memory("mem_acl_ok", "quokkacollision same id other tenant"),
    {
        "id": "ent_jane",
        "kind": "entity",
        "entity_type": "contact",
        "name": "Jane G",
        "email": "jane@globex.example",
        "acl": ["*"],
    },
]


def seed(gateway: Gateway) -> str:
    """Load the planted set and return alice's key."""
    gateway.ingest("acme", ENTITIES + list(FORBIDDEN.values()) + list(VISIBLE.values()) + JANE_PRIVATE)
    gateway.ingest("globex", OTHER_TENANT)
    return gateway.key("alice", groups=("sales",), clearance="confidential")
