"""How an operation is declared: its path, method, endpoint, role, bodies and answers, and the
schema pieces the declarations share. Each route module declares its own operations beside its
handlers (`OPERATIONS`); `gateway.http.table` gathers them into the app's routes, and
`gateway.http.openapi` renders the same declarations as the OpenAPI document."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from api.service import Error
from api.writes import ID
from core.errors import GatewayError

Schema = dict[str, Any]
Method = Literal["get", "put", "post", "delete"]
Endpoint = Callable[[Request], Awaitable[Response]]
# The attribute `@requires` sets on a handler, and `serving` on its endpoint: the role the call needs.
REQUIRED_ROLE = "required_role"

JSON = "application/json"
HTML = "text/html"
NDJSON = "application/x-ndjson"
SCHEMAS = "#/components/schemas/"

# When each error status is given; its codes come from the error tree (core.errors).
ERROR_WHEN = {
    400: "malformed input; the message names the field",
    401: "no, malformed, unknown, revoked or expired credential",
    403: "the key lacks the endpoint's role, or the policy said no (`reasons` lists why)",
    404: "nothing there",
    405: "a method the path does not take (`Allow` lists those it does)",
    408: "the body did not arrive within `GATEWAY_BODY_TIMEOUT_MS`",
    409: "the request contradicts stored state",
    413: "the body is above `GATEWAY_MAX_BODY_BYTES`",
    422: "well-formed JSON of the wrong shape",
    429: "past the bounds of the tenant's admission queue, or a rate quota; `Retry-After` says when to try again",
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


def ref(model: type[BaseModel] | str) -> Schema:
    """A reference to a model's schema (or to a schema by name: the item variants)."""
    return {"$ref": SCHEMAS + (model if isinstance(model, str) else model.__name__)}


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


# --- operations -----------------------------------------------------------------------------------

TRACE_ID_HEADER: Schema = {"description": "The call's audit row", "schema": STRING}
RETRY_AFTER: Schema = {
    "description": "Seconds to wait before trying again",
    "required": True,
    "schema": {"type": "integer", "minimum": 0},
}


@dataclass(frozen=True)
class Operation:
    """One (path, method) the app serves, declared once beside its handler: the route table
    (`gateway.http.table`) and the OpenAPI document (`gateway.http.openapi`) are both built from
    these. `serve` is the Starlette endpoint; `auth`: `bearer` (an API key or JWT, with `role` when
    the endpoint needs one), `session` (the audit page's cookie, optional), or None. The role is the
    one the handler's `@requires` checks (carried by `serving` onto the endpoint), never written here."""

    path: str
    method: Method
    serve: Endpoint
    summary: str
    tag: str
    responses: dict[str, Schema]
    auth: str | None = "bearer"
    body: Schema | None = None
    parameters: tuple[Schema, ...] = ()
    description: str = ""

    @property
    def role(self) -> str | None:
        role: str | None = getattr(self.serve, REQUIRED_ROLE, None)
        return role

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
    body = ref(Error) if also is None else {"anyOf": [ref(Error), also]}
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
    those every such call can give: 401, 403, 429, 500, 503 (and 408 and 413 when it reads a body)."""
    statuses: dict[int, str | None] = {
        401: None,
        403: None,
        429: None,
        500: None,
        503: None,
        **({408: None, 413: None} if body else {}),
        **errors,
    }
    answers = dict(ok)
    for status in sorted(statuses):
        answers[str(status)] = error(status, statuses[status], also=(also or {}).get(status))
    return dict(sorted(answers.items()))


METHODS: dict[str, Method] = {"GET": "get", "PUT": "put", "POST": "post", "DELETE": "delete"}


def read_heading(heading: str) -> tuple[str, Method, str]:
    """`"PUT /v1/items: Write items (idempotent by id)"`, the way the route modules' docstrings
    name an operation, as its path, method and summary."""
    route, summary = heading.split(": ", 1)
    method, path = route.split(" ", 1)
    return path, METHODS[method], summary


@dataclass(frozen=True)
class Calls:
    """The authenticated /v1 operations of one tag. Each is declared by what is its own: its heading
    (`"PUT /v1/items: Write items (idempotent by id)"`: method, path and summary), endpoint and answer
    (a 200 unless `status` says otherwise), the errors only it gives (`v1` adds those every call can
    give, and 413 when it takes a `body`), its parameters and body."""

    tag: str

    def operation(
        self,
        heading: str,
        serve: Endpoint,
        answer: Schema,
        *,
        status: int = 200,
        errors: dict[int, str | None] | None = None,
        also: dict[int, Schema] | None = None,
        parameters: tuple[Schema, ...] = (),
        body: Schema | None = None,
        description: str = "",
    ) -> Operation:
        path, method, summary = read_heading(heading)
        responses = v1({str(status): answer}, errors=errors or {}, body=body is not None, also=also)
        return Operation(
            path, method, serve, summary, self.tag, responses, body=body, parameters=parameters, description=description
        )


# The tags of the /v1 operations.
RETRIEVE = Calls("retrieve")
INGEST = Calls("ingest")
POLICY = Calls("policy")
KEYS = Calls("keys")
AUDIT = Calls("audit")


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


def batch_body(what: str, model: type[BaseModel] | str) -> Schema:
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
    query_parameter(
        "outcome", "Only retrieval calls with this outcome", {"enum": ["allow", "deny", "error", "rate_limited", "invalid"]}
    ),
    query_parameter("revision", "Only calls decided under this policy revision (`sha256:...`)"),
    query_parameter("reason", "Only denials with this reason"),
    query_parameter("returned", "Only calls that returned items of this sensitivity"),
    query_parameter("masked", "Only calls that masked personal data of this type (`EMAIL_ADDRESS`, ...)"),
    query_parameter(
        "revealed", "Only calls that returned personal data of this type in clear, revealed by the policy (`any`: some type)"
    ),
    query_parameter("entity", "Only calls that asked about, read, returned, sent or used an item about this entity"),
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
