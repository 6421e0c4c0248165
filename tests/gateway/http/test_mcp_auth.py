"""/mcp as an OAuth 2.0 protected resource (RFC 9728): its metadata when the gateway trusts a JWT
issuer that is a URL, the `resource_metadata` its 401s point at, and nothing of either otherwise."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jwt
import pytest
from mcp import Client
from mcp.client.auth.utils import extract_resource_metadata_from_www_auth, handle_protected_resource_response
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth_utils import check_resource_allowed, resource_url_from_server_url
from starlette.requests import Request

from core.errors import ConfigurationError
from gateway.http.mcp_resource import UNPUBLISHED, ProtectedResource
from gateway.settings import load_settings
from tests.conftest import Gateway, open_gateway, serve_gateway
from tests.gateway.fixtures import SALES_TASK, memory

METADATA = "/.well-known/oauth-protected-resource/mcp"
ISSUER = "https://idp.example.com/realms/acme"
SECRET = "test-hs256-secret-" + "x" * 46  # PyJWT warns (an error here) on short HMAC keys
PUBLIC = "https://gateway.example.com"
OAUTH = {"jwt_secret": SECRET, "jwt_issuer": ISSUER}
LISTING = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
NOTE = memory("mem_oauth_note", "platypusoauth renewal note for the sales group", acl=["group:sales"])
# A challenge as RFC 9110 §11.2 writes it: the scheme, then name="value" parameters, comma-separated.
PARAMETER = re.compile(r'\s*([a-z_]+)="([^"\\]*)"\s*(?:,|$)')


def token(audience: str | None = None, **claims: Any) -> str:
    payload = {
        "sub": "carol",
        "tenant": "acme",
        "roles": ["agent"],
        "groups": ["sales"],
        "clearance": "internal",
        "iss": ISSUER,
        "exp": int(time.time()) + 600,
        **claims,
    }
    if audience is not None:
        payload["aud"] = audience
    return jwt.encode(payload, SECRET, algorithm="HS256")


def parameters(challenge: str) -> dict[str, str]:
    """The challenge's parameters; fails unless the whole header is `Bearer` and well-formed pairs,
    so a parameter smuggled in (or a quote left open) cannot pass unseen."""
    scheme, _, rest = challenge.partition(" ")
    assert scheme == "Bearer" and "\r" not in challenge and "\n" not in challenge, challenge
    found, position = {}, 0
    while position < len(rest):
        match = PARAMETER.match(rest, position)
        assert match is not None, f"malformed challenge at {position}: {challenge!r}"
        assert match[1] not in found, f"{match[1]} given twice: {challenge!r}"
        found[match[1]] = match[2]
        position = match.end()
    return found


def unauthenticated(gateway: Gateway, authorization: str | None = None, **headers: str) -> Any:
    sent = {**ACCEPT, **headers, **({"Authorization": authorization} if authorization else {})}
    response = gateway.client.post("/mcp", json=LISTING, headers=sent)
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "unauthenticated"
    return response


@pytest.fixture(scope="module")
def oauth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A gateway that trusts ISSUER's JWTs (and knows no public URL: the request's host stands in)."""
    directory = tmp_path_factory.mktemp("oauth")
    with open_gateway(f"sqlite:///{directory / 'gateway.db'}", directory, **OAUTH) as gateway:
        yield gateway


# ---------------------------------------------------------------- the metadata


def test_the_metadata_names_the_issuer_and_the_mcp_url(oauth: Gateway) -> None:
    response = oauth.client.get(METADATA)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "resource": "http://testserver/mcp",
        "authorization_servers": [ISSUER],
        "bearer_methods_supported": ["header"],
        "resource_name": "Governed retrieval gateway (MCP tools)",
    }
    # it names the request's Host (no GATEWAY_PUBLIC_URL): a shared cache must not serve it to another caller
    assert response.headers["cache-control"] == "private, max-age=3600" and response.headers["vary"] == "Host"
    assert "x-trace-id" not in response.headers  # public and holding no data, like /healthz: no audit row
    assert oauth.client.get("/.well-known/oauth-protected-resource").status_code == 404  # only the path-suffixed form


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({}, "GATEWAY_JWT_ISSUER is not set"),
        ({"jwt_issuer": ISSUER}, "GATEWAY_JWT_SECRET or GATEWAY_JWT_PUBLIC_KEY"),  # an issuer, but no JWT is verified
        (
            {"jwt_secret": SECRET, "jwt_issuer": "idp"},
            "GATEWAY_JWT_ISSUER is not an http(s) URL",
        ),  # a name, as tests/gateway/test_auth.py uses
        ({"jwt_secret": SECRET, "jwt_issuer": "http:idp"}, "GATEWAY_JWT_ISSUER is not an http(s) URL"),
    ],
)
def test_without_an_issuer_url_nothing_is_published(
    sqlite_url: str, tmp_path: Path, settings: dict[str, Any], named: str
) -> None:
    with open_gateway(sqlite_url, tmp_path, **settings) as gateway:
        response = gateway.client.get(METADATA)
        assert response.status_code == 404, response.text
        error = response.json()["error"]
        # one message whatever is missing (`named` is what the gateway knows, not what it tells), naming
        # the settings and never a value
        assert error["code"] == "not_found" and error["message"] == UNPUBLISHED
        assert "idp" not in error["message"] and named in ProtectedResource.of(gateway.settings).unpublished
        for authorization in (None, "Bearer gw_0123456789abcdef_" + "x" * 40):
            challenge = parameters(unauthenticated(gateway, authorization).headers["www-authenticate"])
            assert "resource_metadata" not in challenge and challenge["realm"] == "governed-gateway"
        assert unauthenticated(gateway).headers["www-authenticate"] == 'Bearer realm="governed-gateway"'  # as before


def test_with_mcp_off_nothing_is_published(sqlite_url: str, tmp_path: Path) -> None:
    with open_gateway(sqlite_url, tmp_path, mcp=False, **OAUTH) as gateway:
        response = gateway.client.get(METADATA)
        assert response.status_code == 404 and response.json()["error"]["message"] == UNPUBLISHED
        assert ProtectedResource.of(gateway.settings).unpublished.startswith("GATEWAY_MCP is off")


def test_the_route_and_its_document_are_the_same_in_every_configuration(sqlite_url: str, tmp_path: Path) -> None:
    with open_gateway(sqlite_url, tmp_path) as plain:
        document = plain.client.get("/openapi.json").json()
    operation = document["paths"][METADATA]["get"]
    assert operation["security"] == [] and set(operation["responses"]) == {"200", "400", "404"}
    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ProtectedResourceMetadata"
    }


# ---------------------------------------------------------------- the challenge


def test_every_401_of_mcp_names_the_metadata(oauth: Gateway) -> None:
    url = "http://testserver" + METADATA
    missing = unauthenticated(oauth)
    assert missing.headers["www-authenticate"] == f'Bearer realm="governed-gateway", resource_metadata="{url}"'
    for authorization in (
        "Bearer gw_0123456789abcdef_" + "x" * 40,
        "Bearer not-a-token",
        f"Bearer {token(exp=int(time.time()) - 60)}",
        f"Bearer {token(iss='https://other-idp.example.com')}",
    ):
        challenge = parameters(unauthenticated(oauth, authorization).headers["www-authenticate"])
        assert (challenge["error"], challenge["resource_metadata"]) == ("invalid_token", url), authorization
    # the HTTP API's 401s are not the MCP resource's: no pointer there
    assert "www-authenticate" not in oauth.client.post("/v1/retrieve", json={"task": SALES_TASK}).headers


def test_the_public_url_wins_over_the_host(sqlite_url: str, tmp_path: Path) -> None:
    with open_gateway(sqlite_url, tmp_path, public_url=PUBLIC + "/", **OAUTH) as gateway:
        assert gateway.settings.public_url == PUBLIC  # the trailing slash is dropped once, at start-up
        for host in ("testserver", "attacker.example", "attacker.example:8443"):
            metadata = gateway.client.get(METADATA, headers={"Host": host})
            assert metadata.status_code == 200 and metadata.json()["resource"] == f"{PUBLIC}/mcp", host
            assert (
                metadata.headers["cache-control"] == "public, max-age=3600" and "vary" not in metadata.headers
            )  # one answer for all
            challenge = parameters(unauthenticated(gateway, Host=host).headers["www-authenticate"])
            assert challenge["resource_metadata"] == PUBLIC + METADATA


def test_without_a_public_url_the_host_as_parsed_names_the_gateway(oauth: Gateway) -> None:
    metadata = oauth.client.get(METADATA, headers={"Host": "Gateway.Internal:8080"})
    assert metadata.json()["resource"] == "http://gateway.internal:8080/mcp"
    challenge = parameters(unauthenticated(oauth, Host="gateway.internal:8080").headers["www-authenticate"])
    assert challenge["resource_metadata"] == "http://gateway.internal:8080" + METADATA


@pytest.mark.parametrize(
    "host",
    [
        'evil.example", error="insufficient_scope',
        "evil.example, resource_metadata=https://evil.example/x",
        'evil.example\\"',
        "evil.example\r\nSet-Cookie: pwned=1",
        "evil.example\nX-Injected: 1",
        "evil example",
        "[::1",
        "evil.example:99999",
        "user@evil.example",
        "",
    ],
)
def test_a_hostile_host_cannot_break_into_the_challenge(oauth: Gateway, host: str) -> None:
    """Starlette takes a Host that is not a host and port for none (the server's address stands in),
    and the gateway checks the authority again before quoting a URL built on it."""
    response = unauthenticated(oauth, Host=host)
    challenge = parameters(response.headers["www-authenticate"])
    assert set(challenge) == {"realm", "resource_metadata"}
    assert challenge["resource_metadata"] == "http://testserver" + METADATA
    assert "evil" not in response.headers["www-authenticate"] and "set-cookie" not in response.headers
    assert "x-injected" not in response.headers
    metadata = oauth.client.get(METADATA, headers={"Host": host})
    assert metadata.status_code == 200 and metadata.json()["resource"] == "http://testserver/mcp"


def test_a_jwt_for_another_audience_is_refused_with_the_challenge(sqlite_url: str, tmp_path: Path) -> None:
    with open_gateway(sqlite_url, tmp_path, public_url=PUBLIC, jwt_audience=f"{PUBLIC}/mcp", **OAUTH) as gateway:
        for audience in ("https://other-resource.example.com/mcp", None):
            response = unauthenticated(gateway, f"Bearer {token(audience)}")
            challenge = parameters(response.headers["www-authenticate"])
            assert challenge["error"] == "invalid_token" and challenge["resource_metadata"] == PUBLIC + METADATA
            assert challenge["error_description"].startswith("JWT rejected: ")
            audited = gateway.trace(response.headers["x-trace-id"])
            assert (audited["endpoint"], audited["status_code"], audited["actor"]) == ("mcp", 401, None)
        listed = gateway.client.post(
            "/mcp", json=LISTING, headers={**ACCEPT, "Authorization": f"Bearer {token(f'{PUBLIC}/mcp')}"}
        )
        assert listed.status_code == 200, listed.text


# ---------------------------------------------------------------- an OAuth-capable client, over a socket


async def _discover_and_list(url: str, bearer: str) -> tuple[str | None, Any, list[str], Any]:
    """What an OAuth-capable MCP client does: read the 401's pointer, fetch the metadata it names,
    check that it describes the server asked; then, with a token from that server, list and call."""
    async with httpx2.AsyncClient(timeout=60) as http:
        refused = await http.post(f"{url}/mcp", json=LISTING, headers=ACCEPT)
        pointer = extract_resource_metadata_from_www_auth(refused)
        metadata = await handle_protected_resource_response(await http.get(pointer)) if pointer else None
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {bearer}"}, timeout=60) as http:
        async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
            names = [tool.name for tool in (await client.list_tools()).tools]
            fetched = await client.call_tool("fetch", {"task": SALES_TASK, "ids": ["mem_oauth_note"]})
    return pointer, metadata, names, fetched


def test_an_oauth_client_finds_the_issuer_and_its_jwt_lists_the_tools(tmp_path: Path) -> None:
    with serve_gateway(f"sqlite:///{tmp_path / 'gateway.db'}", tmp_path, **OAUTH) as live:
        live.gateway.ingest("acme", [NOTE])
        # RFC 8707: the client asks the issuer for a token whose audience is the resource it found
        audience = f"{live.url}/mcp"
        pointer, metadata, names, fetched = anyio.run(_discover_and_list, live.url, token(audience))
    assert pointer == live.url + METADATA
    assert metadata is not None and [str(server) for server in metadata.authorization_servers] == [ISSUER]
    assert check_resource_allowed(
        requested_resource=resource_url_from_server_url(f"{live.url}/mcp"), configured_resource=str(metadata.resource)
    )
    assert names == ["retrieve", "fetch", "expand", "report_usage", "feedback"]
    assert not fetched.is_error and [item["id"] for item in fetched.structured_content["items"]] == ["mem_oauth_note"]
    row = live.gateway.trace(fetched.meta["gateway/trace_id"])
    assert (row["actor"], row["tenant"], row["lineage"]["channel"]) == ("user:carol", "acme", "mcp")


def test_over_a_socket_a_hostile_host_falls_back_to_the_servers_address(tmp_path: Path) -> None:
    with serve_gateway(f"sqlite:///{tmp_path / 'gateway.db'}", tmp_path, **OAUTH) as live:
        response = httpx2.post(f"{live.url}/mcp", json=LISTING, headers={**ACCEPT, "Host": 'evil.example", error="x'})
    assert response.status_code == 401
    challenge = parameters(response.headers["www-authenticate"])
    assert challenge == {"realm": "governed-gateway", "resource_metadata": live.url + METADATA}


# ---------------------------------------------------------------- the setting


def test_the_public_url_is_a_scheme_and_host_only() -> None:
    assert load_settings(environ={}).public_url is None
    assert load_settings(environ={"GATEWAY_PUBLIC_URL": "http://[::1]:8080"}).public_url == "http://[::1]:8080"
    for bad in (
        "gateway.example.com",
        "ftp://gateway.example.com",
        "https://gateway.example.com/gw",
        "https://gateway.example.com?x=1",
        "https://user:hunter2@gateway.example.com",
        'https://gateway.example.com"',
        "https://gateway.example.com:65536",
        "https://gateway.example.com#top",
    ):
        with pytest.raises(ConfigurationError, match="GATEWAY_PUBLIC_URL") as refused:
            load_settings(environ={"GATEWAY_PUBLIC_URL": bad})
        assert "hunter2" not in str(refused.value)


def test_an_authority_starlette_let_through_is_checked_again() -> None:
    """Starlette vets the Host header but not the server address an ASGI server reports: the URL
    quoted in the challenge is checked here too, and names nothing rather than something broken."""
    resource = ProtectedResource.of(load_settings(OAUTH, environ={}))
    for server in (('evil.example", error="x', 80), ("evil.example, b", 80), ("a b", 80)):
        request = Request({"type": "http", "scheme": "http", "method": "POST", "path": "/mcp", "headers": [], "server": server})
        assert resource.urls(request) is None and resource.metadata_url(request) is None, server
    fine = Request(
        {"type": "http", "scheme": "https", "method": "POST", "path": "/mcp", "headers": [], "server": ("gw.example", 443)}
    )
    assert resource.urls(fine) == ("https://gw.example/mcp", "https://gw.example" + METADATA)
