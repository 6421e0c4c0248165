package gateway.break_glass_test

import data.gateway.request

responder := {"id": "rita", "tenant": "acme", "groups": ["support", "incident-responders"], "roles": ["agent"], "clearance": "internal"}

agent := object.union(responder, {"id": "sam", "groups": ["support"]})

ask(actor, task) := {"actor": actor, "task": task, "request": {}, "now": "2026-06-01T12:00:00Z"}

emergency := {"type": "break_glass", "scope": "INC-4711"}

test_break_glass_is_allowed_and_names_its_ticket if {
	request.allow with input as ask(responder, emergency)
	request.reasons == {"break_glass:INC-4711"} with input as ask(responder, emergency)
}

test_break_glass_widens_sensitivity_and_scopes if {
	c := request.constraints with input as ask(responder, emergency)
	c.max_sensitivity == "restricted"
	c.scopes == ["sales", "support", "research", "legal"]
	c.tenant == "acme"
	c.pii.mask == true
}

test_the_same_actor_without_break_glass_keeps_its_usual_limits if {
	inp := ask(responder, {"type": "support_ticket"})
	request.reasons == set() with input as inp
	c := request.constraints with input as inp
	c.max_sensitivity == "internal"
	c.scopes == ["support"]
}

test_break_glass_needs_the_granted_group if {
	not request.allow with input as ask(agent, emergency)
	request.reasons == {"task_not_granted"} with input as ask(agent, emergency)
}

test_break_glass_needs_a_ticket if {
	every task in [
		{"type": "break_glass"},
		{"type": "break_glass", "scope": null},
		{"type": "break_glass", "scope": "sales"},
		{"type": "break_glass", "scope": 4711},
	] {
		not request.allow with input as ask(responder, task)
		request.reasons == {"break_glass_without_ticket"} with input as ask(responder, task)
	}
}

test_a_ticket_on_another_task_type_widens_nothing if {
	inp := ask(responder, {"type": "support_ticket", "scope": "INC-4711"})
	not request.allow with input as inp
	request.reasons == {"scope_not_allowed_for_task"} with input as inp
}

test_break_glass_keeps_every_other_refusal if {
	inp := ask(object.union(responder, {"clearance": "top_secret"}), emergency)
	request.reasons == {"unknown_clearance"} with input as inp
	other := ask(object.union(responder, {"roles": ["viewer"]}), emergency)
	request.reasons == {"missing_retrieve_role"} with input as other
}
