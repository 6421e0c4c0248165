# METADATA
# title: Time-bound access
# description: |
#   Adds one refusal to data.gateway.request: a principal listed in
#   data.gateway.contractors may retrieve only until its `until` instant.
package gateway.request

import data.gateway.lib

# A listed principal whose access has ended (or whose end is missing or not an instant) is refused.
refusals contains "access_expired" if {
	some principal in lib.principals(input.actor)
	contract := object.get(data.gateway.contractors, principal, null)
	contract != null
	not access_current(contract, input.now)
}

# Both instants are checked to be strings before they are parsed: the embedded engine fails the
# whole evaluation on time.parse_rfc3339_ns(null), where OPA would only make this rule undefined.
access_current(contract, now) if {
	until := object.get(contract, "until", null)
	is_string(until)
	is_string(now)
	time.parse_rfc3339_ns(now) < time.parse_rfc3339_ns(until)
}
