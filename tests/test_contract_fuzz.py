"""The HTTP contract, fuzzed. Schemathesis generates requests from the document the app serves at
/openapi.json, for every operation and with every role's key (and with none), valid ones and
invalid ones; each goes in-process through the app's real HTTP stack on SQLite, and each answer is
checked against the document: no 5xx, a documented status, a documented content type, the
documented headers (Retry-After on a 429, x-trace-id), a body of the documented schema.

Random ids and random task types would only ever meet 404s and policy denials, so a drawn share
of the generated requests is steered into the data (`steer`): an id that exists, a granted task,
a signed-in audit session, a front matter with an acl. `test_the_documented_answers` walks every
operation once with a request that succeeds, so each success answer is checked against its schema.

Bounded and deterministic: EXAMPLES examples per operation, role and mode (GATEWAY_FUZZ_EXAMPLES
overrides it), Hypothesis derandomized, no example database, no shrinking (a failure is reported
as found: the request and the answer). Every distinct failure of an operation is reported at once.
KNOWN_BUGS lists failures that a file owned elsewhere still causes: when only those are found, the
test is an expected failure (xfail) naming the bug; any other failure fails it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gateway.http.app import create_app
from gateway.http.audit_pages import SESSION_COOKIE
from gateway.http.openapi import document
from gateway.policy.bundle import read_bundle
from gateway.settings import PROJECT_POLICIES, Settings, load_settings
from tests.conftest import Gateway, fresh_database, open_gateway

EXAMPLES = int(os.environ.get("GATEWAY_FUZZ_EXAMPLES", "20"))
BACKEND = os.environ.get("GATEWAY_FUZZ_BACKEND", "sqlite")  # or postgres (GATEWAY_TEST_POSTGRES_URL)
TENANT = "acme"
# Every role a key can have, each on a key of its own; `anonymous` sends no credential.
ROLES = ("agent", "ingest", "auditor", "policy_admin", "key_admin", "anonymous")
GROUPS = ("sales", "support")
# Task types the policy grants the fuzzing keys (groups sales and support, role agent).
GRANTED_TASKS = ({"type": "account_followup", "scope": "sales"}, {"type": "support_ticket"}, {"type": "research"})
SALES = GRANTED_TASKS[0]
ENTITIES = ("ent_fuzz_a", "ent_fuzz_b", "ent_fuzz_c")  # the fuzzing may merge and delete these; the seed's others stay
FRONT_MATTER = "---\nacl: ['*']\nscope: [sales]\n---\n"
SAME_ORIGIN = {"Origin": "http://testserver"}  # what a browser sends with the audit page's own forms
# Limits the fuzzing would otherwise reach (it sends far more calls per second than an agent).
LIMITS = {
    "admission_actor_rate": 100_000,
    "admission_tenant_rate": 100_000,
    "admission_actor_concurrency": 1_000,
    "admission_tenant_concurrency": 1_000,
    "admission_capacity": 1_000,
}
# A JWT issuer that is a URL, so the OAuth metadata of /mcp is published (without one it is a 404).
OAUTH = {"jwt_secret": "fuzz-hs256-secret-" + "x" * 46, "jwt_issuer": "https://idp.example.com"}

# (METHOD /path, failure kind as `failure_key` spells it) -> the bug, with where it is.
KNOWN_BUGS: dict[tuple[str, str], str] = {}

CHECKS = [
    schemathesis.checks.not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@schemathesis.serializer("application/x-ndjson")
def ndjson(context: Any, value: Any) -> bytes:
    """The NDJSON body of the items and edges endpoints: one JSON value per line."""
    if isinstance(value, list):
        return "".join(json.dumps(entry) + "\n" for entry in value).encode()
    return json.dumps(value).encode()


@schemathesis.serializer("text/markdown")
def markdown(context: Any, value: Any) -> bytes:
    return (value if isinstance(value, str) else json.dumps(value)).encode("utf-8", "surrogatepass")


def labels() -> list[str]:
    """The operations of the document, as `METHOD /path`, known at collection (no app is started)."""
    app = create_app(load_settings({"data_dir": Path("unused"), "database_url": "sqlite://"}, environ={}))
    return [f"{method.upper()} {path}" for path, item in document(app.routes)["paths"].items() for method in item]


@dataclass
class Fuzzed:
    gateway: Gateway
    schema: Any
    headers: dict[str, dict[str, str]]
    keys: dict[str, str]
    known: dict[str, list[str]]  # existing values, by path parameter name (and a few more)

    def send(self, case: Any, headers: dict[str, str]) -> Any:
        """The case as the gateway's test client sends it: the app runs in the client's event loop,
        under its lifespan. No redirect is followed and no cookie is kept between calls."""
        client = self.gateway.client
        kwargs = case.as_transport_kwargs(base_url="http://testserver", headers=headers)
        request_headers = dict(kwargs["headers"])
        if not headers:
            request_headers.pop("Authorization", None)  # anonymous: whatever the case generated stays out too
        if kwargs.get("cookies"):
            request_headers["Cookie"] = "; ".join(f"{name}={value}" for name, value in kwargs["cookies"].items())
        content: Any = None
        data: Any = None
        if "json" in kwargs:
            content = json.dumps(kwargs["json"]).encode()
        elif "data" in kwargs:
            if isinstance(kwargs["data"], (bytes, str)):
                content = kwargs["data"]
            else:
                data = kwargs["data"]
        try:
            return client.request(
                kwargs["method"],
                kwargs["url"],
                headers=request_headers,
                params=kwargs.get("params") or None,
                content=content,
                data=data,
                follow_redirects=False,
            )
        finally:
            client.cookies.clear()


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    directory = tmp_path_factory.mktemp("fuzz")
    known_settings = {f.name for f in fields(Settings)}
    overrides = {key: value for key, value in {**LIMITS, **OAUTH}.items() if key in known_settings}
    # Signed checkpoints, so the proof of a trace answers too.
    from audit.integrity import generate

    overrides |= {
        "audit_signing_key": generate(directory / "keys")["private"],
        "audit_checkpoints": directory / "audit.checkpoints",
        "platform_tenant": TENANT,
    }  # its policy_admin may reload
    database = fresh_database(BACKEND, directory)
    with open_gateway(next(database), directory, **overrides) as gateway:
        keys = {
            role: gateway.key(f"fuzz-{role}", tenant=TENANT, roles=(role,), groups=GROUPS, clearance="confidential")
            for role in ROLES[:-1]
        }
        headers = {role: gateway.auth(key) for role, key in keys.items()} | {"anonymous": {}}
        served = gateway.client.get("/openapi.json")
        assert served.status_code == 200
        fuzzed = Fuzzed(gateway, schemathesis.openapi.from_dict(served.json()), headers, keys, {})
        fuzzed.known = seed(fuzzed)
        yield fuzzed
    next(database, None)  # drops a PostgreSQL schema


def seed(fuzzed: Fuzzed) -> dict[str, list[str]]:
    """A little of everything, so that answers have items, entities, edges and traces in them; the
    values that exist, for `steer`."""
    gateway = fuzzed.gateway
    items = [
        {
            "id": "ent_jane",
            "kind": "entity",
            "entity_type": "contact",
            "name": "Jane",
            "email": "jane@globex.example",
            "acl": ["*"],
        },
        {
            "id": "ent_globex",
            "kind": "entity",
            "entity_type": "company",
            "name": "Globex",
            "website": "globex.example",
            "acl": ["*"],
        },
        *({"id": entity, "kind": "entity", "entity_type": "company", "name": entity, "acl": ["*"]} for entity in ENTITIES),
        {
            "id": "mem_pricing",
            "kind": "memory",
            "text": "Jane asked about annual pricing and a discount.",
            "entity": "ent_jane",
            "acl": ["*"],
            "scope": ["sales"],
            "tags": ["pricing"],
        },
        {
            "id": "mem_ticket",
            "kind": "memory",
            "text": "Jane's ticket: the export is slow.",
            "entity": "ent_jane",
            "acl": ["*"],
            "scope": ["support"],
        },
        {
            "id": "prop_title",
            "kind": "property",
            "name": "title",
            "value": "CFO",
            "entity": "ent_jane",
            "acl": ["*"],
            "scope": ["sales"],
        },
        {
            "id": "edge_works",
            "kind": "edge",
            "from": "ent_jane",
            "to": "ent_globex",
            "relation": "works_at",
            "acl": ["*"],
            "scope": ["sales"],
        },
    ]
    gateway.ingest(TENANT, items)
    writer = gateway.auth(fuzzed.keys["ingest"])
    text = FRONT_MATTER.replace("[sales]", "[sales, research]") + "# Pricing\n\nAnnual plans get a discount.\n"
    assert gateway.client.put("/v1/documents/doc_pricing", content=text, headers=writer).status_code == 200
    traces = []
    for role in ("agent", "policy_admin"):  # a call of each retrieving key, for usage and feedback
        response = gateway.retrieve(fuzzed.keys[role], {"task": SALES, "query": "pricing", "entities": [{"id": "ent_jane"}]})
        assert response.status_code == 200, response.text
        traces.append(response.headers["x-trace-id"])
    spare_keys = [gateway.key(f"fuzz-spare-{n}", tenant=TENANT).split("_")[1] for n in range(2)]
    sessions = []
    for _ in range(2):  # one for the pages, one the fuzzing of sign-out may end
        response = gateway.client.post(
            "/audit/sign-in", data={"key": fuzzed.keys["auditor"]}, headers=SAME_ORIGIN, follow_redirects=False
        )
        assert response.status_code == 303, response.text
        sessions.append(response.cookies[SESSION_COOKIE])
        gateway.client.cookies.clear()
    return {
        "trace_id": traces,
        "entity_id": list(ENTITIES),
        "key_id": spare_keys,
        "document_id": ["doc_pricing"],
        "session": sessions[:1],
        "spare_session": sessions[1:],
    }


def steer(label: str, case: Any, known: dict[str, list[str]], auditor_key: str, choice: int) -> Any:
    """Point a generated case at the data (choice 0 leaves it as generated): existing ids in the
    path, a granted task, a signed-in session, the audit forms' own origin, a document's acl."""
    if not choice:
        return case
    for name in case.path_parameters or {}:
        if name in known:
            case.path_parameters[name] = known[name][choice % len(known[name])]
    body = case.body
    if label == "POST /v1/retrieve" and isinstance(body, dict):
        case.body = {**body, "task": GRANTED_TASKS[choice % len(GRANTED_TASKS)]}
    elif label == "POST /v1/entities/{entity_id}/merge" and isinstance(body, dict):
        case.body = {**body, "into": ENTITIES[(choice + 1) % len(ENTITIES)]}
    elif label == "PUT /v1/entities/{entity_id}" and isinstance(body, dict):
        case.body = {**body, "entity_type": "contact"}
    elif label == "PUT /v1/documents/{document_id}" and isinstance(body, str):
        case.body = FRONT_MATTER + body
    elif label == "POST /v1/keys" and isinstance(body, dict):
        case.body = {**body, "principal": "user:fuzz-made"}
    elif label == "POST /audit/sign-in" and isinstance(body, dict):
        case.body = {**body, "key": auditor_key}
    if label.startswith("POST /audit/"):
        case.headers = {**(case.headers or {}), **SAME_ORIGIN}
    if label.startswith("GET /audit") or label == "POST /audit/sign-out":
        session = known["spare_session" if label == "POST /audit/sign-out" else "session"][0]
        case.cookies = {**(case.cookies or {}), SESSION_COOKIE: session}
    return case


def failure_key(failure: Failure) -> str:
    return f"{type(failure).__name__}: {failure.title}"


def check(fuzzed: Fuzzed, label: str, case: Any, headers: dict[str, str], found: dict[str, str], note: str) -> Any:
    """Send the case and check its answer; a failure is noted once per kind, with the request and answer."""
    response = fuzzed.send(case, headers)
    try:
        case.validate_response(response, checks=CHECKS, headers=headers)
    except FailureGroup as group:
        for failure in group.exceptions:
            found.setdefault(
                failure_key(failure),
                f"{note}: {case.as_curl_command()}\n-> {response.status_code} {response.text[:500]}\n{failure.message}",
            )
    return response


def report(label: str, role: str, found: dict[str, str]) -> None:
    known = {key: bug for (where, key), bug in KNOWN_BUGS.items() if where == label}
    unexpected = {key: text for key, text in found.items() if key not in known}
    assert not unexpected, f"{label} as {role}:\n\n" + "\n\n".join(f"{key}\n{text}" for key, text in unexpected.items())
    seen = [bug for key, bug in known.items() if key in found]
    if seen:
        pytest.xfail("; ".join(seen))


def test_the_documented_answers(fuzzed: Fuzzed) -> None:
    """Every operation once with a request that succeeds (and a few that fail by design), each answer
    checked against the document; it runs first, so the fuzzing finds its traces and keys too."""
    schema, keys, succeeded = fuzzed.schema, fuzzed.keys, set()
    found: dict[str, Any] = {}
    state: dict[str, Any] = {}

    def call(label: str, role: str, status: int, **case: Any) -> Any:
        method, path = label.split(" ", 1)
        response = check(fuzzed, label, schema[path][method].Case(**case), fuzzed.headers[role], found, f"{label} as {role}")
        assert response.status_code == status, f"{label} as {role}: {response.status_code} {response.text[:500]}"
        if status < 400:
            succeeded.add(label)
        return response

    for label in (
        "GET /healthz",
        "GET /readyz",
        "GET /metrics",
        "GET /openapi.json",
        "GET /.well-known/oauth-protected-resource/mcp",
    ):
        call(label, "anonymous", 200)
    ingested = [
        {
            "id": "mem_scenario",
            "kind": "memory",
            "text": "Globex renewal is due in March.",
            "entity": "ent_globex",
            "acl": ["*"],
            "scope": ["sales"],
            "valid_from": "2026-01-01T00:00:00Z",
        }
    ]
    call("PUT /v1/items", "ingest", 200, body=ingested, media_type="application/json")
    call("PUT /v1/items", "ingest", 200, body=ingested, media_type="application/x-ndjson")
    call(
        "PUT /v1/edges",
        "ingest",
        200,
        body=[{"from": "ent_globex", "to": "ent_jane", "relation": "owns", "acl": ["*"]}],
        media_type="application/json",
    )
    call(
        "PUT /v1/entities/{entity_id}",
        "ingest",
        200,
        path_parameters={"entity_id": "ent_scenario"},
        body={"entity_type": "contact", "name": "Scenario", "email": "scenario@globex.example", "acl": ["*"]},
        media_type="application/json",
    )
    call(
        "PUT /v1/entities/{entity_id}",
        "ingest",
        422,
        path_parameters={"entity_id": "ent_scenario"},
        body={"acl": ["*"]},
        media_type="application/json",
    )  # no entity_type: the report says why
    call(
        "PUT /v1/documents/{document_id}",
        "ingest",
        200,
        path_parameters={"document_id": "doc_scenario"},
        body=FRONT_MATTER + "# Renewal\n\nGlobex renews in March.\n\n## Terms\n\nNet 30.\n",
        media_type="text/markdown",
    )

    def merge_scenario_into(into: str, status: int) -> None:
        call(
            "POST /v1/entities/{entity_id}/merge",
            "ingest",
            status,
            path_parameters={"entity_id": "ent_scenario"},
            body={"into": into},
            media_type="application/json",
        )

    merge_scenario_into("ent_jane", 200)
    call("DELETE /v1/entities/{entity_id}", "ingest", 200, path_parameters={"entity_id": "ent_scenario"})
    merge_scenario_into("ent_globex", 409)

    sales = {
        "task": SALES,
        "query": "pricing renewal discount",
        "entities": [{"email": "Jane@Globex.example"}, {"id": "ent_scenario"}],
        "sources": {"semantic": False},
    }
    first = call("POST /v1/retrieve", "agent", 200, body={**sales, "budget": {"bytes": 60}}, media_type="application/json").json()
    assert first["items"] and first["entities"] and first["cursor"], first
    state["trace"] = first["trace_id"]
    call("POST /v1/retrieve", "agent", 200, body={"task": SALES, "cursor": first["cursor"]}, media_type="application/json")
    call(
        "POST /v1/retrieve",
        "agent",
        200,
        body={"task": SALES, "fetch": ["mem_pricing", "edge_works"], "as_of": "2026-06-01T00:00:00Z"},
        media_type="application/json",
    )
    call(
        "POST /v1/retrieve",
        "policy_admin",
        200,
        body={"task": {"type": "research"}, "query": "discount", "depth": "deep"},
        media_type="application/json",
    )
    denied = call("POST /v1/retrieve", "agent", 403, body={"task": {"type": "compliance_review"}}, media_type="application/json")
    assert denied.json()["error"]["reasons"], denied.text

    call(
        "POST /v1/traces/{trace_id}/usage",
        "agent",
        200,
        path_parameters={"trace_id": state["trace"]},
        body={"used": [first["items"][0]["id"], "mem_never_returned"]},
        media_type="application/json",
    )
    call(
        "POST /v1/traces/{trace_id}/feedback",
        "agent",
        200,
        path_parameters={"trace_id": state["trace"]},
        body={"rating": 4, "comment": "useful"},
        media_type="application/json",
    )
    call("GET /v1/policy", "policy_admin", 200)
    call("POST /v1/policy/reload", "policy_admin", 200)
    actor = {"id": "fuzz-agent", "tenant": TENANT, "roles": ["agent"], "groups": list(GROUPS), "clearance": "confidential"}
    call(
        "POST /v1/policy/explain",
        "policy_admin",
        200,
        body={"actor": actor, "request": {"task": SALES, "query": "pricing"}, "items": ["mem_pricing", "mem_missing"]},
        media_type="application/json",
    )
    shipped = read_bundle(PROJECT_POLICIES)
    candidate = {"modules": dict(shipped.modules), "data": shipped.data}
    call("POST /v1/policy/impact", "policy_admin", 200, body={"policies": candidate, "limit": 50}, media_type="application/json")
    listed = call("GET /v1/audit/traces", "auditor", 200, query={"limit": "3", "actor": "user:fuzz-agent"}).json()
    call("GET /v1/audit/traces", "auditor", 200, query={"limit": "3", "cursor": listed["cursor"]})
    call("GET /v1/audit/traces/{trace_id}", "auditor", 200, path_parameters={"trace_id": state["trace"]})
    fuzzed.gateway.client.app.state.context.audit.checkpointer.checkpoint(every_chain=True)  # type: ignore[attr-defined]
    call("GET /v1/audit/traces/{trace_id}/proof", "auditor", 200, path_parameters={"trace_id": state["trace"]})
    call("GET /v1/audit/verify", "auditor", 200)
    call("GET /v1/audit/export", "auditor", 200, query={"format": "csv", "since": "2000-01-01T00:00:00Z"})
    call("GET /v1/audit/export", "auditor", 200)
    call("GET /v1/audit/overview", "auditor", 200, query={"period": "7d"})
    call("GET /v1/audit/subjects/{entity_id}", "auditor", 200, path_parameters={"entity_id": "ent_globex"})
    call(
        "GET /v1/audit/subjects/{entity_id}", "auditor", 200, path_parameters={"entity_id": "ent_globex"}, query={"format": "csv"}
    )
    call("GET /v1/audit/evidence", "auditor", 200, query={"since": "2000-01-01T00:00:00Z", "until": "2100-01-01T00:00:00Z"})

    call("GET /v1/keys", "key_admin", 200)
    made = call(
        "POST /v1/keys",
        "key_admin",
        201,
        body={"principal": "user:scenario", "roles": ["agent"], "groups": ["sales"]},
        media_type="application/json",
    ).json()
    call("DELETE /v1/keys/{key_id}", "key_admin", 200, path_parameters={"key_id": made["id"]})

    signed_in = call(
        "POST /audit/sign-in",
        "anonymous",
        303,
        body={"key": keys["auditor"]},
        media_type="application/x-www-form-urlencoded",
        headers=SAME_ORIGIN,
    )
    session = {SESSION_COOKIE: signed_in.cookies[SESSION_COOKIE]}
    call("GET /audit", "anonymous", 200, cookies=session, query={"task": "account_followup"})
    call("GET /audit/traces/{trace_id}", "anonymous", 200, cookies=session, path_parameters={"trace_id": state["trace"]})
    call("GET /audit/verify", "anonymous", 200, cookies=session)
    call("GET /audit/overview", "anonymous", 200, cookies=session, query={"period": "30d"})
    call("GET /audit/subjects", "anonymous", 200, cookies=session, query={"entity": "ent_globex"})
    subject = {"entity_id": "ent_globex"}
    call("GET /audit/subjects/{entity_id}", "anonymous", 200, cookies=session, path_parameters=subject)
    call("GET /audit/subjects/{entity_id}", "anonymous", 200, cookies=session, path_parameters=subject, query={"format": "csv"})
    call("POST /audit/sign-out", "anonymous", 303, cookies=session, headers=SAME_ORIGIN)
    call("GET /audit/verify", "anonymous", 401, cookies=session)  # signed out

    report("documented answers", "each", found)
    assert succeeded == set(labels()), f"operations never answered with success: {sorted(set(labels()) - succeeded)}"


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("label", labels())
def test_the_contract_holds(fuzzed: Fuzzed, label: str, role: str) -> None:
    method, path = label.split(" ", 1)
    operation = fuzzed.schema[path][method]
    headers = fuzzed.headers[role]
    found: dict[str, str] = {}
    # Invalid requests need something to make invalid: a body, a query or a path parameter.
    negatable = any(len(part) for part in (operation.body, operation.query, operation.path_parameters))
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE) if negatable else (GenerationMode.POSITIVE,):
        auditor_key = fuzzed.keys["auditor"]
        strategy = st.builds(
            lambda case, choice: steer(label, case, fuzzed.known, auditor_key, choice),
            operation.as_strategy(generation_mode=mode),
            st.integers(0, 3),
        )

        @settings(
            max_examples=EXAMPLES,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
            print_blob=False,
        )
        @given(case=strategy)
        def run(case: Any) -> None:
            check(fuzzed, label, case, headers, found, mode.value)

        run()
    report(label, role, found)


# --- what the fuzzing found -----------------------------------------------------------------------
# PostgreSQL refuses the NUL character in text (a DataError, so a 500) where SQLite finds nothing.


def test_a_merge_into_an_id_with_nul_is_refused(gateway: Gateway) -> None:
    writer = gateway.auth(gateway.key("writer", roles=("ingest",)))
    gateway.ingest("acme", [{"id": "ent_a", "kind": "entity", "entity_type": "company", "name": "A", "acl": ["*"]}])
    response = gateway.client.post("/v1/entities/ent_a/merge", json={"into": "ent_\u0000b"}, headers=writer)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"].startswith("into:")


def test_an_audit_lookup_with_nul_finds_nothing(gateway: Gateway) -> None:
    agent = gateway.key("agent", roles=("agent",), groups=GROUPS)
    trace_id = gateway.retrieve(agent, {"task": SALES, "query": "pricing"}).headers["x-trace-id"]
    auditor = gateway.auth(gateway.key("auditor", roles=("auditor",)))
    for name in ("actor", "task", "decision", "item"):
        listed = gateway.client.get("/v1/audit/traces", params={name: "user:agent\u0000"}, headers=auditor)
        assert (listed.status_code, listed.json()["traces"]) == (200, []), (name, listed.text)
        exported = gateway.client.get("/v1/audit/export", params={name: "x\u0000", "format": "csv"}, headers=auditor)
        assert (exported.status_code, exported.text.count("\n")) == (200, 1), (name, exported.text)  # the header line only
    assert gateway.client.get(f"/v1/audit/traces/{trace_id}%00", headers=auditor).status_code == 404
    for report, body in (("usage", {"used": []}), ("feedback", {"rating": 3})):
        response = gateway.client.post(f"/v1/traces/{trace_id}%00/{report}", json=body, headers=gateway.auth(agent))
        assert response.status_code == 404, response.text


def test_a_rate_limited_answer_is_documented(sqlite_url: str, tmp_path: Path) -> None:
    """429 with Retry-After, as the document says, on a gateway whose actors may start one call a second."""
    with open_gateway(sqlite_url, tmp_path, admission_actor_rate=1) as gateway:
        schema = schemathesis.openapi.from_dict(gateway.client.get("/openapi.json").json())
        headers = gateway.auth(gateway.key("agent", roles=("agent",)))
        case = schema["/v1/policy"]["GET"].Case()
        answers = [gateway.client.get("/v1/policy", headers=headers) for _ in range(2)]
        assert [a.status_code for a in answers] == [200, 429], [a.text for a in answers]
        assert answers[1].headers["retry-after"].isdigit()
        for answer in answers:
            case.validate_response(answer, checks=CHECKS, headers=headers)
