"""The policy's routes: what is loaded (GET /v1/policy), a reload, the impact of a candidate policy
on recorded traffic, and the explanation of a decision."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from api.retrieve import RetrieveRequest
from api.service import Error
from api.wire import Strict, Wire


class PolicyInfo(Wire):
    OPTIONAL = frozenset({"source"})
    engine: str
    revision: str
    label: str
    loaded_at: str = Field(json_schema_extra={"format": "date-time"})
    source: str = Field(default="", description="where the policies are read from: for the policy_admin role only")
    last_reload: dict[str, Any] | None = None


class ReloadResult(Wire):
    trigger: str
    status: Literal["switched", "unchanged", "rejected"]
    revision: str
    previous: str
    candidate: str | None = None
    errors: list[str] = Field(default_factory=list)
    ms: float


class PolicyReload(Wire):
    reload: ReloadResult


class PolicyRejected(Error):
    """A reload refused (422): the error, and the reload that was tried."""

    reload: ReloadResult


class InlinePolicy(Strict):
    """A candidate policy, inline."""

    modules: dict[str, str] = Field(description="Path (ending in .rego) -> Rego source")
    data: dict[str, Any] = Field(default_factory=dict)


class ImpactRequest(Strict):
    policies: InlinePolicy
    since: str | None = Field(default=None, description="Replay calls made at or after this instant (RFC 3339)")
    limit: int = Field(default=1000, ge=1, le=10_000, description="The newest calls replayed, at most")
    tenant: str | None = Field(default=None, description="The caller's own tenant, if given; any other is a 403")


class ImpactWindow(Wire):
    tenant: str | None = None
    since: str | None = None
    limit: int
    first_call: str | None = None
    last_call: str | None = None


class Unreplayable(Wire):
    count: int = Field(ge=0)
    by_reason: dict[str, int] = Field(default_factory=dict)


class Failed(Wire):
    count: int = Field(ge=0)
    traces: list[str] = Field(default_factory=list)


class Flip(Wire):
    task_type: str
    role: str
    count: int = Field(ge=0)
    traces: list[str] = Field(default_factory=list)


class ItemChanges(Wire):
    count: int = Field(ge=0)
    by_sensitivity: dict[str, int] = Field(default_factory=dict)
    by_reason: dict[str, int] = Field(default_factory=dict)
    by_kind: dict[str, int] = Field(default_factory=dict)


class ImpactReport(Wire):
    current_revision: str
    candidate_revision: str
    window: ImpactWindow
    calls: int = Field(ge=0)
    replayed: int = Field(ge=0)
    unreplayable: Unreplayable
    assumed: dict[str, int] = Field(
        description="Replays of older rows: `actor_from_key` (attributes of the actor's live key), `graph_defaults`"
    )
    failed: dict[str, Failed] = Field(
        description="Calls on which the `current` or `candidate` policy failed (they would answer 503)"
    )
    recorded_differs: int = Field(ge=0, description="Calls the policy in force decides otherwise now than when they were made")
    flips: dict[str, list[Flip]] = Field(
        description="`allow_to_deny` and `deny_to_allow`, grouped by task type and the actor's roles"
    )
    items: dict[str, ItemChanges] = Field(description="`newly_allowed` and `newly_denied`: distinct items, counted")
    summary: str = Field(description="The report for people")


class HypotheticalActor(Strict):
    """A hypothetical actor of the caller's tenant."""

    id: str
    tenant: str = Field(description="The caller's own tenant; any other is a 403")
    roles: list[str] = Field(default_factory=list)
    groups: list[str] = Field(default_factory=list)
    clearance: str


class ExplainRequest(Strict):
    actor: HypotheticalActor
    request: RetrieveRequest = Field(description="The retrieve body to explain")
    items: list[str] = Field(default_factory=list, max_length=50, description="Item ids to explain (envelopes only)")
    policies: InlinePolicy | None = Field(default=None, description="A candidate policy, explained beside the one in force")


class ExplainedDecision(Wire):
    allow: bool
    reasons: list[str] = Field(default_factory=list)
    constraints: dict[str, Any] | None = None


class DeniedBy(Wire):
    rule: str
    reason: str
    meaning: str


class PolicyVerdict(Wire):
    allowed: bool
    reason: str | None = None
    denied_by: list[DeniedBy] = Field(default_factory=list)


class ExcludedBy(Wire):
    constraint: str
    meaning: str


class PushdownVerdict(Wire):
    admits: bool
    excluded_by: list[ExcludedBy] = Field(default_factory=list)


class ExplainedItem(Wire):
    id: str
    status: Literal["allowed", "denied", "excluded", "request_denied", "not_found"]
    envelope: dict[str, Any] | None = None
    policy: PolicyVerdict | None = None
    pushdown: PushdownVerdict | None = None


class Explanation(Wire):
    engine: str
    revision: str
    decision: ExplainedDecision
    subjects: list[str] = Field(default_factory=list, description="The entities the request is about, as resolved and verified")
    failures_document: bool = Field(description="`denied_by` is read from data.gateway.items.failures (else from `denied`)")
    items: list[ExplainedItem] = Field(default_factory=list)


class ItemDifference(Wire):
    id: str
    in_force: str | None = None
    candidate: str


class Differences(Wire):
    decision: bool
    items: list[ItemDifference] = Field(default_factory=list)


class ExplainReport(Wire):
    OPTIONAL = frozenset({"candidate", "differences"})
    in_force: Explanation
    candidate: Explanation | None = None
    differences: Differences | None = None
