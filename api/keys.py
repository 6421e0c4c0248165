"""The API keys of a tenant (GET, POST /v1/keys, DELETE /v1/keys/{key_id})."""

from __future__ import annotations

from pydantic import Field

from api.wire import Instant, Strict, Wire


class NewKey(Strict):
    """POST /v1/keys: who the key speaks for; its tenant is the caller's."""

    principal: str = Field(max_length=300)
    roles: list[str] = Field(default_factory=lambda: ["agent"], max_length=10)
    groups: list[str] = Field(default_factory=list, max_length=100)
    clearance: str = Field(default="internal", max_length=50)


class KeyListing(Wire):
    """What may be shown of a key: never its secret or the secret's hash."""

    id: str = Field(pattern="^[0-9a-f]{16}$")
    tenant: str
    principal: str
    roles: list[str]
    groups: list[str]
    clearance: str
    created_at: Instant | None = None
    revoked_at: Instant | None = None


class KeyList(Wire):
    keys: list[KeyListing]


class CreatedKey(KeyListing):
    key: str = Field(description="The key itself, shown this once")


class RevokedKey(KeyListing):
    changed: bool
    sessions_ended: int = Field(ge=0)
