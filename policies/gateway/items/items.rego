# METADATA
# title: Item verification
# description: |
#   Entry point data.gateway.items. Input {actor, task, constraints, subjects,
#   items, entities}; the result is {allowed: [ids], denied: [{id, reason}]}.
#   `entities` maps each entity an item names (entity, attached_to, edge_from,
#   edge_to) that the store holds to its envelope. Every check
#   is written as "holds", so an item missing a field is denied, never allowed.
# entrypoint: true
package gateway.items

import data.gateway.lib

allowed := [item.id | some item in input.items; is_string(item.id); not item.id in failed_ids]

# One reason per failed id, the common case, reads straight from `failures`; an id with several
# (an id repeated in the batch, or a reason another rule adds) takes the first in reason_order.
denied := [{"id": id, "reason": r} | some [id, r] in failures; r in known_reasons] if {
	count(failures) == count(failed_ids)
} else := [{"id": id, "reason": first_failure(id)} | some id in failed_ids]

failed_ids := {id | some [id, _] in failures}

# Reasons in the order they are reported; the first failing check names the denial.
reason_order := ["tenant", "acl", "sensitivity", "validity", "scope", "kind", "status", "attachment", "linked_entity"]

known_reasons := {r | some r in reason_order}

first_failure(id) := [r | some r in reason_order; [id, r] in failures][0]

actor_principals := lib.principals(input.actor)

principal_set := {p | some p in actor_principals}

instant_ns := time.parse_rfc3339_ns(input.constraints.valid_at) if is_string(input.constraints.valid_at)

subjects := object.get(input, "subjects", [])

# A constraint is read with a default of []: one that is absent allows nothing on either engine
# (OPA skips a negated check whose argument is undefined, where the embedded engine applies it).
constraint_sensitivities := object.get(input.constraints, "sensitivities", [])

constraint_scopes := object.get(input.constraints, "scopes", [])

constraint_kinds := object.get(input.constraints, "kinds", [])

constraint_statuses := object.get(input.constraints, "statuses", [])

entity_statuses := object.get(input.constraints, "entity_statuses", constraint_statuses)

# Each check is the set of batch positions whose item holds it, built in one pass over the items;
# the first failing check of an item, in reason_order, is then set arithmetic (an item is checked
# once per check, with no function call per item: those dominated the cost of a batch).
positions := {i | some i, _ in input.items}

principals_held := principal_set

sensitivity_set := {s | some s in constraint_sensitivities}

scope_set := {s | some s in constraint_scopes}

kind_set := {k | some k in constraint_kinds}

status_set := {s | some s in constraint_statuses}

entity_status_set := {s | some s in entity_statuses}

subject_set := {s | some s in subjects}

holds_tenant := {i | some i, item in input.items; object.get(item, "tenant", null) == input.constraints.tenant}

holds_acl := {i |
	some i, item in input.items
	is_array(object.get(item, "acl", []))
	some p in item.acl
	p in principals_held
}

holds_sensitivity := {i | some i, item in input.items; object.get(item, "sensitivity", null) in sensitivity_set}

# [valid_from, valid_to) holds the instant; open ends are unbounded. With history, an item counts
# if it had started by the instant, whether or not it has ended since.
started contains i if {
	is_number(instant_ns)
	some i, item in input.items
	object.get(item, "valid_from", null) == null
}

started contains i if {
	some i, item in input.items
	is_string(item.valid_from)
	time.parse_rfc3339_ns(item.valid_from) <= instant_ns
}

not_ended contains i if {
	is_number(instant_ns)
	some i, item in input.items
	object.get(item, "valid_to", null) == null
}

not_ended contains i if {
	some i, item in input.items
	is_string(item.valid_to)
	time.parse_rfc3339_ns(item.valid_to) > instant_ns
}

holds_validity := started if input.constraints.history == true
else := started & not_ended

# An empty scope list (or none) means the item belongs to every scope.
holds_scope contains i if {
	some i, item in input.items
	object.get(item, "scope", []) == []
}

holds_scope contains i if {
	some i, item in input.items
	is_array(item.scope)
	some s in item.scope
	s in scope_set
}

# Entities are governed by every check but the task's kinds: kinds choose what to read about them.
holds_kind := {i | some i, item in input.items; kind_readable(object.get(item, "kind", null))}

kind_readable(kind) if kind == "entity"

kind_readable(kind) if kind in kind_set

# An entity pending deletion may still be read as a bare tombstone; nothing else that is.
holds_status contains i if {
	some i, item in input.items
	object.get(item, "kind", null) == "entity"
	object.get(item, "status", null) in entity_status_set
}

holds_status contains i if {
	some i, item in input.items
	object.get(item, "kind", null) != "entity"
	object.get(item, "status", null) in status_set
}

# Items attached to a record surface only for a request about that record.
holds_attachment contains i if {
	some i, item in input.items
	object.get(item, "attached_to", null) == null
}

holds_attachment contains i if {
	some i, item in input.items
	object.get(item, "attached_to", null) in subject_set
}

# The positions that hold every check up to and including the named one, in reason_order.
past_tenant := positions & holds_tenant

past_acl := past_tenant & holds_acl

past_sensitivity := past_acl & holds_sensitivity

past_validity := past_sensitivity & holds_validity

past_scope := past_validity & holds_scope

past_kind := past_scope & holds_kind

past_status := past_kind & holds_status

past_attachment := past_status & holds_attachment

first_failed := {
	"tenant": positions - past_tenant,
	"acl": past_tenant - past_acl,
	"sensitivity": past_acl - past_sensitivity,
	"validity": past_sensitivity - past_validity,
	"scope": past_validity - past_scope,
	"kind": past_scope - past_kind,
	"status": past_kind - past_status,
	"attachment": past_status - past_attachment,
}

failures contains [input.items[i].id, reason] if {
	some reason, failed in first_failed
	some i in failed
}

# An item that names an entity the actor may not see is not seen either: an edge shows only when
# both its ends do, and a note about a hidden record stays hidden. A name the store does not hold
# (absent from `entities`) reveals nothing and holds nothing back.
failures contains [item.id, "linked_entity"] if {
	count(hidden_entities) > 0 # the common case: nothing to look for, no pass over the items
	some i in past_attachment # an item that failed a check is reported for that one
	item := input.items[i]
	some field in ["entity", "attached_to", "edge_from", "edge_to"]
	linked := object.get(item, field, null)
	is_string(linked)
	linked in hidden_entities
}

# Entities the items name that the actor may not see, each checked once.
hidden_entities := {id |
	some id, entity in object.get(input, "entities", {})
	entity != null
	not entity_visible(entity)
}

entity_visible(entity) if {
	object.get(entity, "kind", null) == "entity"
	object.get(entity, "tenant", null) == input.constraints.tenant
	lib.acl_matches(object.get(entity, "acl", []), principal_set)
	object.get(entity, "sensitivity", null) in constraint_sensitivities
	valid(entity)
	lib.scope_matches(object.get(entity, "scope", []), constraint_scopes)
	object.get(entity, "status", null) in constraint_statuses
}

valid(entity) if lib.valid_at(entity, instant_ns)

valid(entity) if {
	input.constraints.history == true
	lib.starts_before(object.get(entity, "valid_from", null), instant_ns)
}
