# METADATA
# title: Request decision, with break-glass access
# description: |
#   Entry point data.gateway.request. Input {actor, task, request, now}; the
#   result is {allow, reasons, constraints}. Constraints are the hard filters
#   every connector pushes down into its own query. This copy of the shipped
#   policy adds break-glass task types (data.gateway.break_glass): an allowed
#   break-glass call names its ticket in `reasons`, so every audit row has it.
# entrypoint: true
package gateway.request

import data.gateway.config
import data.gateway.lib

default allow := false

allow if {
	count(refusals) == 0
	candidate_constraints
}

# Fail closed: a request the policy cannot turn into complete constraints is never allowed.
# An allowed break-glass call carries its ticket as a reason, so the audit row records it.
reasons := refusals if count(refusals) > 0
else := {"incomplete_constraints"} if not candidate_constraints
else := break_glass_reasons

task_config := config.task_types[input.task.type]

refusals contains "actor_without_tenant" if not is_tenant(object.get(input.actor, "tenant", null))

refusals contains "actor_without_id" if not is_tenant(object.get(input.actor, "id", null))

refusals contains "missing_retrieve_role" if {
	roles := {r | some r in lib.names(input.actor, "roles")}
	count(roles & {r | some r in config.retrieve_roles}) == 0
}

refusals contains "unknown_task_type" if not task_config

# A task type is granted, never chosen: the caller's principals must meet the task's `grants`.
# A task type without grants is usable by nobody.
refusals contains "task_not_granted" if {
	task_config
	not task_granted
}

task_granted if {
	some p in lib.principals(input.actor)
	p in lib.names(task_config, "grants")
}

# Time travel is bounded: an `as_of` later than now (beyond the clock skew) reads what is not yet
# true, such as an embargoed document; only principals the task's `future_reads` names may.
refusals contains "as_of_in_future" if {
	is_string(input.request.as_of)
	is_string(input.now)
	time.parse_rfc3339_ns(input.request.as_of) > time.parse_rfc3339_ns(input.now) + skew_ns
	not future_reads_granted
}

skew_ns := object.get(config, "as_of_skew_seconds", 5) * 1000000000 if {
	is_number(object.get(config, "as_of_skew_seconds", 5))
} else := 5000000000

future_reads_granted if {
	task_config
	some p in lib.principals(input.actor)
	p in lib.names(task_config, "future_reads")
}

refusals contains "scope_not_allowed_for_task" if {
	not break_glass
	scope := object.get(input.task, "scope", null)
	scope != null
	not scope in object.get(task_config, "scopes", [])
}

refusals contains "unknown_clearance" if {
	not lib.sensitivity_rank(config.sensitivity_levels, object.get(input.actor, "clearance", null))
}

# Break-glass: a task type data.gateway.break_glass lists. It is granted like every task type
# (its `grants` name a group such as group:incident-responders), and the task's `scope` carries the
# incident ticket, which must match the ticket pattern; the ticket never widens access by itself.
break_glass if input.task.type in data.gateway.break_glass.task_types

ticket := input.task.scope if {
	break_glass
	is_string(input.task.scope)
	regex.match(data.gateway.break_glass.ticket_pattern, input.task.scope)
}

refusals contains "break_glass_without_ticket" if {
	break_glass
	not ticket
}

break_glass_reasons contains sprintf("break_glass:%s", [ticket])

is_tenant(t) if {
	is_string(t)
	t != ""
}

# The sensitivity ceiling is the lower of the actor's clearance and the task's maximum;
# break-glass lifts the clearance cap up to the break-glass task's own maximum.
ceiling_rank := lib.sensitivity_rank(config.sensitivity_levels, task_config.max_sensitivity) if {
	break_glass
} else := min({
	lib.sensitivity_rank(config.sensitivity_levels, input.actor.clearance),
	lib.sensitivity_rank(config.sensitivity_levels, task_config.max_sensitivity),
})

sensitivities := [level | some i, level in config.sensitivity_levels; i <= ceiling_rank]

# Break-glass reads every scope of its task type: its `scope` is the ticket, not a scope.
scopes := task_config.scopes if {
	break_glass
} else := [input.task.scope] if {
	is_string(input.task.scope)
} else := task_config.scopes

# The caller may narrow the kinds, never widen them.
kinds := [k | some k in task_config.kinds; k in input.request.kinds] if {
	is_array(input.request.kinds)
} else := task_config.kinds

relations := [r | some r in task_config.graph.relations; r in input.request.graph.relations] if {
	is_array(input.request.graph.relations)
} else := task_config.graph.relations

max_depth := min({task_config.graph.max_depth, input.request.graph.max_depth}) if {
	is_number(input.request.graph.max_depth)
} else := task_config.graph.max_depth

# Edges followed out of any one node: the task's cap, never more than 50.
max_fanout := min({object.get(task_config.graph, "max_fanout", 10), 50})

# History (items whose validity ended before the instant) only when asked for and the task allows it.
history if {
	input.request.include_historical == true
	object.get(task_config, "history", false) == true
}

default history := false

# Personal data: whether returned items are masked for this task (masked unless the task says
# otherwise), and which types this actor may see in clear (granted per principal).
mask_pii := object.get(task_config, "mask_pii", true) if is_boolean(object.get(task_config, "mask_pii", true)) else := true

pii_reveal := sort({t |
	some p in lib.principals(input.actor)
	some t in object.get(object.get(config, "pii_reveal", {}), p, [])
	t in config.pii_types
})

valid_at := input.request.as_of if is_string(input.request.as_of) else := input.now

constraints := candidate_constraints if allow

candidate_constraints := {
	"tenant": input.actor.tenant,
	"principals": lib.principals(input.actor),
	"max_sensitivity": config.sensitivity_levels[ceiling_rank],
	"sensitivities": sensitivities,
	"valid_at": valid_at,
	"history": history,
	"pii": {"mask": mask_pii, "reveal": pii_reveal},
	"scopes": scopes,
	"kinds": kinds,
	"statuses": config.readable_statuses,
	"entity_statuses": config.readable_entity_statuses,
	"graph": {"relations": relations, "max_depth": max_depth, "max_fanout": max_fanout},
}
