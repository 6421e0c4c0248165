"""/mcp as an OAuth 2.0 protected resource (RFC 9728). When the gateway trusts a JWT issuer that is
an http(s) URL, the resource's metadata, at `METADATA_PATH`, names that issuer as the authorization
server, and every 401 of /mcp points at it (`resource_metadata` in the `WWW-Authenticate` challenge),
so an OAuth-capable client can find where to get a token. API keys have no authorization server;
without such an issuer nothing is published."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from mcp.server.auth.routes import build_resource_metadata_url
from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import AnyHttpUrl, TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse

from api.service import Error
from core.errors import BadRequest, NotFound, Unauthenticated
from gateway.http.errors import error_answer
from gateway.http.operation import Operation, json_answer, ref
from gateway.settings import HOST, Settings

log = logging.getLogger("gateway.mcp")
REALM = "governed-gateway"
MCP_PATH = "/mcp"
# RFC 9728 §3.1: the well-known name goes between the host and the resource's path, as the SDK's
# `build_resource_metadata_url` (and so its client) puts it.
METADATA_PATH = "/.well-known/oauth-protected-resource" + MCP_PATH
RESOURCE_NAME = "Governed retrieval gateway (MCP tools)"
METADATA_CACHE = "public, max-age=3600"  # what the SDK's own metadata route says: it changes with a restart only
# Without GATEWAY_PUBLIC_URL the answer names the request's Host: a shared cache must not hand one
# caller's answer (a Host it chose) to another.
METADATA_CACHE_BY_HOST = "private, max-age=3600"
HTTP_URL: TypeAdapter[AnyHttpUrl] = TypeAdapter(AnyHttpUrl)
UNPUBLISHED = (
    "no protected-resource metadata is published here: it takes GATEWAY_MCP on, GATEWAY_JWT_ISSUER set to the "
    "authorization server's URL, and GATEWAY_JWT_SECRET or GATEWAY_JWT_PUBLIC_KEY"
)


def challenge(error: Unauthenticated, had_credential: bool, metadata_url: str | None = None) -> str:
    """RFC 6750's challenge: a request with no credential is told only the scheme and realm, and
    where the resource's metadata is when there is some (RFC 9728 §5.1)."""
    parameters = [f'realm="{REALM}"']
    if had_credential:
        description = error.message.replace("\\", "").replace('"', "'")
        parameters += ['error="invalid_token"', f'error_description="{description}"']
    if metadata_url is not None:  # built on a checked host (`ProtectedResource.urls`): nothing in it to escape
        parameters.append(f'resource_metadata="{metadata_url}"')
    return "Bearer " + ", ".join(parameters)


def _unpublished(settings: Settings) -> str | None:
    """Why /mcp has no protected-resource metadata on this gateway, or None when it has."""
    if not settings.mcp:
        return "GATEWAY_MCP is off: there is no /mcp resource to describe"
    issuer = settings.jwt_issuer
    if issuer is None:
        return "GATEWAY_JWT_ISSUER is not set: no authorization server issues this gateway's credentials"
    if not settings.jwt_enabled:
        return "GATEWAY_JWT_ISSUER is set, but no JWT is accepted without GATEWAY_JWT_SECRET or GATEWAY_JWT_PUBLIC_KEY"
    # An issuer that is only a name (`idp`) is still checked in every token's `iss`, as it always was,
    # but names no authorization server a client could find: nothing is published for it.
    not_a_url = "GATEWAY_JWT_ISSUER is not an http(s) URL, so it names no authorization server a client could find"
    if not issuer.startswith(("http://", "https://")):  # pydantic would read `http:idp` as http://idp/
        return not_a_url
    try:
        HTTP_URL.validate_python(issuer)
    except ValidationError:
        return not_a_url
    return None


@dataclass(frozen=True, slots=True)
class ProtectedResource:
    """/mcp as an OAuth 2.0 protected resource: its metadata (RFC 9728), and where that is. `issuer`
    is the authorization server it names, None when nothing is published (`unpublished` says why)."""

    issuer: str | None
    public_url: str | None
    unpublished: str = ""

    @classmethod
    def of(cls, settings: Settings) -> ProtectedResource:
        problem = _unpublished(settings)
        if problem and settings.jwt_issuer:  # an operator who set an issuer learns here why nothing is published
            log.info("no OAuth protected-resource metadata for /mcp: %s", problem)
        return cls(settings.jwt_issuer if problem is None else None, settings.public_url, problem or "")

    def urls(self, request: Request) -> tuple[str, str] | None:
        """The resource's URL and its metadata's: on GATEWAY_PUBLIC_URL, else on the request's own
        scheme and host as Starlette parsed them (it falls back to the server's address when the
        Host is not a host and port). Checked again here, as the URL goes into the challenge's quoted
        string: an authority with a quote, a comma or a space names no URL, and neither does a
        gateway that publishes nothing."""
        if self.issuer is None:
            return None
        base = self.public_url
        if base is None:
            try:
                scheme, netloc = request.url.scheme, request.url.netloc
            except ValueError:  # urllib refuses what it cannot split; never a 500 for a header
                return None
            if scheme not in ("http", "https") or not HOST.fullmatch(netloc):
                return None
            base = f"{scheme}://{netloc}"
        try:
            resource = HTTP_URL.validate_python(base + MCP_PATH)
        except ValidationError:  # a host name of dots, a port past 65535
            return None
        return str(resource), str(build_resource_metadata_url(resource))

    def metadata_url(self, request: Request) -> str | None:
        urls = self.urls(request)
        return None if urls is None else urls[1]

    async def route(self, request: Request) -> JSONResponse:
        """GET /.well-known/oauth-protected-resource/mcp: public and holding no data, like /healthz,
        so not audited. 404 naming the setting when nothing is published; a request whose Host names
        no URL is a 400 (GATEWAY_PUBLIC_URL takes the Host out of it)."""
        if self.issuer is None:  # one answer for every reason: an anonymous caller learns nothing of the set-up
            return JSONResponse(error_answer(NotFound(UNPUBLISHED), None)[1], 404)
        urls = self.urls(request)
        if urls is None:
            bad_host = BadRequest("Host: not a host name and port to name this gateway by; set GATEWAY_PUBLIC_URL")
            return JSONResponse(error_answer(bad_host, None)[1], 400)
        metadata = ProtectedResourceMetadata.model_validate(
            {
                "resource": urls[0],
                "authorization_servers": [self.issuer],
                "bearer_methods_supported": ["header"],
                "resource_name": RESOURCE_NAME,
            }
        )
        headers = (
            {"Cache-Control": METADATA_CACHE} if self.public_url else {"Cache-Control": METADATA_CACHE_BY_HOST, "Vary": "Host"}
        )
        return JSONResponse(metadata.model_dump(mode="json", exclude_none=True), headers=headers)


async def metadata_route(request: Request) -> JSONResponse:
    """The metadata of the app's /mcp: the app keeps its `ProtectedResource` (made from its settings)."""
    resource: ProtectedResource = request.app.state.resource
    return await resource.route(request)


# The operations this module serves (gateway/http/operation.py).
OPERATIONS = (
    Operation(
        METADATA_PATH,
        "get",
        metadata_route,
        "The OAuth 2.0 protected-resource metadata of /mcp (RFC 9728)",
        "operations",
        {
            "200": json_answer(
                "`resource` is the URL of /mcp, `authorization_servers` the JWT issuer (`GATEWAY_JWT_ISSUER`)",
                ref(ProtectedResourceMetadata),
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
                ref(Error),
                traced=False,
            ),
            "404": json_answer(
                "`not_found`: nothing is published: no `GATEWAY_JWT_ISSUER`, one that is not an http(s) URL, no JWT "
                "key, or no /mcp (one message for all of them; the service's log says which)",
                ref(Error),
                traced=False,
            ),
        },
        auth=None,
        description="Where an OAuth-capable MCP client finds the authorization server of the gateway's JWTs; every 401 of "
        "/mcp names this URL in its `WWW-Authenticate` (`resource_metadata`) when it is published. Public and "
        "holding no data, like /healthz: not audited.",
    ),
)
