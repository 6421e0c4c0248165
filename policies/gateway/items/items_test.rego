package gateway.items_test

import data.gateway.items

# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------

instant := "2024-06-01T12:00:00Z"

base_actor := {
	"id": "u1",
	"tenant": "acme",
	"groups": ["sales-team"],
	"roles": ["agent"],
	"clearance": "confidential",
}

# What gateway.request produces for base_actor on an account_followup task.
base_constraints := {
	"tenant": "acme",
	"principals": ["user:u1", "*", "group:sales-team", "role:agent"],
	"max_sensitivity": "confidential",
	"sensitivities": ["public", "internal", "confidential"],
	"valid_at": instant,
	"scopes": ["sales"],
	"kinds": ["property", "memory", "document", "edge"],
	"statuses": ["active", "superseded", "disputed"],
	"graph": {"relations": ["works_at", "reports_to", "owns"], "max_depth": 2},
}

subject := "entity:acme-corp"

base_item := {
	"id": "i1",
	"tenant": "acme",
	"acl": ["user:u1"],
	"sensitivity": "internal",
	"valid_from": "2024-01-01T00:00:00Z",
	"valid_to": "2025-01-01T00:00:00Z",
	"scope": ["sales"],
	"kind": "memory",
	"status": "active",
	"attached_to": null,
}

item_with(patch) := object.union(base_item, patch)

batch(item_list) := {
	"actor": base_actor,
	"task": {"type": "account_followup"},
	"constraints": base_constraints,
	"subjects": [subject],
	"items": item_list,
}

# The single item is allowed and nothing is denied.
allows(item) if {
	items.allowed == [item.id] with input as batch([item])
	items.denied == [] with input as batch([item])
}

# The single item is denied for exactly this reason and not allowed.
denies(item, reason) if {
	items.allowed == [] with input as batch([item])
	items.denied == [{"id": item.id, "reason": reason}] with input as batch([item])
}

# ---------------------------------------------------------------------------
# Happy path
# ---------------------------------------------------------------------------

test_allowed_when_everything_matches if {
	allows(base_item)
}

# ---------------------------------------------------------------------------
# tenant
# ---------------------------------------------------------------------------

test_deny_tenant_mismatch if {
	denies(item_with({"tenant": "globex"}), "tenant")
	denies(object.remove(base_item, ["tenant"]), "tenant")
}

# ---------------------------------------------------------------------------
# acl
# ---------------------------------------------------------------------------

test_acl_each_principal_kind_grants if {
	every p in ["user:u1", "group:sales-team", "role:agent", "*"] {
		allows(item_with({"acl": [p]}))
	}

	# one matching entry among non-matching ones is enough
	allows(item_with({"acl": ["user:u2", "role:agent"]}))
}

test_deny_acl_without_matching_principal if {
	denies(item_with({"acl": ["user:u2", "group:legal", "role:admin"]}), "acl")
	denies(item_with({"acl": []}), "acl")
	denies(object.remove(base_item, ["acl"]), "acl")
}

# ---------------------------------------------------------------------------
# sensitivity
# ---------------------------------------------------------------------------

test_deny_sensitivity_above_ceiling if {
	denies(item_with({"sensitivity": "restricted"}), "sensitivity")
	denies(item_with({"sensitivity": "ultra"}), "sensitivity")
}

# ---------------------------------------------------------------------------
# validity: [valid_from, valid_to) around constraints.valid_at
# ---------------------------------------------------------------------------

test_deny_valid_from_in_future if {
	denies(item_with({"valid_from": "2024-06-01T12:00:01Z"}), "validity")

	# the interval is closed at its start
	allows(item_with({"valid_from": instant}))
}

test_deny_valid_to_in_past if {
	denies(item_with({"valid_to": "2024-05-31T00:00:00Z"}), "validity")
}

test_deny_valid_to_equal_to_instant if {
	denies(item_with({"valid_to": instant}), "validity")
}

test_open_validity_ends_allowed if {
	allows(item_with({"valid_from": null, "valid_to": null}))
	allows(object.remove(base_item, ["valid_from", "valid_to"]))
}

# ---------------------------------------------------------------------------
# scope
# ---------------------------------------------------------------------------

test_empty_item_scope_matches_any if {
	allows(item_with({"scope": []}))
}

test_deny_scope_not_intersecting if {
	denies(item_with({"scope": ["legal", "support"]}), "scope")

	# a single shared scope is enough
	allows(item_with({"scope": ["legal", "sales"]}))
}

# ---------------------------------------------------------------------------
# kind
# ---------------------------------------------------------------------------

test_deny_kind_not_in_constraints if {
	denies(item_with({"kind": "secret_note"}), "kind")
}

# ---------------------------------------------------------------------------
# status
# ---------------------------------------------------------------------------

test_deny_unreadable_status if {
	every s in ["retracted", "pending_deletion"] {
		denies(item_with({"status": s}), "status")
	}
	every s in ["active", "superseded", "disputed"] {
		allows(item_with({"status": s}))
	}
}

# ---------------------------------------------------------------------------
# attachment
# ---------------------------------------------------------------------------

test_attachment_null_missing_or_to_subject_passes if {
	allows(item_with({"attached_to": null}))
	allows(object.remove(base_item, ["attached_to"]))
	allows(item_with({"attached_to": subject}))
}

test_deny_attachment_to_other_entity if {
	denies(item_with({"attached_to": "entity:globex"}), "attachment")
}

# ---------------------------------------------------------------------------
# Missing fields, reason ordering, batches
# ---------------------------------------------------------------------------

test_item_missing_fields_is_denied if {
	inp := batch([{"id": "x"}])
	not "x" in items.allowed with input as inp
	items.denied == [{"id": "x", "reason": "tenant"}] with input as inp
}

# One patch per check, in the documented reporting order.
breakers := [
	["tenant", {"tenant": "globex"}],
	["acl", {"acl": ["user:u2"]}],
	["sensitivity", {"sensitivity": "restricted"}],
	["validity", {"valid_to": "2024-01-02T00:00:00Z"}],
	["scope", {"scope": ["legal"]}],
	["kind", {"kind": "secret_note"}],
	["status", {"status": "retracted"}],
	["attachment", {"attached_to": "entity:globex"}],
]

test_first_failing_check_is_reported if {
	# Break check i and every later check: check i must be the reason.
	every i, entry in breakers {
		patches := [patch | some j, [_, patch] in breakers; j >= i]
		denies(object.union(base_item, object.union_n(patches)), entry[0])
	}
}

test_mixed_batch if {
	batch_items := [
		item_with({"id": "ok-1"}),
		item_with({"id": "bad-tenant", "tenant": "globex"}),
		item_with({"id": "ok-2", "acl": ["group:sales-team"], "scope": []}),
		item_with({"id": "bad-status", "status": "pending_deletion"}),
		item_with({"id": "bad-kind", "kind": "secret_note"}),
	]
	inp := batch(batch_items)
	items.allowed == ["ok-1", "ok-2"] with input as inp
	denied := {d | some d in items.denied} with input as inp
	denied == {
		{"id": "bad-tenant", "reason": "tenant"},
		{"id": "bad-status", "reason": "status"},
		{"id": "bad-kind", "reason": "kind"},
	}
}

test_tombstoned_entity_readable_as_tombstone_only if {
	tomb := item_with({"id": "ent_gone", "kind": "entity", "status": "pending_deletion"})
	note := item_with({"id": "mem_gone", "status": "pending_deletion"})
	with_entity_statuses := object.union(batch([tomb, note]), {"constraints": object.union(
		base_constraints,
		{"entity_statuses": ["active", "superseded", "disputed", "pending_deletion"]},
	)})
	items.allowed == ["ent_gone"] with input as with_entity_statuses
	items.denied == [{"id": "mem_gone", "reason": "status"}] with input as with_entity_statuses
}

test_tombstoned_entity_denied_without_entity_statuses if {
	denies(item_with({"kind": "entity", "status": "pending_deletion"}), "status")
}

history_batch(item_list) := object.union(batch(item_list), {"constraints": object.union(base_constraints, {"history": true})})

test_history_admits_ended_items_but_not_future_ones if {
	ended := item_with({"id": "ended", "valid_from": "2023-01-01T00:00:00Z", "valid_to": "2024-01-01T00:00:00Z"})
	future := item_with({"id": "future", "valid_from": "2025-01-01T00:00:00Z", "valid_to": null})
	items.allowed == ["ended"] with input as history_batch([ended, future])
	items.denied == [{"id": "future", "reason": "validity"}] with input as history_batch([ended, future])
	denies(ended, "validity")
}

# ---------------------------------------------------------------------------
# linked entities: an edge shows only when both its ends do
# ---------------------------------------------------------------------------

visible_entity := {
	"id": "ent_visible", "kind": "entity", "tenant": "acme", "acl": ["user:u1"], "sensitivity": "internal",
	"valid_from": null, "valid_to": null, "scope": [], "status": "active",
}

with_entities(item_list, entities) := object.union(batch(item_list), {"entities": entities})

test_an_edge_to_a_hidden_entity_is_denied if {
	edge := item_with({"id": "e1", "kind": "edge", "edge_from": "ent_visible", "edge_to": "ent_secret"})
	secret := object.union(visible_entity, {"id": "ent_secret", "acl": ["group:finance"]})
	entities := {"ent_visible": visible_entity, "ent_secret": secret}
	items.allowed == [] with input as with_entities([edge], entities)
	items.denied == [{"id": "e1", "reason": "linked_entity"}] with input as with_entities([edge], entities)

	# both ends visible: allowed
	items.allowed == ["e1"] with input as with_entities([edge], {"ent_visible": visible_entity, "ent_secret": object.union(secret, {"acl": ["*"]})})
}

test_every_link_field_is_checked_and_every_rule_of_the_entity if {
	hidden_by := [
		{"acl": ["group:finance"]},
		{"sensitivity": "restricted"},
		{"scope": ["legal"]},
		{"status": "retracted"},
		{"valid_to": "2024-02-01T00:00:00Z"},
		{"tenant": "globex"},
	]
	every field in ["entity", "attached_to", "edge_from", "edge_to"] {
		every patch in hidden_by {
			note := item_with({"id": "n1", field: "ent_x"})
			hidden := object.union(object.union(visible_entity, {"id": "ent_x"}), patch)
			inp := object.union(with_entities([note], {"ent_x": hidden}), {"subjects": [subject, "ent_x"]})
			items.denied == [{"id": "n1", "reason": "linked_entity"}] with input as inp
			items.allowed == ["n1"] with input as object.union(inp, {"entities": {"ent_x": object.union(visible_entity, {"id": "ent_x"})}})
		}
	}
}

test_a_name_the_store_does_not_hold_holds_nothing_back if {
	note := item_with({"id": "n2", "entity": "ent_unknown"})
	items.allowed == ["n2"] with input as with_entities([note], {})
	items.allowed == ["n2"] with input as batch([note])
}
