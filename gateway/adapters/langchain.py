"""The gateway as a LangChain retriever: `GatewayRetriever(BaseRetriever)`, the extra
`governed-gateway[langchain]`. Each packed item becomes a Document whose page_content is the item's
text and whose metadata says what it is and which call found it (`item_metadata`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ConfigDict, field_validator

from gateway.adapters.shared import Closing, count, item_metadata, limit_for, missing_extra
from gateway.client import AsyncGatewayClient, GatewayClient, RetrieveResult

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables.config import run_in_executor
except ImportError as exc:  # the extra is not installed: say which one to install
    raise missing_extra("LangChain (langchain-core)", "langchain") from exc


class GatewayRetriever(Closing, BaseRetriever):
    """Retrieve for one task. `client` serves the sync path and `async_client` the async one; with
    only `client`, the async path runs it in a thread (LangChain's default). `from_url` makes both.

    The task type must be granted to the key's actor by the policy; the other fields narrow what the
    policy allows, never widen it (the gateway's rule). Documents come in the gateway's order.

    `k` (LangChain's name for the number of documents; None: all the gateway packs) is a field and
    an argument of each call (`invoke(query, k=1)`, which wins over the field): the first `k`
    documents of the gateway's answer (`gateway.adapters.shared.limit_for` says what `limit` it asks)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: GatewayClient | None = None
    async_client: AsyncGatewayClient | None = None
    task: str | Mapping[str, Any]
    k: int | None = None
    mode: str | None = None
    depth: str | None = None
    budget_bytes: int | None = None
    kinds: Sequence[str] | None = None
    sources: Mapping[str, bool] | None = None
    entities: Sequence[Mapping[str, str]] | None = None

    @field_validator("k", mode="before")
    @classmethod
    def k_is_a_count(cls, value: object) -> int | None:
        return count(value, "k")

    @classmethod
    def from_url(cls, base_url: str, token: str, task: str | Mapping[str, Any], **fields: Any) -> GatewayRetriever:
        """A retriever with its own clients (sync and async) for `base_url` and `token`."""
        return cls(client=GatewayClient(base_url, token), async_client=AsyncGatewayClient(base_url, token), task=task, **fields)

    def _k(self, k: object, others: Mapping[str, Any]) -> int | None:
        """The call's `k` (else the field's). Besides `k`, invoke passes on only LangChain's `verbose`."""
        unknown = sorted(set(others) - {"verbose"})
        if unknown:
            raise TypeError(f"GatewayRetriever: invoke and ainvoke take k, not {unknown}")
        return count(k, "k") if k is not None else count(self.k, "k")

    def _arguments(self, k: int | None) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "depth": self.depth,
            "budget_bytes": self.budget_bytes,
            "limit": limit_for(k),
            "kinds": self.kinds,
            "sources": self.sources,
            "entities": self.entities,
        }

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None, **others: Any
    ) -> list[Document]:
        wanted = self._k(k, others)
        if self.client is None:
            raise ValueError("client: this retriever was built without a GatewayClient (give one, or use from_url)")
        return documents(self.client.retrieve(self.task, query, **self._arguments(wanted)), wanted)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None, **others: Any
    ) -> list[Document]:
        wanted = self._k(k, others)
        if self.async_client is None:  # the sync client in a thread, as BaseRetriever's own default does
            sync = run_manager.get_sync()
            return await run_in_executor(None, self._get_relevant_documents, query, run_manager=sync, k=wanted)
        return documents(await self.async_client.retrieve(self.task, query, **self._arguments(wanted)), wanted)


def documents(result: RetrieveResult, k: int | None = None) -> list[Document]:
    """The answer's items as Documents, the first `k` of them (all with None)."""
    return [
        Document(page_content=item.text or "", metadata=item_metadata(item, result.trace_id), id=item.id)
        for item in result.items[:k]
    ]
