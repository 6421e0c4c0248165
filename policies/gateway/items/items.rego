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

failures contains failure if some failure in check_failures

check_failures := {[item.id, reason] | some item in input.items; reason := check_failure(item)}

check_failed_ids := {id | some [id, _] in check_failures}

# The first check the item fails, in reason_order, or undefined when it holds them all: each item
# is checked once, and a failed item carries one reason (not one scan of the items per check).
check_failure(item) := "tenant" if {
	not object.get(item, "tenant", null) == input.constraints.tenant
} else := "acl" if {
	not lib.acl_matches(object.get(item, "acl", []), principal_set)
} else := "sensitivity" if {
	not object.get(item, "sensitivity", null) in constraint_sensitivities
} else := "validity" if {
	not valid(item)
} else := "scope" if {
	not lib.scope_matches(object.get(item, "scope", []), constraint_scopes)
} else := "kind" if {
	not lib.kind_allowed(object.get(item, "kind", null), constraint_kinds)
} else := "status" if {
	not object.get(item, "status", null) in readable_statuses(object.get(item, "kind", null))
} else := "attachment" if {
	not lib.attachment_matches(object.get(item, "attached_to", null), subjects)
}

# An entity pending deletion may still be read as a bare tombstone; nothing else that is.
readable_statuses(kind) := entity_statuses if kind == "entity"
else := constraint_statuses

# With history, an item counts if it had started by the instant, whether or not it has ended since.
valid(item) if lib.valid_at(item, instant_ns)

valid(item) if {
	input.constraints.history == true
	lib.starts_before(object.get(item, "valid_from", null), instant_ns)
}

# An item that names an entity the actor may not see is not seen either: an edge shows only when
# both its ends do, and a note about a hidden record stays hidden. A name the store does not hold
# (absent from `entities`) reveals nothing and holds nothing back.
failures contains [item.id, "linked_entity"] if {
	some item in input.items
	not item.id in check_failed_ids # an item that failed a check is reported for that one
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
