"""The compliance overview's answers, typed: the figures of a period (audit.review.overview.figures_of) and the
chain's state, each part a frozen answer. The contract's OverviewReport (api.audit) holds them as
objects; `Overview.report` is that answer, and the overview page and the evidence pack read the
typed figures themselves."""

from __future__ import annotations

from dataclasses import dataclass

from api.audit import Adoption, OverviewReport
from api.wire import Wire


class Period(Wire):
    since: str
    until: str
    bucket_hours: int


class Calls(Wire):
    """Retrieval calls by outcome (core.audit_facts.OUTCOMES)."""

    total: int
    by_outcome: dict[str, int]


class Bar(Wire):
    """One bar of the timeline: its span and its calls by outcome."""

    start: str
    end: str
    by_outcome: dict[str, int]


class ReasonCalls(Wire):
    reason: str
    calls: int


class TaskCalls(Wire):
    task: str
    calls: int


class Denials(Wire):
    total: int
    by_reason: list[ReasonCalls]
    by_task: list[TaskCalls]


class ActorItems(Wire):
    actor: str
    items: int


class Returned(Wire):
    """Items returned: how many, by sensitivity, and who read the restricted ones (the top ten)."""

    items: int
    by_sensitivity: dict[str, int]
    restricted_by_actor: list[ActorItems]


class TypeCalls(Wire):
    type: str
    calls: int


class ActorCalls(Wire):
    actor: str
    calls: int


class Masking(Wire):
    items_masked: int
    placeholders: int
    placeholders_by_type: dict[str, int]
    reveals_by_type: list[TypeCalls]
    reveals_by_actor: list[ActorCalls]


class Before(Wire):
    """The revision in force before another, and its denial rate."""

    revision: str | None
    denial_rate: float | None


class Revision(Wire):
    """A policy revision in force in the period: when first seen, its calls and denials."""

    revision: str | None
    first_seen: str
    calls: int
    denied: int
    denial_rate: float | None
    before: Before | None


class Figures(Wire):
    """The overview's figures of one period: counts only, never item text."""

    period: Period
    calls: Calls
    timeline: list[Bar]
    denials: Denials
    returned: Returned
    masking: Masking
    revisions: list[Revision]
    endpoints: dict[str, int]


class LastCheck(Wire):
    """The last full check of the chain recorded in the trail (a verify call's own row)."""

    trace_id: str
    at: str
    by: str | None
    intact: bool


class ChainState(Wire):
    """The chain at a glance: its rows, its head, its last check; with a signer, what the signer
    knows of it (audit.integrity.Checkpointer.state) and the rows not yet checkpointed (fields a
    gateway that signs nothing leaves out)."""

    rows: int
    head: int
    last_check: LastCheck | None
    signed: bool
    signed_size: int | None = None
    signed_at: str | None = None
    witness: bool | None = None
    cosigned_size: int | None = None
    witness_refused: str | None = None
    refusing: str | None = None
    adopted: Adoption | None = None
    not_yet_checkpointed: int | None = None


@dataclass(frozen=True, slots=True)
class Overview:
    """The overview of a period: its figures and the chain's state."""

    figures: Figures
    chain: ChainState

    def report(self) -> OverviewReport:
        """The answer of GET /v1/audit/overview (api.audit.OverviewReport), whose parts the contract
        leaves as open objects: each is the typed part as it goes on the wire."""
        f = self.figures
        return OverviewReport(
            period=f.period.wire(),
            calls=f.calls.wire(),
            timeline=[bar.wire() for bar in f.timeline],
            denials=f.denials.wire(),
            returned=f.returned.wire(),
            masking=f.masking.wire(),
            revisions=[r.wire() for r in f.revisions],
            endpoints=f.endpoints,
            chain=self.chain.wire(),
        )
