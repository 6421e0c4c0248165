"""The HTTP contract, once: every request and response body of the gateway as a pydantic model.

The service validates requests with these models and builds its answers from them; `/openapi.json`
takes its schemas from them; the typed client (`gateway.client`) reads answers into them. Which
fields of an answer may carry personal data is a mark on the field (`api.wire.clear`,
`api.wire.personal`), and masking reads it. This package imports nothing else of the project, so
the client can stand on it alone.

Modules: `wire` (the bases and marks), `instants` (RFC 3339 as the contract speaks it), `retrieve`,
`writes`, `audit`, `policy`, `keys`, `service` (health, readiness, errors).
"""
