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

denied := [{"id": id, "reason": first_failure(id)} | some id in failed_ids]

failed_ids := {id | some [id, _] in failures}

# Reasons in the order they are reported; the first failing check names the denial.
reason_order := ["tenant", "acl", "sensitivity", "validity", "scope", "kind", "status", "attachment", "linked_entity"]

first_failure(id) := [r | some r in reason_order; [id, r] in failures][0]

actor_principals := lib.principals(input.actor)

instant_ns := time.parse_rfc3339_ns(input.constraints.valid_at) if is_string(input.constraints.valid_at)

subjects := object.get(input, "subjects", [])

failures contains [item.id, "tenant"] if {
	some item in input.items
	not object.get(item, "tenant", null) == input.constraints.tenant
}

failures contains [item.id, "acl"] if {
	some item in input.items
	not lib.acl_matches(object.get(item, "acl", []), actor_principals)
}

failures contains [item.id, "sensitivity"] if {
	some item in input.items
	not object.get(item, "sensitivity", null) in input.constraints.sensitivities
}

failures contains [item.id, "validity"] if {
	some item in input.items
	not valid(item)
}

failures contains [item.id, "scope"] if {
	some item in input.items
	not lib.scope_matches(object.get(item, "scope", []), input.constraints.scopes)
}

failures contains [item.id, "kind"] if {
	some item in input.items
	not lib.kind_allowed(object.get(item, "kind", null), input.constraints.kinds)
}

failures contains [item.id, "status"] if {
	some item in input.items
	not object.get(item, "status", null) in readable_statuses(object.get(item, "kind", null))
}

# An entity pending deletion may still be read as a bare tombstone; nothing else that is.
readable_statuses(kind) := object.get(input.constraints, "entity_statuses", input.constraints.statuses) if {
	kind == "entity"
} else := input.constraints.statuses

# With history, an item counts if it had started by the instant, whether or not it has ended since.
valid(item) if lib.valid_at(item, instant_ns)

valid(item) if {
	input.constraints.history == true
	lib.starts_before(object.get(item, "valid_from", null), instant_ns)
}

failures contains [item.id, "attachment"] if {
	some item in input.items
	not lib.attachment_matches(object.get(item, "attached_to", null), subjects)
}

# An item that names an entity the actor may not see is not seen either: an edge shows only when
# both its ends do, and a note about a hidden record stays hidden. A name the store does not hold
# (absent from `entities`) reveals nothing and holds nothing back.
failures contains [item.id, "linked_entity"] if {
	some item in input.items
	some field in ["entity", "attached_to", "edge_from", "edge_to"]
	linked := object.get(item, field, null)
	is_string(linked)
	entity := object.get(object.get(input, "entities", {}), linked, null)
	entity != null
	not entity_visible(entity)
}

entity_visible(entity) if {
	object.get(entity, "kind", null) == "entity"
	object.get(entity, "tenant", null) == input.constraints.tenant
	lib.acl_matches(object.get(entity, "acl", []), actor_principals)
	object.get(entity, "sensitivity", null) in input.constraints.sensitivities
	valid(entity)
	lib.scope_matches(object.get(entity, "scope", []), input.constraints.scopes)
	object.get(entity, "status", null) in input.constraints.statuses
}
