"""Authenticate: the actor comes from the credential (API key or signed JWT), never the body."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Any

import jwt
from sqlalchemy import bindparam, delete, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Session

from core.actor import Actor
from core.audit_tables import AuditSession
from core.errors import BadRequest, NotFound, StoreUnavailable, Unauthenticated
from core.instants import rfc3339, utc_now
from core.store import writer
from core.tables import SENSITIVITIES, ApiKey
from core.validation import (
    PRINCIPAL_ID_RULE,
    RESERVED_TENANTS,
    check_principal,
    check_tenant,
    principal_id_problem,
    tenant_problem,
)
from gateway.settings import AuthSettings

KEY_PATTERN = re.compile(r"^gw_([0-9a-f]{16})_([A-Za-z0-9_-]{20,100})$")
KEY_ID = re.compile(r"[0-9a-f]{16}", re.ASCII)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.@:-]{1,200}$")
ROLES = ("agent", "ingest", "auditor", "policy_admin", "key_admin")
ROLE_LIKE = re.compile(r"[a-z][a-z_]{0,19}", re.ASCII)
NO_SUCH_KEY = "key_id: no such key in this tenant"
key_table = ApiKey.__table__  # type: ignore[attr-defined]
session_table = AuditSession.__table__  # type: ignore[attr-defined]
KEY_BY_ID = select(key_table).where(key_table.c.key_id == bindparam("key_id"))


def _hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def _names(field: str, values: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        if not NAME_PATTERN.fullmatch(value):
            raise BadRequest(f"{field}: each name is 1 to 200 letters, digits and _.@:- only")
    return tuple(values)


def create_api_key(
    engine: Engine,
    *,
    tenant: str,
    principal: str,
    roles: list[str],
    groups: list[str],
    clearance: str,
) -> str:
    """Store a new key's hash and return the key; it is shown once and never stored in clear."""
    check_principal(principal)
    check_tenant(tenant)
    _names("groups", groups)
    unknown = [r for r in roles if r not in ROLES]
    if unknown:  # a plausible role name (a typo) is named back; anything else is not echoed
        named = f" {unknown[0]!r}" if ROLE_LIKE.fullmatch(unknown[0]) else ""
        raise BadRequest(f"roles: unknown role{named}; known roles are {', '.join(ROLES)}")
    if clearance not in SENSITIVITIES:
        raise BadRequest(f"clearance: expected one of {', '.join(SENSITIVITIES)}")
    key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    row = ApiKey(
        key_id=key_id,
        secret_hash=_hash_secret(secret),
        tenant=tenant,
        principal=principal,
        roles=list(roles),
        groups=list(groups),
        clearance=clearance,
        created_at=utc_now(),
    )
    with Session(writer(engine)) as session:
        session.add(row)
        session.commit()
    return f"gw_{key_id}_{secret}"


def key_listing(row: Any) -> dict[str, Any]:
    """What may be shown of a key: never its secret or the secret's hash."""
    return {
        "id": row.key_id,
        "tenant": row.tenant,
        "principal": row.principal,
        "roles": list(row.roles),
        "groups": list(row.groups),
        "clearance": row.clearance,
        "created_at": rfc3339(row.created_at),
        "revoked_at": rfc3339(row.revoked_at),
    }


def list_api_keys(engine: Engine, tenant: str | None = None, key_id: str | None = None) -> list[dict[str, Any]]:
    """The keys of `tenant` (of every tenant when None), revoked ones too, oldest first; only the key
    `key_id` when given."""
    query = select(ApiKey).order_by(key_table.c.created_at, key_table.c.key_id)
    if tenant is not None:
        query = query.where(key_table.c.tenant == tenant)
    if key_id is not None:
        query = query.where(key_table.c.key_id == key_id)
    with Session(engine) as session:
        return [key_listing(row) for row in session.scalars(query)]


def revoke_api_key(engine: Engine, key_id: str, tenant: str | None = None) -> dict[str, Any]:
    """Revoke a key of `tenant` (of any tenant when None) and end its audit-page sessions, in one
    transaction. Another tenant's key is the same NotFound as an unknown one; revoking a revoked key
    changes nothing and keeps its first revocation time."""
    if not KEY_ID.fullmatch(key_id):
        raise BadRequest("key_id: expected the 16 hex digits after gw_ in the key")
    the_key = key_table.c.key_id == key_id
    with writer(engine).begin() as conn:
        row = conn.execute(select(key_table.c.tenant).where(the_key)).first()
        if row is None or (tenant is not None and row.tenant != tenant):
            raise NotFound(NO_SUCH_KEY)
        changed = (
            conn.execute(update(key_table).where(the_key, key_table.c.revoked_at.is_(None)).values(revoked_at=utc_now())).rowcount
            == 1
        )
        ended = conn.execute(delete(session_table).where(session_table.c.key_id == key_id)).rowcount
        revoked = conn.execute(select(key_table).where(the_key)).one()
    return {**key_listing(revoked), "changed": changed, "sessions_ended": ended}


class Authenticator:
    """Turns an Authorization header into an Actor, or raises Unauthenticated."""

    def __init__(self, engine: Engine, settings: AuthSettings) -> None:
        self.engine = engine
        self.settings = settings

    def authenticate(self, authorization: str | None) -> Actor:
        if not authorization:
            raise Unauthenticated("Authorization header missing: send 'Authorization: Bearer <token>'")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("Authorization header must be 'Bearer <token>'")
        token = token.strip()
        if token.startswith("gw_"):
            return self._from_api_key(token)
        if token.count(".") == 2:
            return self._from_jwt(token)
        raise Unauthenticated("bearer token is neither an API key nor a JWT")

    def _from_api_key(self, token: str) -> Actor:
        match = KEY_PATTERN.match(token)
        if not match:
            raise Unauthenticated("API key is malformed")
        key_id, secret = match.groups()
        row = self._live_key(key_id)
        if not hmac.compare_digest(row.secret_hash, _hash_secret(secret)):
            raise Unauthenticated("API key is not valid")
        return _actor_from_key(row)

    def actor_for_key_id(self, key_id: str) -> Actor:
        """The actor of a stored key by its id alone, read afresh: a session opened with the whole key
        (the audit page) asks on every request, so revoking the key ends the session at once."""
        return _actor_from_key(self._live_key(key_id))

    def _live_key(self, key_id: str) -> Any:
        """The key's row (read with Core: every call asks, and the ORM's identity map cost more than the query)."""
        try:
            with self.engine.connect() as conn:
                row = conn.execute(KEY_BY_ID, {"key_id": key_id}).first()
        except SQLAlchemyError as exc:
            raise StoreUnavailable("credential store unreachable") from exc
        if row is None or row.revoked_at is not None or row.tenant in RESERVED_TENANTS:
            raise Unauthenticated("API key is not valid")
        return row

    def _from_jwt(self, token: str) -> Actor:
        settings = self.settings
        if not settings.jwt_enabled:
            raise Unauthenticated("JWT bearer tokens are not enabled on this gateway")
        key, algorithm = (settings.jwt_public_key, "RS256") if settings.jwt_public_key else (settings.jwt_secret or "", "HS256")
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=settings.jwt_audience,
                issuer=settings.jwt_issuer,
                options={"require": ["exp", "sub"], "verify_aud": settings.jwt_audience is not None},
            )
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"JWT rejected: {type(exc).__name__}") from exc
        return _actor_from_claims(claims)


def _actor_from_key(row: Any) -> Actor:
    return Actor(
        id=row.principal.removeprefix("user:"),
        tenant=row.tenant,
        roles=tuple(row.roles),
        groups=tuple(row.groups),
        clearance=row.clearance,
    )


def _actor_from_claims(claims: dict[str, Any]) -> Actor:
    def strings(name: str) -> tuple[str, ...]:
        value = claims.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise Unauthenticated(f"JWT claim {name!r} must be a list of strings")
        return tuple(value)

    subject, tenant, clearance = claims.get("sub"), claims.get("tenant"), claims.get("clearance", "public")
    if not isinstance(subject, str) or principal_id_problem(subject):
        raise Unauthenticated(f"JWT claim 'sub' must be a user id: {PRINCIPAL_ID_RULE}")
    if tenant is None:
        raise Unauthenticated("JWT claim 'tenant' is required")
    problem = tenant_problem(tenant)
    if not isinstance(tenant, str) or problem:
        raise Unauthenticated(f"JWT claim 'tenant': {problem}")
    if clearance not in SENSITIVITIES:
        raise Unauthenticated("JWT claim 'clearance' must be a sensitivity level")
    return Actor(id=subject, tenant=tenant, roles=strings("roles"), groups=strings("groups"), clearance=clearance)
