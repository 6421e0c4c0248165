"""Retriever adapters over the typed client: LangChain's and LlamaIndex's BaseRetriever. Each is an
optional extra (`pip install governed-gateway[langchain]`, `[llamaindex]`); this package imports
neither framework, only the module of the one you use does.

Both turn an item into the framework's document the same way: its text, and metadata that a chain
or an agent can cite and weigh (`item_metadata`)."""

from __future__ import annotations

from typing import Any

from gateway.client import AsyncGatewayClient, GatewayClient
from gateway.client.models import Item


class Closing:
    """What both retrievers do with the clients they hold (`client`, `async_client`)."""

    client: GatewayClient | None
    async_client: AsyncGatewayClient | None

    def close(self) -> None:
        """Close the sync client (one of `from_url`'s, or your own)."""
        if self.client is not None:
            self.client.close()

    async def aclose(self) -> None:
        """Close both clients; the async one on the event loop that used it."""
        self.close()
        if self.async_client is not None:
            await self.async_client.aclose()


def item_metadata(item: Item, trace_id: str) -> dict[str, Any]:
    """The metadata of one item: flat values only, so any vector store or serialiser takes them.
    `source` is the item's URI (else its system), as LangChain's loaders name a document's origin;
    `trace_id` names the call's audit trace, for a usage or feedback report."""
    metadata: dict[str, Any] = {
        "id": item.id,
        "citation": item.citation,
        "kind": item.kind,
        "authority": item.authority,
        "status": item.status,
        "sensitivity": item.sensitivity,
        "source": item.source.uri or item.source.system,
        "source_system": item.source.system,
        "source_uri": item.source.uri,
        "trace_id": trace_id,
    }
    optional = {
        "entity": item.entity,
        "section": item.section,
        "document": item.document,
        "valid_from": item.valid_from.isoformat() if item.valid_from else None,
        "valid_to": item.valid_to.isoformat() if item.valid_to else None,
    }
    metadata.update({name: value for name, value in optional.items() if value is not None})
    return metadata


def missing_extra(framework: str, extra: str) -> ImportError:
    return ImportError(f"gateway.adapters.{extra} needs {framework}: pip install 'governed-gateway[{extra}]'")
