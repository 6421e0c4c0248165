"""The key life cycle over HTTP, for the `key_admin` role, in the caller's tenant only:
GET /v1/keys, POST /v1/keys, DELETE /v1/keys/{key_id}. A key's secret is shown once, in the answer
that creates it; neither it nor its hash is listed or audited."""

from __future__ import annotations

import functools

import anyio.to_thread
from pydantic import ValidationError

from api.keys import CreatedKey, KeyList, RevokedKey
from api.keys import NewKey as NewKey  # the contract's; named here for the route
from audit.record import KeyCreated, KeyRevoked, KeysListed
from core.errors import BadRequest, SchemaError
from core.validation import describe_validation_error
from gateway.auth import create_api_key, list_api_keys, revoke_api_key
from gateway.http.operation import KEYS, json_answer, json_body, path_parameter, ref
from gateway.http.traced import Call, requires, serving

ROLE = "key_admin"


@requires(ROLE)
async def list_keys(call: Call) -> tuple[int, KeyList]:
    keys = await anyio.to_thread.run_sync(list_api_keys, call.context.store, call.actor.tenant)
    call.trace.record(KeysListed(listed=len(keys)))
    return 200, KeyList.model_validate({"keys": keys})


@requires(ROLE)
async def create_key(call: Call) -> tuple[int, CreatedKey]:
    body = await call.json_object()
    if "tenant" in body:
        raise BadRequest("tenant: a key is made in the caller's own tenant; omit it")
    try:
        new = NewKey.model_validate(body)
    except ValidationError as exc:
        raise SchemaError(describe_validation_error(exc)) from exc
    token = await anyio.to_thread.run_sync(
        functools.partial(
            create_api_key,
            call.context.store,
            tenant=call.actor.tenant,
            principal=new.principal,
            roles=new.roles,
            groups=new.groups,
            clearance=new.clearance,
        )
    )
    key_id = token.split("_")[1]  # gw_<id>_<secret>
    call.trace.record(KeyCreated(created=key_id))
    created = await anyio.to_thread.run_sync(list_api_keys, call.context.store, call.actor.tenant, key_id)
    return 201, CreatedKey.model_validate({**created[0], "key": token})


@requires(ROLE)
async def revoke_key(call: Call) -> tuple[int, RevokedKey]:
    key_id = str(call.request.path_params["key_id"])
    revoked = await anyio.to_thread.run_sync(revoke_api_key, call.context.store, key_id, call.actor.tenant)
    call.trace.record(KeyRevoked(revoked=revoked["id"], changed=revoked["changed"], sessions_ended=revoked["sessions_ended"]))
    return 200, RevokedKey.model_validate(revoked)


# The operations this module serves (gateway/http/operation.py).
OPERATIONS = (
    KEYS.operation(
        "GET /v1/keys: The tenant's API keys, revoked ones too",
        serving("keys_list", list_keys),
        json_answer("The keys, oldest first", ref(KeyList)),
    ),
    KEYS.operation(
        "POST /v1/keys: Create an API key in the caller's tenant",
        serving("keys_create", create_key),
        json_answer("The new key; its secret is shown this once", ref(CreatedKey)),
        status=201,
        errors={400: "malformed JSON, a `tenant`, a bad principal, role, group or clearance", 422: None},
        body=json_body(ref(NewKey)),
    ),
    KEYS.operation(
        "DELETE /v1/keys/{key_id}: Revoke a key of the caller's tenant and end its audit-page sessions",
        serving("key_revoke", revoke_key),
        json_answer("The revoked key", ref(RevokedKey)),
        errors={400: "not a key id (16 hex digits)", 404: "no such key in this tenant"},
        parameters=(path_parameter("key_id", "The 16 hex digits after `gw_` in the key", "^[0-9a-f]{16}$"),),
    ),
)
