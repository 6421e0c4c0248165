"""Who is asking: the actor a credential names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Actor:
    id: str
    tenant: str
    roles: tuple[str, ...]
    groups: tuple[str, ...]
    clearance: str

    @property
    def principal(self) -> str:
        return f"user:{self.id}"

    def as_policy_input(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tenant": self.tenant,
            "roles": list(self.roles),
            "groups": list(self.groups),
            "clearance": self.clearance,
        }
