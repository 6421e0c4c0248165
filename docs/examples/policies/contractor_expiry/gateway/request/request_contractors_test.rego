package gateway.contractors_test

import data.gateway.request

contractor := {"id": "ann", "tenant": "acme", "groups": ["support"], "roles": ["agent"], "clearance": "internal"}

employee := object.union(contractor, {"id": "bob"})

vendor := object.union(contractor, {"id": "carl", "groups": ["support", "vendor-northwind"]})

ask(actor, now) := {"actor": actor, "task": {"type": "support_ticket"}, "request": {}, "now": now}

test_a_contractor_retrieves_until_the_date if {
	request.allow with input as ask(contractor, "2026-12-30T23:59:59Z")
}

test_a_contractor_is_refused_from_the_date_on if {
	every now in ["2026-12-31T00:00:00Z", "2027-03-01T09:00:00Z"] {
		not request.allow with input as ask(contractor, now)
		request.reasons == {"access_expired"} with input as ask(contractor, now)
	}
}

test_an_unlisted_actor_is_not_affected if {
	request.allow with input as ask(employee, "2030-01-01T00:00:00Z")
}

test_a_listed_group_ends_for_all_its_members if {
	request.allow with input as ask(vendor, "2026-06-29T12:00:00Z")
	request.reasons == {"access_expired"} with input as ask(vendor, "2026-07-01T00:00:00Z")
}

test_a_contract_without_a_usable_end_is_refused_not_an_error if {
	every contract in [{}, {"until": null}, {"until": 20261231}] {
		request.reasons == {"access_expired"} with input as ask(contractor, "2026-01-01T00:00:00Z")
			with data.gateway.contractors as {"user:ann": contract}
	}
}

test_a_missing_now_is_refused_not_an_error if {
	not request.allow with input as object.remove(ask(contractor, null), ["now"])
	not request.allow with input as ask(contractor, null)
}

test_the_shipped_refusals_still_apply if {
	inp := ask(object.union(contractor, {"roles": ["viewer"]}), "2026-01-01T00:00:00Z")
	request.reasons == {"missing_retrieve_role"} with input as inp
}
