"""What both retrievers share (the package's `__init__` imports nothing, so neither retriever imports
its own package): an item as the framework's document's metadata (`item_metadata`), the number of
results checked (`count`) and the `limit` asked for it (`limit_for`), and closing the clients."""

from __future__ import annotations

import operator
from typing import Any, SupportsIndex

from api.retrieve import RetrieveRequest
from gateway.client import AsyncGatewayClient, GatewayClient
from gateway.client.models import Item


def _contract_limit() -> tuple[int, int]:
    """The contract's default and largest `limit` (api.retrieve), read from the model, not copied."""
    field = RetrieveRequest.model_fields["limit"]
    bounds = [le for c in field.metadata if isinstance(le := getattr(c, "le", None), int)]
    assert isinstance(field.default, int) and bounds, "the contract's `limit` has no default or no upper bound"
    return field.default, bounds[0]


# How many candidates each source proposes when a call does not say, and the most a call may ask.
DEFAULT_LIMIT, MAX_RESULTS = _contract_limit()


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


def count(value: object, name: str) -> int | None:
    """A number of results (`name`, the framework's word for it: `k`, `similarity_top_k`): None
    (all the gateway packs), else a whole number from 1 to MAX_RESULTS; anything else is a
    ValueError naming `name`, before any call is sent. The retrievers keep the first `value` items
    of the answer and ask with `limit_for(value)`."""
    if value is None:
        return None
    # An int (or numpy's: anything with __index__), never True or 3.0.
    number = operator.index(value) if isinstance(value, SupportsIndex) and not isinstance(value, bool) else None
    if number is None or not 1 <= number <= MAX_RESULTS:
        raise ValueError(
            f"{name}: expected a whole number from 1 to {MAX_RESULTS} (the most the gateway's `limit` allows), got {value!r}"
        )
    return number


def limit_for(k: int | None) -> int | None:
    """The request's `limit` for k results. `limit` bounds how many candidates each source
    proposes (not how many items are packed: two sources' first candidates are two items), and the
    gateway fuses and ranks them all, so a lower one would rank fewer: the first k of a call with
    limit=k need not be the first k of the same call without it. So k never lowers the gateway's
    own limit (None: its default); above it, it raises it to k so that k items can be found. Either
    way the policy decides what may be found and the budget what is packed: k only narrows."""
    return k if k is not None and k > DEFAULT_LIMIT else None


def missing_extra(framework: str, extra: str) -> ImportError:
    return ImportError(f"gateway.adapters.{extra} needs {framework}: pip install 'governed-gateway[{extra}]'")
