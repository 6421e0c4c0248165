"""The gateway as a LlamaIndex retriever: `GatewayRetriever(BaseRetriever)`, the extra
`governed-gateway[llamaindex]`. Each packed item becomes a TextNode (its id the item's, its text the
item's text, its metadata `item_metadata`) in a NodeWithScore. The gateway ranks but publishes no
score, so `score` is None and the order is the gateway's. `similarity_top_k` (LlamaIndex's name
for the number of results) keeps the first that many (`gateway.adapters.shared.limit_for`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import anyio.to_thread

from gateway.adapters.shared import Closing, count, item_metadata, limit_for, missing_extra
from gateway.client import AsyncGatewayClient, GatewayClient, RetrieveResult

try:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
except ImportError as exc:  # the extra is not installed: say which one to install
    raise missing_extra("LlamaIndex (llama-index-core)", "llamaindex") from exc


class GatewayRetriever(Closing, BaseRetriever):
    """Retrieve for one task through `client` (`_retrieve`) or `async_client` (`_aretrieve`; without
    one, the sync client runs in a thread). `from_url` makes both. The task type must be granted to
    the key's actor by the policy; the other fields narrow what it allows, never widen it.

    `similarity_top_k` (None: all the gateway packs): the first that many nodes of the gateway's
    answer; an attribute, so it can be changed between calls (it is checked at each)."""

    def __init__(
        self,
        task: str | Mapping[str, Any],
        *,
        client: GatewayClient | None = None,
        async_client: AsyncGatewayClient | None = None,
        similarity_top_k: int | None = None,
        mode: str | None = None,
        depth: str | None = None,
        budget_bytes: int | None = None,
        kinds: Sequence[str] | None = None,
        sources: Mapping[str, bool] | None = None,
        entities: Sequence[Mapping[str, str]] | None = None,
        **options: Any,
    ) -> None:
        if client is None and async_client is None:
            raise ValueError("client: give a GatewayClient or an AsyncGatewayClient (or use from_url)")
        self.similarity_top_k = count(similarity_top_k, "similarity_top_k")
        super().__init__(**options)
        self.client, self.async_client, self.task = client, async_client, task
        self.arguments: dict[str, Any] = {
            "mode": mode,
            "depth": depth,
            "budget_bytes": budget_bytes,
            "kinds": kinds,
            "sources": sources,
            "entities": entities,
        }

    @classmethod
    def from_url(cls, base_url: str, token: str, task: str | Mapping[str, Any], **fields: Any) -> GatewayRetriever:
        """A retriever with its own clients (sync and async) for `base_url` and `token`."""
        return cls(task, client=GatewayClient(base_url, token), async_client=AsyncGatewayClient(base_url, token), **fields)

    def _top_k(self) -> int | None:
        return count(self.similarity_top_k, "similarity_top_k")

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.client is None:
            raise ValueError("client: this retriever has only an async client; call aretrieve")
        top_k = self._top_k()
        return nodes(self.client.retrieve(self.task, query_bundle.query_str, limit=limit_for(top_k), **self.arguments), top_k)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self.async_client is None:
            return await anyio.to_thread.run_sync(self._retrieve, query_bundle)
        top_k = self._top_k()
        return nodes(
            await self.async_client.retrieve(self.task, query_bundle.query_str, limit=limit_for(top_k), **self.arguments), top_k
        )


def nodes(result: RetrieveResult, top_k: int | None = None) -> list[NodeWithScore]:
    """The answer's items as nodes, the first `top_k` of them (all with None)."""
    return [
        NodeWithScore(node=TextNode(id_=item.id, text=item.text or "", metadata=item_metadata(item, result.trace_id)), score=None)
        for item in result.items[:top_k]
    ]
