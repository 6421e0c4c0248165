"""The gateway's answers as typed, frozen values: the contract's own models (the package `api`),
under the names the client has always given them. Each keeps the fields the contract adds later
(`model_extra`) instead of refusing them: the contract grows by adding fields."""

from __future__ import annotations

from pydantic import BaseModel

from api.audit import BrokenLink as BrokenLink
from api.audit import ChainReport as ChainReport
from api.audit import FeedbackRef as Feedback
from api.audit import FeedbackResult as FeedbackReport
from api.audit import Trace as Trace
from api.audit import TraceList as TracePage
from api.audit import TraceSummary as TraceSummary
from api.audit import UsageResult as UsageReport
from api.audit import VerifyReport as VerifyReport
from api.retrieve import Answer as Synthesis
from api.retrieve import BudgetReport as Budget
from api.retrieve import Decision as Decision
from api.retrieve import Depth as Depth
from api.retrieve import ItemSource as Source
from api.retrieve import ResolvedEntity as Entity
from api.retrieve import RetrievedItem as Item
from api.retrieve import RetrieveResponse as RetrieveResult
from api.retrieve import Share as Share
from api.retrieve import SourceStatus as SourceStatus
from api.retrieve import Task as Task
from api.wire import Wire as Answer
from api.writes import DocumentReport as DocumentReport
from api.writes import IngestReport as IngestReport
from api.writes import MergeResult as MergeResult
from api.writes import Rejection as Rejection
from api.writes import TombstoneResult as DeletionResult

# The client's names for the contract's models, for the messages that name a model.
CLIENT_NAMES = {
    model: name
    for name, model in list(globals().items())
    if isinstance(model, type) and issubclass(model, BaseModel) and name != "Answer" and model.__name__ != name
}


def name_of(model: type[BaseModel]) -> str:
    """The client's name for `model` (`RetrieveResult` for the contract's `RetrieveResponse`)."""
    return CLIENT_NAMES.get(model, model.__name__)


__all__ = [
    "Answer",
    "BrokenLink",
    "Budget",
    "ChainReport",
    "Decision",
    "DeletionResult",
    "Depth",
    "DocumentReport",
    "Entity",
    "Feedback",
    "FeedbackReport",
    "IngestReport",
    "Item",
    "MergeResult",
    "Rejection",
    "RetrieveResult",
    "Share",
    "Source",
    "SourceStatus",
    "Synthesis",
    "Task",
    "Trace",
    "TracePage",
    "TraceSummary",
    "UsageReport",
    "VerifyReport",
    "name_of",
]
