package gateway.request_robustness_test

# allow implies complete constraints; a malformed actor never raises, it is refused or narrowed.

import data.gateway.request
import data.gateway.request_test as rt

consistent(inp) if not request.allow with input as inp

consistent(inp) if {
	request.allow with input as inp
	request.constraints with input as inp
}

test_actor_without_id_is_refused_with_constraints_consistent if {
	consistent(rt.without_actor_fields(["id"]))
	not request.allow with input as rt.without_actor_fields(["id"])
}

test_missing_now_is_never_allowed_without_constraints if {
	consistent(object.remove(rt.base_input, ["now"]))
}

test_null_groups_does_not_raise if {
	# research is granted to every agent, so the null groups are all that is under test
	request.allow with input as object.union(rt.with_actor({"groups": null}), {"task": {"type": "research"}})
	request.reasons == {"task_not_granted"} with input as rt.with_actor({"groups": null})
}
