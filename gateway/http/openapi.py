"""GET /openapi.json: the OpenAPI 3.1 document of the HTTP contract.

Request bodies come from the pydantic models that validate them (`core.request.RetrieveRequest`,
`gateway.writes.envelope.ItemIn` and its variants for the entity and edge endpoints,
`gateway.http.routes.keys.NewKey`), parts of answers from the models that build them
(`audit.lineage.SourceRecord`, `DepthRecord`), error codes from the error tree (`core.errors`).
The models' `$defs` become `components/schemas`. What no model validates (the small bodies of
merge, usage and feedback, and most answers) is written here, next to the route it belongs to.

`OPERATIONS` documents every (path, method) the app serves; `tests/test_openapi.py` walks the
app's routes and fails on one without an entry, or an entry without a route. A new route adds an
entry there (an `Operation`); `document(routes)` takes only the entries whose route the app has.
The document is built once per app, on the first request for it; it holds no data, so the route is
unauthenticated, like /healthz.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from audit.lineage import DepthRecord, SourceRecord
from core.errors import GatewayError
from core.request import RetrieveRequest
from gateway.http.audit_pages import SESSION_COOKIE
from gateway.http.mcp import METADATA_CACHE, METADATA_CACHE_BY_HOST, METADATA_PATH
from gateway.http.routes.keys import NewKey
from gateway.writes.envelope import ID, ItemIn

JSON = "application/json"
HTML = "text/html"
NDJSON = "application/x-ndjson"
SCHEMAS = "#/components/schemas/"
Schema = dict[str, Any]

# When each error status is given; its codes come from the error tree (core.errors).
ERROR_WHEN = {
    400: "malformed input; the message names the field",
    401: "no, malformed, unknown, revoked or expired credential",
    403: "the key lacks the endpoint's role, or the policy said no (`reasons` lists why)",
    404: "nothing there",
    405: "a method the path does not take (`Allow` lists those it does)",
    409: "the request contradicts stored state",
    413: "the body is above `GATEWAY_MAX_BODY_BYTES`",
    422: "well-formed JSON of the wrong shape",
    429: "over a per-actor or per-tenant admission limit; `Retry-After` says when to try again",
    500: "a fault of the gateway, never by design; the message names nothing",
    503: "no decision, no audit record, no store, or no way to mask what the policy says to mask",
    504: "a long operation ran past its total deadline",
}


def error_codes() -> dict[int, list[str]]:
    """The codes each status carries: every GatewayError subclass's."""
    codes: dict[int, set[str]] = {}
    pending: list[type[GatewayError]] = [GatewayError]
    while pending:
        error = pending.pop()
        codes.setdefault(error.status, set()).add(error.code)
        pending.extend(error.__subclasses__())
    return {status: sorted(found) for status, found in codes.items()}


ERROR_CODES = {
    status: f"{', '.join(f'`{c}`' for c in error_codes().get(status, []))}: {when}" for status, when in ERROR_WHEN.items()
}


def ref(name: str) -> Schema:
    return {"$ref": SCHEMAS + name}


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def obj(
    properties: dict[str, Schema], required: Iterable[str] | None = None, *, closed: bool = False, description: str | None = None
) -> Schema:
    """An object schema; `required` defaults to every property. Answers are open (more fields may be
    added, API.md), request bodies `closed` (unknown fields are refused)."""
    schema: Schema = {
        "type": "object",
        "properties": properties,
        "required": sorted(properties if required is None else required),
    }
    if closed:
        schema["additionalProperties"] = False
    if description:
        schema["description"] = description
    return schema


STRING: Schema = {"type": "string"}
STRINGS: Schema = {"type": "array", "items": STRING}
INTEGER: Schema = {"type": "integer"}
COUNT: Schema = {"type": "integer", "minimum": 0}
BOOLEAN: Schema = {"type": "boolean"}
NUMBER: Schema = {"type": "number"}
OPEN_OBJECT: Schema = {"type": "object"}

# --- the written schemas: errors and answers no model builds -------------------------------------

REPORT_REJECTED = obj(
    {"index": COUNT, "id": nullable(STRING), "errors": STRINGS},
    description="An item that was not written, with its index in the batch and why",
)

WRITTEN: dict[str, Schema] = {
    "Error": obj(
        {
            "error": obj(
                {
                    "code": STRING,
                    "message": {"type": "string", "description": "Names the field at fault; never a stored value"},
                    "trace_id": {
                        **nullable(STRING),
                        "description": "The audit row of the call (null for a failure before any handler "
                        "ran, and on the unaudited OAuth metadata route)",
                    },
                    "reasons": {**STRINGS, "description": "Why the policy denied the call (`policy_denied` only)"},
                },
                required=["code", "message", "trace_id"],
            ),
        }
    ),
    "IngestReport": obj(
        {"created": COUNT, "updated": COUNT, "unchanged": COUNT, "rejected": {"type": "array", "items": REPORT_REJECTED}},
        description="Counts of a batch; a bad item never blocks the good ones",
    ),
    "DocumentReport": obj(
        {
            "document": STRING,
            "sha256": STRING,
            "changed": BOOLEAN,
            "pieces": COUNT,
            "created": COUNT,
            "updated": COUNT,
            "unchanged": COUNT,
            "removed": COUNT,
            "rejected": {"type": "array", "items": REPORT_REJECTED},
        }
    ),
    "MergeRequest": obj(
        {"into": {"type": "string", "pattern": ID, "description": "The id of the surviving entity"}}, closed=True
    ),
    "MergeResult": obj({"id": STRING, "into": STRING, "survivor": STRING, "changed": BOOLEAN}),
    "TombstoneResult": obj({"id": STRING, "status": {"const": "pending_deletion"}, "changed": BOOLEAN, "hidden_items": COUNT}),
    "TraceProof": obj(
        {
            "format": {"const": "gateway.audit.proof/1"},
            "trace": OPEN_OBJECT,
            "leaf_index": COUNT,
            "tree_size": COUNT,
            "inclusion_proof": STRINGS,
            "checkpoint": STRING,
        }
    ),
    "PolicyInfo": obj(
        {
            "engine": STRING,
            "revision": STRING,
            "label": STRING,
            "loaded_at": {"type": "string", "format": "date-time"},
            "source": {**STRING, "description": "where the policies are read from: for the policy_admin role only"},
            "last_reload": nullable(OPEN_OBJECT),
        },
        required=("engine", "revision", "label", "loaded_at", "last_reload"),
    ),
    "PolicyReload": obj(
        {
            "reload": obj(
                {
                    "trigger": STRING,
                    "status": {"type": "string", "enum": ["switched", "unchanged", "rejected"]},
                    "revision": STRING,
                    "previous": STRING,
                    "candidate": nullable(STRING),
                    "errors": STRINGS,
                    "ms": {"type": "number"},
                }
            )
        }
    ),
    "ImpactRequest": obj(
        {
            "policies": obj(
                {
                    "modules": {
                        "type": "object",
                        "additionalProperties": STRING,
                        "description": "Path (ending in .rego) -> Rego source",
                    },
                    "data": OPEN_OBJECT,
                },
                required=["modules"],
                description="The candidate policy, inline",
            ),
            "since": {"type": "string", "format": "date-time", "description": "Replay calls made at or after this instant"},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 10_000,
                "default": 1000,
                "description": "The newest calls replayed, at most",
            },
            "tenant": {"type": "string", "description": "The caller's own tenant, if given; any other is a 403"},
        },
        required=["policies"],
        closed=True,
    ),
    "ImpactReport": obj(
        {
            "current_revision": STRING,
            "candidate_revision": STRING,
            "window": obj(
                {
                    "tenant": nullable(STRING),
                    "since": nullable(STRING),
                    "limit": INTEGER,
                    "first_call": nullable(STRING),
                    "last_call": nullable(STRING),
                }
            ),
            "calls": COUNT,
            "replayed": COUNT,
            "unreplayable": obj({"count": COUNT, "by_reason": {"type": "object", "additionalProperties": COUNT}}),
            "assumed": {
                "type": "object",
                "additionalProperties": COUNT,
                "description": "Replays of older rows: `actor_from_key` (attributes of the actor's live key), `graph_defaults`",
            },
            "failed": {
                "type": "object",
                "additionalProperties": obj({"count": COUNT, "traces": STRINGS}),
                "description": "Calls on which the `current` or `candidate` policy failed (they would answer 503)",
            },
            "recorded_differs": {
                **COUNT,
                "description": "Calls the policy in force decides otherwise now than when they were made",
            },
            "flips": {
                "type": "object",
                "additionalProperties": {
                    "type": "array",
                    "items": obj({"task_type": STRING, "role": STRING, "count": COUNT, "traces": STRINGS}),
                },
                "description": "`allow_to_deny` and `deny_to_allow`, grouped by task type and the actor's roles",
            },
            "items": {
                "type": "object",
                "additionalProperties": obj(
                    {
                        "count": COUNT,
                        **{
                            name: {"type": "object", "additionalProperties": COUNT}
                            for name in ("by_sensitivity", "by_reason", "by_kind")
                        },
                    }
                ),
                "description": "`newly_allowed` and `newly_denied`: distinct items, counted",
            },
            "summary": {"type": "string", "description": "The report for people"},
        }
    ),
    "ExplainRequest": obj(
        {
            "actor": obj(
                {
                    "id": STRING,
                    "tenant": {"type": "string", "description": "The caller's own tenant; any other is a 403"},
                    "roles": STRINGS,
                    "groups": STRINGS,
                    "clearance": STRING,
                },
                required=["id", "tenant", "clearance"],
                closed=True,
                description="A hypothetical actor of the caller's tenant",
            ),
            "request": {**ref("RetrieveRequest"), "description": "The retrieve body to explain"},
            "items": {"type": "array", "items": STRING, "maxItems": 50, "description": "Item ids to explain (envelopes only)"},
            "policies": obj(
                {
                    "modules": {
                        "type": "object",
                        "additionalProperties": STRING,
                        "description": "Path (ending in .rego) -> Rego source",
                    },
                    "data": OPEN_OBJECT,
                },
                required=["modules"],
                description="A candidate policy, explained beside the one in force",
            ),
        },
        required=["actor", "request"],
        closed=True,
    ),
    "Explanation": obj(
        {
            "engine": STRING,
            "revision": STRING,
            "decision": obj({"allow": BOOLEAN, "reasons": STRINGS, "constraints": nullable(OPEN_OBJECT)}),
            "subjects": {**STRINGS, "description": "The entities the request is about, as resolved and verified"},
            "failures_document": {
                **BOOLEAN,
                "description": "`denied_by` is read from data.gateway.items.failures (else from `denied`)",
            },
            "items": {
                "type": "array",
                "items": obj(
                    {
                        "id": STRING,
                        "status": {"enum": ["allowed", "denied", "excluded", "request_denied", "not_found"]},
                        "envelope": nullable(OPEN_OBJECT),
                        "policy": nullable(
                            obj(
                                {
                                    "allowed": BOOLEAN,
                                    "reason": nullable(STRING),
                                    "denied_by": {
                                        "type": "array",
                                        "items": obj({"rule": STRING, "reason": STRING, "meaning": STRING}),
                                    },
                                }
                            )
                        ),
                        "pushdown": nullable(
                            obj(
                                {
                                    "admits": BOOLEAN,
                                    "excluded_by": {"type": "array", "items": obj({"constraint": STRING, "meaning": STRING})},
                                }
                            )
                        ),
                    }
                ),
            },
        }
    ),
    "ExplainReport": obj(
        {
            "in_force": ref("Explanation"),
            "candidate": ref("Explanation"),
            "differences": obj(
                {
                    "decision": BOOLEAN,
                    "items": {"type": "array", "items": obj({"id": STRING, "in_force": nullable(STRING), "candidate": STRING})},
                }
            ),
        },
        required=["in_force"],
    ),
    "Health": obj({"status": {"const": "ok"}}),
    "Readiness": obj({"status": STRING, "checks": {"type": "object", "additionalProperties": STRING}}, required=["status"]),
    "TraceSummary": obj(
        {
            "trace_id": STRING,
            "created_at": nullable(STRING),
            "actor": nullable(STRING),
            "endpoint": STRING,
            "task": nullable(STRING),
            "decision": nullable(STRING),
            "status_code": nullable(INTEGER),
            "error_code": nullable(STRING),
            "policy_revision": nullable(STRING),
            "seq": nullable(INTEGER),
        }
    ),
    "TraceList": obj({"traces": {"type": "array", "items": ref("TraceSummary")}, "cursor": nullable(STRING)}),
    "Trace": {
        "allOf": [
            ref("TraceSummary"),
            obj(
                {
                    "tenant": nullable(STRING),
                    "policy_engine": nullable(STRING),
                    "lineage": nullable(OPEN_OBJECT),
                    "prev_hash": nullable(STRING),
                    "row_hash": nullable(STRING),
                    "used": STRINGS,
                    "feedback": {"type": "array", "items": obj({"trace_id": STRING, "created_at": nullable(STRING)})},
                }
            ),
        ]
    },
    "VerifyReport": obj(
        {
            "ok": BOOLEAN,
            "chains": {"type": "object", "additionalProperties": obj({"rows": COUNT, "ok": BOOLEAN})},
            "first_broken": nullable(OPEN_OBJECT),
            "checkpointed": COUNT,
            "not_yet_checkpointed": COUNT,
        },
        required=["ok", "chains", "first_broken"],
    ),
    "UsageRequest": obj({"used": {**STRINGS, "maxItems": 200, "description": "Ids of items that call returned"}}, closed=True),
    "UsageResult": obj({"trace_id": STRING, "recorded": STRINGS, "ignored": COUNT}),
    "FeedbackRequest": obj(
        {
            "rating": {"type": "integer", "minimum": 1, "maximum": 5},
            "comment": {
                **nullable({"type": "string", "maxLength": 2000}),
                "description": "Kept as a keyed hash and a length only",
            },
        },
        required=["rating"],
        closed=True,
    ),
    "FeedbackResult": obj({"trace_id": STRING, "rating": {"type": "integer", "minimum": 1, "maximum": 5}}),
    "KeyListing": obj(
        {
            "id": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
            "tenant": STRING,
            "principal": STRING,
            "roles": STRINGS,
            "groups": STRINGS,
            "clearance": STRING,
            "created_at": nullable(STRING),
            "revoked_at": nullable(STRING),
        },
        description="What may be shown of a key: never its secret or the secret's hash",
    ),
    "KeyList": obj({"keys": {"type": "array", "items": ref("KeyListing")}}),
    "CreatedKey": {
        "allOf": [ref("KeyListing"), obj({"key": {"type": "string", "description": "The key itself, shown this once"}})]
    },
    "RevokedKey": {"allOf": [ref("KeyListing"), obj({"changed": BOOLEAN, "sessions_ended": COUNT})]},
    "RetrievedItem": obj(
        {
            "id": STRING,
            "kind": {"enum": ["property", "memory", "document", "edge"]},
            "citation": STRING,
            "text": STRING,
            "entity": nullable(STRING),
            "section": nullable(STRING),
            "document": nullable(STRING),
            "slot": nullable(STRING),
            "authority": STRING,
            "status": {"enum": ["current", "historical", "superseded", "disputed"]},
            "current": BOOLEAN,
            "sensitivity": STRING,
            "scope": STRINGS,
            "valid_from": nullable(STRING),
            "valid_to": nullable(STRING),
            "recorded_at": nullable(STRING),
            "source": obj({"system": nullable(STRING), "uri": nullable(STRING)}, required=[]),
            "found_by": STRINGS,
            "pieces": STRINGS,
            "from": nullable(STRING),
            "to": nullable(STRING),
            "relation": nullable(STRING),
            "confidence": nullable(NUMBER),
            "weight": nullable(NUMBER),
        },
        required=["id", "kind", "citation", "text", "status", "found_by"],
    ),
    "ResolvedEntity": obj(
        {
            "id": STRING,
            "kind": STRING,
            "status": {"enum": ["live", "pending_deletion"]},
            "resolved_from": {"type": "object", "additionalProperties": STRING},
            "merged_from": STRINGS,
            "aliases": STRINGS,
        },
        required=["id", "kind", "status"],
        description="A live entity, or a bare tombstone (id, kind, status pending_deletion)",
    ),
    "Answer": obj(
        {
            "text": nullable(STRING),
            "citations": STRINGS,
            "confidence": nullable(NUMBER),
            "grounded": nullable(BOOLEAN),
            "error": nullable(STRING),
        },
        required=["text"],
    ),
    "RetrieveResponse": obj(
        {
            "trace_id": STRING,
            "mode": {"enum": ["brief", "scout", "fetch", "filter", "expand"]},
            "decision": obj({"allow": BOOLEAN, "policy_revision": nullable(STRING), "reasons": STRINGS}),
            "entities": {"type": "array", "items": ref("ResolvedEntity")},
            "items": {"type": "array", "items": ref("RetrievedItem")},
            "sources": {"type": "object", "additionalProperties": ref("SourceRecord")},
            "depth": ref("DepthRecord"),
            "budget": obj(
                {"limit_bytes": COUNT, "used_bytes": COUNT, "per_source": OPEN_OBJECT}, required=["limit_bytes", "used_bytes"]
            ),
            "partial": BOOLEAN,
            "empty_reason": nullable({"const": "no_relevant_permitted_items"}),
            "cursor": nullable(STRING),
            "answer": nullable(ref("Answer")),
            "timings": {"type": "object", "additionalProperties": nullable(NUMBER)},
        },
        required=["trace_id", "mode", "decision", "items", "sources", "partial", "empty_reason", "cursor"],
    ),
}


def item_variant(base: Schema, kind: str, description: str) -> Schema:
    """`ItemIn` as one endpoint takes it: `kind` fixed (and optional), `id` optional."""
    schema = copy.deepcopy(base)
    schema["title"] = f"{kind.capitalize()}In"
    schema["description"] = description
    schema["properties"]["kind"] = {"const": kind, "default": kind}
    schema["required"] = [name for name in schema.get("required", []) if name not in ("id", "kind")]
    return schema


def model_schemas() -> dict[str, Schema]:
    """The models' schemas, each under its own name, their `$defs` beside them."""
    inputs: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (RetrieveRequest, "validation"),
        (ItemIn, "validation"),
        (NewKey, "validation"),
        (SourceRecord, "serialization"),
        (DepthRecord, "serialization"),
        (ProtectedResourceMetadata, "serialization"),
    ]
    _, defs = models_json_schema(inputs, ref_template=SCHEMAS + "{model}")
    schemas: dict[str, Schema] = dict(defs["$defs"])  # every model is among them, under its class name
    item = schemas["ItemIn"]
    schemas["EntityIn"] = item_variant(item, "entity", "An entity: `id`, when given, must be the path's; `kind` is entity")
    schemas["EdgeIn"] = item_variant(
        item,
        "edge",
        "An edge: `kind` is edge; without an `id`, `from`, `relation` and `to` are required and the id is derived from them",
    )
    for name, schema in WRITTEN.items():
        if name in schemas:
            raise ValueError(f"schema {name} is both a model's and written here")
        schemas[name] = schema
    return schemas


# --- operations -----------------------------------------------------------------------------------

TRACE_ID_HEADER: Schema = {"description": "The call's audit row", "schema": STRING}
RETRY_AFTER: Schema = {
    "description": "Seconds to wait before trying again",
    "required": True,
    "schema": {"type": "integer", "minimum": 0},
}


@dataclass(frozen=True)
class Operation:
    """One documented (path, method). `auth`: `bearer` (an API key or JWT, with `role` when the
    endpoint needs one), `session` (the audit page's cookie, optional), or None."""

    summary: str
    tag: str
    responses: dict[str, Schema]
    auth: str | None = "bearer"
    role: str | None = None
    body: Schema | None = None
    parameters: tuple[Schema, ...] = ()
    description: str = ""

    def render(self, operation_id: str) -> Schema:
        description = self.description
        if self.role:
            description = f"Needs the `{self.role}` role. {description}".strip()
        rendered: Schema = {"operationId": operation_id, "summary": self.summary, "tags": [self.tag], "responses": self.responses}
        if description:
            rendered["description"] = description
        if self.parameters:
            rendered["parameters"] = list(self.parameters)
        if self.body is not None:
            rendered["requestBody"] = self.body
        if self.auth == "bearer":
            rendered["security"] = [{"bearer": []}]
        elif self.auth == "session":
            rendered["security"] = [{}, {"auditSession": []}]
        else:
            rendered["security"] = []
        return rendered


def json_answer(description: str, schema: Schema, *, traced: bool = True, headers: dict[str, Schema] | None = None) -> Schema:
    answer: Schema = {"description": description, "content": {JSON: {"schema": schema}}}
    all_headers = {**({"x-trace-id": {**TRACE_ID_HEADER, "required": True}} if traced else {}), **(headers or {})}
    if all_headers:
        answer["headers"] = all_headers
    return answer


def error(status: int, when: str | None = None, *, html: bool = False, also: Schema | None = None) -> Schema:
    """An error answer: the error body (also a page, for `html`); `also` is another body the status
    may carry instead. A 429 carries Retry-After (and x-trace-id when the refusal was traced)."""
    description = ERROR_CODES[status] + (f"; here: {when}" if when else "")
    body = ref("Error") if also is None else {"anyOf": [ref("Error"), also]}
    if status == 429:
        answer = json_answer(description, body, traced=False, headers={"Retry-After": RETRY_AFTER, "x-trace-id": TRACE_ID_HEADER})
    else:
        answer = json_answer(description, body)
    if html:
        answer["content"][HTML] = {"schema": STRING}
    return answer


def v1(
    ok: Schema, *, errors: dict[int, str | None], body: bool = False, also: dict[int, Schema] | None = None
) -> dict[str, Schema]:
    """The answers of an authenticated /v1 call: `ok` (keyed by status), the route's own `errors`, and
    those every such call can give: 401, 403, 429, 500, 503 (and 413 when it reads a body)."""
    statuses: dict[int, str | None] = {
        401: None,
        403: None,
        429: None,
        500: None,
        503: None,
        **({413: None} if body else {}),
        **errors,
    }
    answers = dict(ok)
    for status in sorted(statuses):
        answers[str(status)] = error(status, statuses[status], also=(also or {}).get(status))
    return dict(sorted(answers.items()))


def path_parameter(name: str, description: str, pattern: str) -> Schema:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string", "pattern": pattern},
    }


def query_parameter(name: str, description: str, schema: Schema | None = None) -> Schema:
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema or STRING}


def json_body(schema: Schema, description: str = "") -> Schema:
    return {"required": True, "description": description, "content": {JSON: {"schema": schema}}}


def batch_body(what: str, model: str) -> Schema:
    """A batch write's body: a JSON array of `model` (or one), or NDJSON, one per line."""
    return {
        "required": True,
        "description": f"A JSON array of {what}s (or one {what}), or NDJSON: one {what} per line",
        "content": {
            JSON: {"schema": {"anyOf": [{"type": "array", "items": ref(model)}, ref(model)]}},
            NDJSON: {"schema": {"type": "array", "items": ref(model), "description": "Sent as one JSON object per line"}},
        },
    }


REVIEW_FILTERS = (
    query_parameter("actor", "Only calls of this principal (`user:...`)"),
    query_parameter("task", "Only calls of this task type"),
    query_parameter("decision", "Only calls with this decision (allow, deny, read, write, error, none)"),
    query_parameter("since", "Only calls at or after this RFC 3339 instant (with its offset)"),
    query_parameter("until", "Only calls before this RFC 3339 instant (with its offset)"),
    query_parameter("item", "Only calls that returned this item id"),
)
CURSOR = query_parameter(
    "cursor", "The `cursor` of the previous page (`c_<n>`); blank is none", {"type": "string", "pattern": r"^(c_[0-9]{1,18})?$"}
)
ENTITY_ID = path_parameter("entity_id", "The entity's id", ID)
TRACE_ID = path_parameter("trace_id", "A trace id from `x-trace-id`", r"^tr_[0-9a-f]{24}$")
NOT_FOUND_ROUTE = "a path parameter that holds a `/` leaves no route to take"
MERGE_ROUTE = "an id `<x>/merge` (with its `/`) names the merge route, which takes POST only"

HTML_PAGE: Schema = {"description": "A page", "content": {HTML: {"schema": STRING}}}
REDIRECT: Schema = {"description": "Back to /audit", "headers": {"Location": {"required": True, "schema": STRING}}}


def page(description: str) -> Schema:
    return {**HTML_PAGE, "description": description}


def page_answers(ok: dict[str, Schema], errors: dict[int, str]) -> dict[str, Schema]:
    """The audit pages answer errors as pages; a failure outside the page (no audit row, a fault) is
    the JSON error. They are not admitted (gateway/admission.py), so never a 429."""
    answers = dict(ok)
    for status, when in errors.items():
        answers[str(status)] = {"description": when, "content": {HTML: {"schema": STRING}}}
    for status in (500, 503):
        answer = error(status, html=status == 503)
        answers[str(status)] = (
            answer if status != 503 else {**answer, "description": ERROR_CODES[503] + " (a page when the store fails)"}
        )
    return dict(sorted(answers.items()))


OPERATIONS: dict[tuple[str, str], Operation] = {
    ("/healthz", "get"): Operation(
        "The process is up", "operations", {"200": json_answer("Up", ref("Health"), traced=False)}, auth=None
    ),
    ("/readyz", "get"): Operation(
        "Policy loaded and store reachable",
        "operations",
        {
            "200": json_answer("Ready", ref("Readiness"), traced=False),
            "503": json_answer("Not ready: `checks` names the failing part", ref("Readiness"), traced=False),
        },
        auth=None,
    ),
    ("/openapi.json", "get"): Operation(
        "This document", "operations", {"200": json_answer("The OpenAPI 3.1 document", OPEN_OBJECT, traced=False)}, auth=None
    ),
    (METADATA_PATH, "get"): Operation(
        "The OAuth 2.0 protected-resource metadata of /mcp (RFC 9728)",
        "operations",
        {
            "200": json_answer(
                "`resource` is the URL of /mcp, `authorization_servers` the JWT issuer (`GATEWAY_JWT_ISSUER`)",
                ref("ProtectedResourceMetadata"),
                traced=False,
                headers={
                    "Cache-Control": {
                        "required": True,
                        "schema": {"enum": [METADATA_CACHE, METADATA_CACHE_BY_HOST]},
                        "description": "public with GATEWAY_PUBLIC_URL; private, with `Vary: Host`, "
                        "when the answer names the request's Host",
                    },
                    "Vary": {"schema": {"const": "Host"}},
                },
            ),
            "400": json_answer(
                "`bad_request`: the request's Host names no URL (`GATEWAY_PUBLIC_URL` takes it out of the answer)",
                ref("Error"),
                traced=False,
            ),
            "404": json_answer(
                "`not_found`: nothing is published: no `GATEWAY_JWT_ISSUER`, one that is not an http(s) URL, no JWT "
                "key, or no /mcp (one message for all of them; the service's log says which)",
                ref("Error"),
                traced=False,
            ),
        },
        auth=None,
        description="Where an OAuth-capable MCP client finds the authorization server of the gateway's JWTs; every 401 of "
        "/mcp names this URL in its `WWW-Authenticate` (`resource_metadata`) when it is published. Public and "
        "holding no data, like /healthz: not audited.",
    ),
    ("/v1/retrieve", "post"): Operation(
        "Retrieve the context for one task",
        "retrieve",
        v1(
            {"200": json_answer("The packed context", ref("RetrieveResponse"))},
            body=True,
            errors={
                400: "malformed JSON, identity fields in the body, synthesize without a model, expand without a cursor",
                404: "a cursor that is unknown, expired, spent or another actor's",
                409: "a cursor another expand keeps advancing",
                422: None,
            },
        ),
        body=json_body(ref("RetrieveRequest"), "Only `task.type` is required; unknown fields are refused (422)"),
        description="Any authenticated key; the policy decides what the actor may read (403 `policy_denied`).",
    ),
    ("/v1/items", "put"): Operation(
        "Write items (idempotent by id)",
        "ingest",
        v1(
            {"200": json_answer("What was written, and what was rejected and why", ref("IngestReport"))},
            body=True,
            errors={400: "the body is neither a JSON array nor NDJSON"},
        ),
        role="ingest",
        body=batch_body("item", "ItemIn"),
    ),
    ("/v1/documents/{document_id}", "put"): Operation(
        "Write a Markdown document, cut into section items",
        "ingest",
        v1(
            {"200": json_answer("The document's sections as written", ref("DocumentReport"))},
            body=True,
            errors={
                400: "a bad document id, a body that is not UTF-8 text or holds NUL",
                404: NOT_FOUND_ROUTE,
                422: "a section was rejected (the report says why)",
            },
            also={422: ref("DocumentReport")},
        ),
        role="ingest",
        parameters=(path_parameter("document_id", "The document's id", ID),),
        body={
            "required": True,
            "description": "Markdown; front matter holds the envelope fields of `ItemIn` (acl is required)",
            "content": {"text/markdown": {"schema": STRING}},
        },
    ),
    ("/v1/entities/{entity_id}", "put"): Operation(
        "Write an entity",
        "ingest",
        v1(
            {"200": json_answer("What was written", ref("IngestReport"))},
            body=True,
            errors={
                400: "not a JSON object, an id other than the path's, a kind other than entity",
                404: NOT_FOUND_ROUTE,
                405: MERGE_ROUTE,
                422: "the entity was rejected (the report says why)",
            },
            also={422: ref("IngestReport")},
        ),
        role="ingest",
        parameters=(ENTITY_ID,),
        body=json_body(ref("EntityIn")),
    ),
    ("/v1/entities/{entity_id}", "delete"): Operation(
        "Mark an entity pending deletion (everything attached is hidden at once)",
        "ingest",
        v1(
            {"200": json_answer("The tombstone", ref("TombstoneResult"))},
            errors={400: "not an entity id", 404: "no such entity in this tenant", 405: MERGE_ROUTE},
        ),
        role="ingest",
        parameters=(ENTITY_ID,),
    ),
    ("/v1/entities/{entity_id}/merge", "post"): Operation(
        "Merge an entity into a survivor",
        "ingest",
        v1(
            {"200": json_answer("The merge", ref("MergeResult"))},
            body=True,
            errors={
                400: "malformed JSON, no `into`, unknown fields, a merge into itself",
                404: "either entity is not in this tenant",
                409: "the merge would close a cycle, or involves an entity pending deletion",
            },
        ),
        role="ingest",
        parameters=(ENTITY_ID,),
        body=json_body(ref("MergeRequest")),
    ),
    ("/v1/edges", "put"): Operation(
        "Write edges",
        "ingest",
        v1(
            {"200": json_answer("What was written, and what was rejected and why", ref("IngestReport"))},
            body=True,
            errors={400: "the body is neither a JSON array nor NDJSON, or names another kind"},
        ),
        role="ingest",
        body=batch_body("edge", "EdgeIn"),
    ),
    ("/v1/policy", "get"): Operation(
        "The loaded policy revision", "policy", v1({"200": json_answer("The engine and revision", ref("PolicyInfo"))}, errors={})
    ),
    ("/v1/policy/reload", "post"): Operation(
        "Switch to the policy source's revision now",
        "policy",
        v1(
            {"200": json_answer("Switched, or unchanged", ref("PolicyReload"))},
            errors={
                403: "the key is not a `policy_admin` of the platform tenant (`GATEWAY_PLATFORM_TENANT`)",
                422: "the new revision was refused (`policy_rejected`; `reload.errors` says why); the old one serves on",
            },
        ),
        role="policy_admin",
        description="Reads the policy directory or bundle again; a revision that compiles and passes the probe replaces "
        "the one in force atomically, on every worker; calls in flight finish on the revision they started with.",
    ),
    ("/v1/policy/impact", "post"): Operation(
        "Replay the tenant's recorded calls against a candidate policy",
        "policy",
        v1(
            {"200": json_answer("Decisions that flip and items newly allowed or denied", ref("ImpactReport"))},
            body=True,
            errors={
                400: "malformed JSON, an unknown field, a bad `since` or `limit`, a candidate that does not compile (file:line)",
                403: "a `tenant` other than the caller's",
                504: "`deadline_exceeded`: the replay ran past `GATEWAY_IMPACT_DEADLINE_SECONDS`",
            },
        ),
        role="policy_admin",
        body=json_body(ref("ImpactRequest")),
        description="Reads envelopes and request shapes only; the report holds counts, task types, roles and trace ids.",
    ),
    ("/v1/policy/explain", "post"): Operation(
        "Explain a decision and named items for a hypothetical actor, in force or against a candidate",
        "policy",
        v1(
            {
                "200": json_answer(
                    "The decision, its constraints, and per item the denying checks and excluding constraints",
                    ref("ExplainReport"),
                )
            },
            body=True,
            errors={
                400: "malformed JSON, an unknown field, a bad actor, request or item id",
                403: "an `actor.tenant` other than the caller's",
                422: "a malformed request, or a candidate that does not compile (file:line)",
            },
        ),
        role="policy_admin",
        body=json_body(ref("ExplainRequest")),
        description="Items are read in the caller's tenant only (another tenant's id is `not_found`); envelopes only, never text.",
    ),
    ("/v1/keys", "get"): Operation(
        "The tenant's API keys, revoked ones too",
        "keys",
        v1({"200": json_answer("The keys, oldest first", ref("KeyList"))}, errors={}),
        role="key_admin",
    ),
    ("/v1/keys", "post"): Operation(
        "Create an API key in the caller's tenant",
        "keys",
        v1(
            {"201": json_answer("The new key; its secret is shown this once", ref("CreatedKey"))},
            body=True,
            errors={400: "malformed JSON, a `tenant`, a bad principal, role, group or clearance", 422: None},
        ),
        role="key_admin",
        body=json_body(ref("NewKey")),
    ),
    ("/v1/keys/{key_id}", "delete"): Operation(
        "Revoke a key of the caller's tenant and end its audit-page sessions",
        "keys",
        v1(
            {"200": json_answer("The revoked key", ref("RevokedKey"))},
            errors={400: "not a key id (16 hex digits)", 404: "no such key in this tenant"},
        ),
        role="key_admin",
        parameters=(path_parameter("key_id", "The 16 hex digits after `gw_` in the key", "^[0-9a-f]{16}$"),),
    ),
    ("/v1/audit/verify", "get"): Operation(
        "Check the tenant's hash chain",
        "audit",
        v1({"200": json_answer("Where the chain breaks, if it does", ref("VerifyReport"))}, errors={}),
        role="auditor",
    ),
    ("/v1/audit/traces", "get"): Operation(
        "The tenant's traces, newest first",
        "audit",
        v1(
            {"200": json_answer("One page", ref("TraceList"))},
            errors={400: "an unknown parameter, a bad instant, cursor or limit"},
        ),
        role="auditor",
        parameters=(
            *REVIEW_FILTERS,
            CURSOR,
            query_parameter("limit", "Page size", {"type": "string", "pattern": r"^\d+$", "default": "50"}),
        ),
    ),
    ("/v1/audit/traces/{trace_id}", "get"): Operation(
        "One trace, whole",
        "audit",
        v1(
            {"200": json_answer("The trace with the usage and feedback its agent reported", ref("Trace"))},
            errors={404: "no such trace in this tenant"},
        ),
        role="auditor",
        parameters=(TRACE_ID,),
    ),
    ("/v1/audit/traces/{trace_id}/proof", "get"): Operation(
        "One trace with its inclusion proof and the signed checkpoint it is under",
        "audit",
        v1(
            {"200": json_answer("The proof, for `gateway audit verify-proof`", ref("TraceProof"))},
            errors={
                404: "no such trace in this tenant",
                409: "no signed checkpoint with a Merkle root covers the trace yet, or this gateway signs none",
            },
        ),
        role="auditor",
        parameters=(TRACE_ID,),
    ),
    ("/v1/audit/export", "get"): Operation(
        "Every matching trace, streamed",
        "audit",
        v1(
            {
                "200": {
                    "description": "One trace per line (jsonl) or row (csv), oldest first",
                    "headers": {"x-trace-id": {**TRACE_ID_HEADER, "required": True}},
                    "content": {NDJSON: {"schema": STRING}, "text/csv": {"schema": STRING}},
                }
            },
            errors={400: "an unknown parameter, a bad instant or format"},
        ),
        role="auditor",
        parameters=(*REVIEW_FILTERS, query_parameter("format", "jsonl (default) or csv", {"enum": ["jsonl", "csv"]})),
    ),
    ("/v1/traces/{trace_id}/usage", "post"): Operation(
        "Report which returned items the agent used",
        "audit",
        v1(
            {"200": json_answer("What was recorded", ref("UsageResult"))},
            body=True,
            errors={400: 'malformed JSON or not `{"used": [ids]}`', 404: "not a retrieve trace of this actor"},
        ),
        parameters=(TRACE_ID,),
        body=json_body(ref("UsageRequest")),
        description="Only the actor of that retrieve call may report.",
    ),
    ("/v1/traces/{trace_id}/feedback", "post"): Operation(
        "Rate a call",
        "audit",
        v1(
            {"200": json_answer("What was recorded", ref("FeedbackResult"))},
            body=True,
            errors={
                400: "malformed JSON, a rating not 1 to 5, a comment over 2,000 characters",
                404: "not a retrieve trace of this actor",
            },
        ),
        parameters=(TRACE_ID,),
        body=json_body(ref("FeedbackRequest")),
        description="Only the actor of that retrieve call may report.",
    ),
    ("/audit", "get"): Operation(
        "The audit page: the sign-in form, or the tenant's traces",
        "audit pages",
        page_answers(
            {"200": page("The sign-in form, or a page of traces")},
            {400: "A bad filter, shown on the page", 401: "The session is not valid any more: the sign-in form"},
        ),
        auth="session",
        parameters=(*REVIEW_FILTERS, CURSOR),
    ),
    ("/audit/sign-in", "post"): Operation(
        "Open a session with an auditor key",
        "audit pages",
        page_answers(
            {"303": {**REDIRECT, "headers": {**REDIRECT["headers"], "Set-Cookie": {"schema": STRING}}}},
            {
                400: "Not a form",
                401: "The key was not accepted",
                403: "Not from this page, or not an auditor's key",
                413: "The body is too large",
            },
        ),
        auth=None,
        body={
            "required": True,
            "content": {
                "application/x-www-form-urlencoded": {
                    "schema": obj(
                        {"key": {"type": "string", "description": "An API key with the auditor role"}}, required=["key"]
                    )
                }
            },
        },
        description="Accepted from the audit page only: the `Origin` header must name this host.",
    ),
    ("/audit/sign-out", "post"): Operation(
        "End the session",
        "audit pages",
        page_answers({"303": REDIRECT}, {403: "Not from this page"}),
        auth="session",
        description="Accepted from the audit page only: the `Origin` header must name this host.",
    ),
    ("/audit/traces/{trace_id}", "get"): Operation(
        "One trace as a page",
        "audit pages",
        page_answers({"200": page("The trace")}, {401: "Not signed in: the sign-in form", 404: "No such trace in the tenant"}),
        auth="session",
        parameters=(TRACE_ID,),
    ),
    ("/audit/verify", "get"): Operation(
        "The chain check as a page",
        "audit pages",
        page_answers({"200": page("The chain check")}, {401: "Not signed in: the sign-in form"}),
        auth="session",
    ),
}

IMPLICIT_METHODS = frozenset({"HEAD"})  # Starlette answers HEAD wherever GET is routed


def routed(routes: Iterable[BaseRoute]) -> set[tuple[str, str]]:
    """Every (path, method) the routes take, methods lower-case, HEAD left out."""
    return {
        (route.path, method.lower())
        for route in routes
        if isinstance(route, Route)
        for method in (route.methods or ())
        if method not in IMPLICIT_METHODS
    }


def document(routes: Iterable[BaseRoute]) -> Schema:
    """The OpenAPI 3.1 document of the routes given (those `OPERATIONS` documents)."""
    taken = routed(routes)
    paths: dict[str, dict[str, Schema]] = {}
    for (path, method), operation in OPERATIONS.items():
        if (path, method) in taken:
            operation_id = method + "_" + path.strip("/").replace("/", "_").replace("{", "").replace("}", "").replace(".", "_")
            paths.setdefault(path, {})[method] = operation.render(operation_id or method)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Governed retrieval gateway",
            "version": "1",
            "description": 'A policy-first retrieval gateway. Errors are `{"error": {"code", "message", "trace_id"}}`; '
            "every /v1 answer carries `x-trace-id`, `traceparent` and `Server-Timing`.",
        },
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": dict(sorted(model_schemas().items())),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key (`gw_<id>_<secret>`, from `gateway keys create`) or a JWT",
                },
                "auditSession": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": SESSION_COOKIE,
                    "description": "The audit page's session, opened by POST /audit/sign-in",
                },
            },
        },
    }


async def openapi_route(request: Request) -> JSONResponse:
    """GET /openapi.json: built once per app, from its own routes."""
    state = request.app.state
    built = getattr(state, "openapi", None)
    if built is None:
        built = state.openapi = document(request.app.routes)
    return JSONResponse(built)
