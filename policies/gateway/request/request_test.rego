package gateway.request_test

import data.gateway.request

# ---------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------

now := "2024-06-01T12:00:00Z"

base_actor := {
	"id": "u1",
	"tenant": "acme",
	"groups": ["sales", "support", "compliance"],
	"roles": ["agent"],
	"clearance": "confidential",
}

base_input := {
	"actor": base_actor,
	"task": {"type": "account_followup"},
	"request": {},
	"now": now,
}

# Base input with some actor fields replaced.
with_actor(patch) := object.union(base_input, {"actor": object.union(base_actor, patch)})

# Base input with some actor fields removed.
# (object.union merges recursively, so the actor is dropped from the base first.)
without_actor_fields(keys) := object.union(object.remove(base_input, ["actor"]), {"actor": object.remove(base_actor, keys)})

with_task(task) := object.union(base_input, {"task": task})

with_request(req) := object.union(base_input, {"request": req})

# ---------------------------------------------------------------------------
# allow / reasons
# ---------------------------------------------------------------------------

test_allow_agent_with_known_task if {
	request.allow with input as base_input
	count(request.reasons) == 0 with input as base_input

	# any one of the configured retrieve roles is enough
	every role in ["agent", "policy_admin"] {
		request.allow with input as with_actor({"roles": ["viewer", role]})
	}
}

test_deny_missing_retrieve_role if {
	every inp in [with_actor({"roles": ["viewer"]}), without_actor_fields(["roles"])] {
		not request.allow with input as inp
		request.reasons == {"missing_retrieve_role"} with input as inp
	}
}

test_deny_unknown_task_type if {
	inp := with_task({"type": "world_domination"})
	not request.allow with input as inp
	request.reasons == {"unknown_task_type"} with input as inp
}

test_deny_scope_not_allowed_for_task if {
	# "legal" exists for compliance_review, but not for account_followup.
	inp := with_task({"type": "account_followup", "scope": "legal"})
	not request.allow with input as inp
	request.reasons == {"scope_not_allowed_for_task"} with input as inp
}

test_deny_unknown_clearance if {
	every inp in [with_actor({"clearance": "top_secret"}), without_actor_fields(["clearance"])] {
		not request.allow with input as inp
		request.reasons == {"unknown_clearance"} with input as inp
	}
}

test_deny_actor_without_tenant if {
	every inp in [with_actor({"tenant": ""}), with_actor({"tenant": null}), without_actor_fields(["tenant"])] {
		not request.allow with input as inp
		request.reasons == {"actor_without_tenant"} with input as inp
	}
}

test_reasons_accumulate if {
	inp := object.union(with_actor({"roles": [], "clearance": "cosmic"}), {"task": {"type": "nope"}})
	request.reasons == {"missing_retrieve_role", "unknown_clearance", "unknown_task_type"} with input as inp
}

test_no_constraints_when_denied if {
	every inp in [with_actor({"roles": ["viewer"]}), with_task({"type": "nope"}), with_actor({"tenant": ""})] {
		not request.constraints with input as inp
	}
}

# ---------------------------------------------------------------------------
# constraints
# ---------------------------------------------------------------------------

test_constraints_for_default_request if {
	c := request.constraints with input as base_input
	c == {
		"tenant": "acme",
		"principals": ["user:u1", "*", "group:sales", "group:support", "group:compliance", "role:agent"],
		"max_sensitivity": "confidential",
		"sensitivities": ["public", "internal", "confidential"],
		"valid_at": now,
		"scopes": ["sales"],
		"kinds": ["property", "memory", "document", "edge"],
		"statuses": ["active", "superseded", "disputed"],
		"entity_statuses": ["active", "superseded", "disputed", "pending_deletion"],
		"history": false,
		"pii": {"mask": false, "reveal": []},
		"graph": {"relations": ["works_at", "reports_to", "owns"], "max_depth": 2, "max_fanout": 10},
	}
}

test_constraints_tenant_comes_from_actor if {
	c := request.constraints with input as with_actor({"tenant": "globex"})
	c.tenant == "globex"
}

test_principals_cover_user_groups_roles_and_tenant if {
	inp := with_actor({"id": "u7", "groups": ["sales", "g2"], "roles": ["agent", "auditor"]})
	c := request.constraints with input as inp
	{p | some p in c.principals} == {"user:u7", "group:sales", "group:g2", "role:agent", "role:auditor", "*"}
}

test_sensitivity_ceiling_capped_by_clearance if {
	# clearance internal < account_followup max (confidential)
	c := request.constraints with input as with_actor({"clearance": "internal"})
	c.max_sensitivity == "internal"
	c.sensitivities == ["public", "internal"]
}

test_sensitivity_ceiling_capped_by_task if {
	# clearance restricted > research max (internal)
	inp := object.union(with_actor({"clearance": "restricted"}), {"task": {"type": "research"}})
	c := request.constraints with input as inp
	c.max_sensitivity == "internal"
	c.sensitivities == ["public", "internal"]
}

test_sensitivity_ceiling_follows_config_change if {
	inp := object.union(with_actor({"clearance": "restricted"}), {"task": {"type": "research"}})
	cfg := object.union(data.gateway.config, {"task_types": {"research": {"max_sensitivity": "confidential"}}})
	c := request.constraints with input as inp with data.gateway.config as cfg
	c.max_sensitivity == "confidential"
	c.sensitivities == ["public", "internal", "confidential"]
}

test_kinds_default_to_task_kinds if {
	c := request.constraints with input as with_task({"type": "research"})
	c.kinds == ["document"]
}

test_caller_can_narrow_kinds if {
	c := request.constraints with input as with_request({"kinds": ["memory", "document"]})
	c.kinds == ["memory", "document"]
}

test_caller_cannot_widen_kinds if {
	# support_ticket does not allow "edge"
	inp := object.union(with_task({"type": "support_ticket"}), {"request": {"kinds": ["memory", "edge"]}})
	c := request.constraints with input as inp
	c.kinds == ["memory"]
	not "edge" in c.kinds
}

test_caller_can_narrow_graph if {
	c := request.constraints with input as with_request({"graph": {"relations": ["owns"], "max_depth": 1}})
	c.graph == {"relations": ["owns"], "max_depth": 1, "max_fanout": 10}
}

test_caller_cannot_widen_graph if {
	# support_ticket: relations [works_at], max_depth 1
	inp := object.union(
		with_task({"type": "support_ticket"}),
		{"request": {"graph": {"relations": ["works_at", "owns"], "max_depth": 5}}},
	)
	c := request.constraints with input as inp
	c.graph == {"relations": ["works_at"], "max_depth": 1, "max_fanout": 5}
}

test_valid_at_is_as_of_when_given_else_now if {
	c1 := request.constraints with input as with_request({"as_of": "2023-01-15T00:00:00Z"})
	c1.valid_at == "2023-01-15T00:00:00Z"

	c2 := request.constraints with input as base_input
	c2.valid_at == now
}

test_scopes_are_task_scope_when_given_else_task_type_scopes if {
	c1 := request.constraints with input as with_task({"type": "compliance_review", "scope": "legal"})
	c1.scopes == ["legal"]

	c2 := request.constraints with input as with_task({"type": "compliance_review"})
	c2.scopes == ["sales", "support", "research", "legal"]
}

test_history_only_when_asked_and_allowed if {
	request.constraints.history == true with input as with_request({"include_historical": true})
	request.constraints.history == false with input as with_request({"include_historical": "yes"})
	request.constraints.history == false with input as with_request({})
}

test_pii_masked_for_research_and_revealed_per_principal if {
	research := object.union(base_input, {"task": {"type": "research"}})
	request.constraints.pii == {"mask": true, "reveal": []} with input as research
	cleared := object.union(research, {"actor": object.union(base_input.actor, {"groups": ["privacy-cleared"]})})
	request.constraints.pii == {"mask": true, "reveal": ["EMAIL_ADDRESS", "PHONE_NUMBER"]} with input as cleared
}

# ---------------------------------------------------------------------------
# task grants
# ---------------------------------------------------------------------------

test_a_task_type_is_granted_not_chosen if {
	# An agent outside the compliance group cannot pick compliance_review to widen what it sees.
	inp := object.union(with_actor({"groups": ["sales"]}), {"task": {"type": "compliance_review"}})
	not request.allow with input as inp
	request.reasons == {"task_not_granted"} with input as inp
	not request.constraints with input as inp

	# The same agent may use the tasks granted to its group and to every agent.
	every task in ["account_followup", "research"] {
		request.allow with input as object.union(with_actor({"groups": ["sales"]}), {"task": {"type": task}})
	}
}

test_a_task_type_without_grants_is_usable_by_nobody if {
	no_grants := object.remove(data.gateway.config.task_types.research, ["grants"])
	not request.allow with input as with_task({"type": "research"})
		with data.gateway.config.task_types.research as no_grants
	request.reasons == {"task_not_granted"} with input as with_task({"type": "research"})
		with data.gateway.config.task_types.research as no_grants
}

test_a_grant_may_name_a_role_or_a_user if {
	granted := object.union(data.gateway.config.task_types.compliance_review, {"grants": ["user:u9"]})
	inp := object.union(with_actor({"id": "u9", "groups": []}), {"task": {"type": "compliance_review"}})
	request.allow with input as inp with data.gateway.config.task_types.compliance_review as granted
	not request.allow with input as with_actor({"id": "u8", "groups": []})
		with data.gateway.config.task_types.compliance_review as granted
		with input.task as {"type": "compliance_review"}
}

# ---------------------------------------------------------------------------
# bounded time travel
# ---------------------------------------------------------------------------

test_as_of_in_the_future_is_refused if {
	inp := with_request({"as_of": "2025-06-01T12:00:00Z"})
	not request.allow with input as inp
	request.reasons == {"as_of_in_future"} with input as inp
}

test_as_of_within_the_clock_skew_is_allowed if {
	request.allow with input as with_request({"as_of": "2024-06-01T12:00:04Z"})
	not request.allow with input as with_request({"as_of": "2024-06-01T12:00:06Z"})
	request.allow with input as with_request({"as_of": "2024-06-01T12:00:20Z"}) with data.gateway.config.as_of_skew_seconds as 30
}

test_future_reads_are_granted_per_task if {
	ahead := object.union(data.gateway.config.task_types.account_followup, {"future_reads": ["group:planning"]})
	inp := object.union(with_request({"as_of": "2025-06-01T12:00:00Z"}), {"actor": object.union(base_actor, {"groups": ["sales", "planning"]})})
	request.allow with input as inp with data.gateway.config.task_types.account_followup as ahead
	c := request.constraints with input as inp with data.gateway.config.task_types.account_followup as ahead
	c.valid_at == "2025-06-01T12:00:00Z"
	not request.allow with input as with_request({"as_of": "2025-06-01T12:00:00Z"})
		with data.gateway.config.task_types.account_followup as ahead
}

test_past_as_of_is_not_bounded_by_this_rule if {
	request.allow with input as with_request({"as_of": "2001-01-01T00:00:00Z"})
}
