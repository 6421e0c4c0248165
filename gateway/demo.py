"""A small multi-tenant demo data set, generated with its actors' keys."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine

from gateway.auth import create_api_key
from gateway.writes.entities import merge
from gateway.writes.items import IngestReport, ingest

ACTORS: dict[str, dict[str, Any]] = {
    "alice@acme": {
        "tenant": "acme",
        "principal": "user:alice",
        "roles": ["agent"],
        "groups": ["sales"],
        "clearance": "confidential",
        "about": "sales agent, clearance confidential",
    },
    "bob@acme": {
        "tenant": "acme",
        "principal": "user:bob",
        "roles": ["agent"],
        "groups": ["support"],
        "clearance": "internal",
        "about": "support agent, clearance internal",
    },
    "carol@acme": {
        "tenant": "acme",
        "principal": "user:carol",
        "roles": ["agent"],
        "groups": ["compliance"],
        "clearance": "restricted",
        "about": "compliance reviewer: the only demo actor granted compliance_review",
    },
    "ingest@acme": {
        "tenant": "acme",
        "principal": "user:loader",
        "roles": ["ingest"],
        "groups": [],
        "clearance": "internal",
        "about": "writer for PUT /v1/items",
    },
    "gina@globex": {
        "tenant": "globex",
        "principal": "user:gina",
        "roles": ["agent"],
        "groups": ["sales"],
        "clearance": "restricted",
        "about": "sales agent of another tenant",
    },
}


def _acme_items() -> list[dict[str, Any]]:
    everyone = ["*"]
    sales = ["group:sales"]
    return [
        {
            "id": "ent_jane",
            "kind": "entity",
            "entity_type": "contact",
            "name": "Jane Roe",
            "email": "jane@globex.example",
            "acl": everyone,
            "sensitivity": "internal",
        },
        {
            "id": "ent_globex",
            "kind": "entity",
            "entity_type": "company",
            "name": "Globex Corporation",
            "website": "https://www.globex.example",
            "acl": everyone,
            "sensitivity": "internal",
        },
        {
            "id": "ent_sam",
            "kind": "entity",
            "entity_type": "contact",
            "name": "Sam Poe",
            "email": "sam@initech.example",
            "acl": everyone,
            "sensitivity": "internal",
        },
        {
            "id": "prop_jane_stage",
            "kind": "property",
            "entity": "ent_jane",
            "name": "deal_stage",
            "value": "negotiation",
            "acl": sales,
            "scope": ["sales"],
            "authority": "approved",
            "attached_to": "ent_jane",
            "recorded_at": "2026-10-01T09:00:00Z",
            "source": {"system": "crm", "uri": "crm://deals/17"},
        },
        {
            "id": "prop_jane_plan",
            "kind": "property",
            "entity": "ent_jane",
            "name": "plan",
            "value": "Business annual",
            "acl": sales,
            "scope": ["sales"],
            "authority": "approved",
            "attached_to": "ent_jane",
            "slot": "ent_jane#plan",
            "recorded_at": "2026-09-15T09:00:00Z",
            "source": {"system": "billing", "uri": "billing://accounts/88"},
        },
        {
            "id": "prop_jane_plan_guess",
            "kind": "property",
            "entity": "ent_jane",
            "name": "plan",
            "value": "Enterprise (guess)",
            "acl": sales,
            "scope": ["sales"],
            "authority": "speculative",
            "attached_to": "ent_jane",
            "slot": "ent_jane#plan",
            "recorded_at": "2026-11-25T09:00:00Z",
            "source": {"system": "notes", "uri": "notes://jane/7"},
        },
        {
            "id": "ent_jane_old",
            "kind": "entity",
            "entity_type": "contact",
            "name": "J. Roe (duplicate)",
            "phone": "+1 (555) 010-2000",
            "acl": everyone,
            "sensitivity": "internal",
        },
        {
            "id": "mem_jane_old_call",
            "kind": "memory",
            "entity": "ent_jane_old",
            "text": "Called about pricing for the Berlin office.",
            "acl": sales,
            "scope": ["sales"],
            "authority": "reviewed",
            "recorded_at": "2026-07-01T10:00:00Z",
            "tags": ["pricing"],
        },
        {
            "id": "ent_pat",
            "kind": "entity",
            "entity_type": "contact",
            "name": "Pat Doe",
            "email": "pat@globex.example",
            "acl": everyone,
            "sensitivity": "internal",
        },
        {
            "id": "edge_jane_globex",
            "kind": "edge",
            "from": "ent_jane",
            "relation": "works_at",
            "to": "ent_globex",
            "confidence": 0.95,
            "weight": 1.0,
            "acl": everyone,
        },
        {
            "id": "edge_jane_pat",
            "kind": "edge",
            "from": "ent_jane",
            "relation": "reports_to",
            "to": "ent_pat",
            "confidence": 0.8,
            "weight": 1.0,
            "acl": sales,
            "scope": ["sales"],
        },
        {
            "id": "mem_jane_billing",
            "kind": "memory",
            "entity": "ent_jane",
            "text": "Jane asked about annual billing and a pricing discount for 40 seats.",
            "acl": sales,
            "scope": ["sales"],
            "authority": "reviewed",
            "attached_to": "ent_jane",
            "recorded_at": "2026-09-12T15:02:00Z",
            "source": {"system": "crm", "uri": "crm://calls/991"},
            "tags": ["pricing"],
        },
        {
            "id": "mem_jane_old_quote",
            "kind": "memory",
            "entity": "ent_jane",
            "text": "Quoted list pricing without discount in spring.",
            "acl": sales,
            "scope": ["sales"],
            "authority": "reviewed",
            "attached_to": "ent_jane",
            "valid_to": "2026-06-30T00:00:00Z",
            "recorded_at": "2026-04-02T10:00:00Z",
            "source": {"system": "crm", "uri": "crm://calls/512"},
            "tags": ["pricing"],
        },
        {
            "id": "mem_jane_speculation",
            "kind": "memory",
            "entity": "ent_jane",
            "text": "Might churn if the discount is refused (speculation).",
            "acl": sales,
            "scope": ["sales"],
            "authority": "speculative",
            "attached_to": "ent_jane",
            "recorded_at": "2026-11-20T08:00:00Z",
        },
        {
            "id": "mem_sam_pricing",
            "kind": "memory",
            "entity": "ent_sam",
            "text": "Sam negotiated a pricing discount of 15 percent.",
            "acl": sales,
            "scope": ["sales"],
            "attached_to": "ent_sam",
            "recorded_at": "2026-08-01T10:00:00Z",
            "tags": ["pricing"],
        },
        {
            "id": "doc_discount_rules",
            "kind": "document",
            "document": "pricing_guideline",
            "section": "Discount rules",
            "text": "Discounts above 20 percent on pricing need approval from the sales director. Annual billing earns 10 percent.",
            "acl": everyone,
            "scope": ["sales"],
            "authority": "approved",
            "sensitivity": "internal",
            "valid_from": "2026-01-01T00:00:00Z",
            "source": {"system": "wiki", "uri": "wiki://pricing#discount-rules"},
            "tags": ["pricing"],
        },
        {
            "id": "doc_discount_rules_2025",
            "kind": "document",
            "document": "pricing_guideline_2025",
            "section": "Discount rules",
            "text": "Discounts above 30 percent on pricing need approval (2025 rules).",
            "acl": everyone,
            "scope": ["sales"],
            "authority": "approved",
            "valid_from": "2025-01-01T00:00:00Z",
            "valid_to": "2026-01-01T00:00:00Z",
            "tags": ["pricing"],
        },
        {
            "id": "doc_margin_floor",
            "kind": "document",
            "document": "pricing_guideline",
            "section": "Margin floor",
            "text": "The pricing margin floor is 42 percent; never discount below it.",
            "acl": ["group:finance", "group:sales"],
            "scope": ["sales"],
            "authority": "approved",
            "sensitivity": "restricted",
            "tags": ["pricing"],
        },
        {
            "id": "doc_refund_policy",
            "kind": "document",
            "document": "support_handbook",
            "section": "Refunds",
            "text": "Refunds for annual billing are prorated; pricing exceptions go to support leads.",
            "acl": everyone,
            "scope": ["support"],
            "authority": "approved",
            "tags": ["billing"],
        },
        {
            "id": "doc_board_minutes",
            "kind": "document",
            "document": "board_minutes",
            "section": "Pricing strategy",
            "text": "The board discussed pricing strategy and acquisition targets.",
            "acl": ["group:executives"],
            "authority": "approved",
            "sensitivity": "confidential",
        },
    ]


def _globex_items() -> list[dict[str, Any]]:
    return [
        {
            "id": "doc_globex_pricing",
            "kind": "document",
            "document": "globex_price_book",
            "section": "Pricing",
            "text": "Globex internal pricing: discount up to 50 percent for partners.",
            "acl": ["*"],
            "scope": ["sales"],
            "authority": "approved",
        },
        {
            "id": "mem_jane_billing",
            "kind": "memory",
            "text": "Another tenant's memory with the same id about pricing.",
            "acl": ["*"],
            "scope": ["sales"],
        },
    ]


def load_demo(engine: Engine) -> tuple[dict[str, tuple[str, str]], IngestReport]:
    """Write the demo items (idempotent) and create one fresh key per demo actor."""
    report = ingest(engine, "acme", _acme_items())
    merge(engine, "acme", "ent_jane_old", "ent_jane")  # a duplicate record, resolved to its survivor
    other = ingest(engine, "globex", _globex_items())
    for name in ("created", "updated", "unchanged"):
        setattr(report, name, getattr(report, name) + getattr(other, name))
    report.rejected.extend(other.rejected)
    tokens = {}
    for name, actor in ACTORS.items():
        key = create_api_key(
            engine,
            tenant=actor["tenant"],
            principal=actor["principal"],
            roles=actor["roles"],
            groups=actor["groups"],
            clearance=actor["clearance"],
        )
        tokens[name] = (actor["about"], key)
    return tokens, report
