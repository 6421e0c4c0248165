# METADATA
# title: Shared helpers for the gateway policies
# description: Pure functions over the governance envelope; they take arguments and never read input.
package gateway.lib

# Rank of a sensitivity level, or undefined when the level is unknown.
sensitivity_rank(levels, level) := i if {
	some i, name in levels
	name == level
}

# Principals an actor speaks for: itself, its groups, its roles and the whole tenant.
principals(actor) := array.concat(
	array.concat([sprintf("user:%s", [actor.id]), "*"], [sprintf("group:%s", [g]) | some g in names(actor, "groups")]),
	[sprintf("role:%s", [r]) | some r in names(actor, "roles")],
) if is_string(actor.id)

# A list of strings from an object's field; a missing, null or mistyped field counts as empty.
names(obj, field) := [v | some v in object.get(obj, field, []); is_string(v)] if is_array(object.get(obj, field, []))

names(obj, field) := [] if not is_array(object.get(obj, field, []))

# An RFC3339 field that is present and a string; nulls and open ends are handled by the callers.
# The gateway validates every stored instant at ingest, so a string here parses.
is_time(value) if is_string(value)

# True when the instant lies inside [valid_from, valid_to). Open ends are unbounded.
valid_at(envelope, instant_ns) if {
	starts_before(object.get(envelope, "valid_from", null), instant_ns)
	ends_after(object.get(envelope, "valid_to", null), instant_ns)
}

starts_before(value, _) if value == null

starts_before(value, instant_ns) if {
	is_time(value)
	time.parse_rfc3339_ns(value) <= instant_ns
}

ends_after(value, _) if value == null

ends_after(value, instant_ns) if {
	is_time(value)
	time.parse_rfc3339_ns(value) > instant_ns
}

# An empty scope list means the item belongs to every scope.
scope_matches(item_scopes, _) if {
	is_array(item_scopes)
	count(item_scopes) == 0
}

scope_matches(item_scopes, allowed_scopes) if {
	is_array(item_scopes)
	some s in item_scopes
	s in allowed_scopes
}

acl_matches(acl, actor_principals) if {
	is_array(acl)
	some p in acl
	p in actor_principals
}

# Items attached to a record surface only for a request about that record.
attachment_matches(attached_to, _) if attached_to == null

attachment_matches(attached_to, subjects) if {
	attached_to != null
	attached_to in subjects
}

# Entities are governed by every check but the task's kinds: kinds choose what to read about them.
kind_allowed(kind, _) if kind == "entity"

kind_allowed(kind, kinds) if {
	is_string(kind)
	kind in kinds
}
