"""The LangChain and LlamaIndex retrievers against a live gateway: the framework's documents, with
the item's metadata and the call's trace id, on the sync and the async path; never a forbidden item."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from gateway.client import AsyncGatewayClient, Forbidden, GatewayClient
from tests.conftest import LiveGateway, serve_gateway
from tests.gateway.fixtures import SALES_TASK, memory, seed

SOURCED = memory(
    "mem_sourced",
    "okapi renewal terms agreed",
    authority="approved",
    sensitivity="confidential",
    valid_from="2025-01-01T00:00:00Z",
    valid_to="2031-01-01T00:00:00Z",
    source={"system": "crm", "uri": "crm://calls/42"},
)
HIDDEN = memory("mem_okapi_finance", "okapi finance margin", acl=["group:finance"])
NO_VECTORS = {"semantic": False}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveGateway]:
    directory = tmp_path_factory.mktemp("adapters")
    with serve_gateway(f"sqlite:///{directory / 'gateway.db'}", directory) as served:
        seed(served.gateway)
        served.gateway.ingest("acme", [SOURCED, HIDDEN])
        yield served


@pytest.fixture(scope="module")
def key(live: LiveGateway) -> str:
    return live.gateway.key("alice", groups=("sales",), clearance="confidential")


def assert_metadata(metadata: dict[str, Any], live: LiveGateway) -> None:
    assert {k: metadata[k] for k in ("id", "citation", "kind", "authority", "status", "sensitivity", "source")} == {
        "id": "mem_sourced",
        "citation": "M1",
        "kind": "memory",
        "authority": "approved",
        "status": "current",
        "sensitivity": "confidential",
        "source": "crm://calls/42",
    }
    assert (metadata["source_system"], metadata["source_uri"]) == ("crm", "crm://calls/42")
    assert metadata["valid_from"].startswith("2025-01-01") and metadata["valid_to"].startswith("2031-01-01")
    row = live.gateway.trace(metadata["trace_id"])  # the trace id names this very call's audit row
    assert (row["endpoint"], row["status_code"], row["actor"]) == ("retrieve", 200, "user:alice")


def test_langchain_documents_carry_the_items_metadata_and_trace(live: LiveGateway, key: str) -> None:
    from langchain_core.documents import Document

    from gateway.adapters.langchain import GatewayRetriever

    retriever = GatewayRetriever.from_url(live.url, key, task=SALES_TASK, sources=NO_VECTORS, budget_bytes=4000)
    assert key not in repr(retriever) and key not in str(retriever.model_dump())
    documents = retriever.invoke("okapi")
    assert [d.page_content for d in documents] == ["okapi renewal terms agreed"]  # never the finance-only note
    document = documents[0]
    assert isinstance(document, Document) and document.id == "mem_sourced"
    assert_metadata(document.metadata, live)

    async def in_a_loop() -> list[Document]:
        try:
            return await retriever.ainvoke("okapi")
        finally:
            await retriever.aclose()  # its async client, on the loop that used it

    async_documents = anyio.run(in_a_loop)
    assert [d.id for d in async_documents] == ["mem_sourced"]
    assert async_documents[0].metadata["trace_id"] != document.metadata["trace_id"]  # its own call, its own trace
    assert_metadata(async_documents[0].metadata, live)


def test_langchain_sync_client_alone_serves_the_async_path_and_errors_are_typed(live: LiveGateway, key: str) -> None:
    from gateway.adapters.langchain import GatewayRetriever

    with GatewayClient(live.url, key) as client:
        retriever = GatewayRetriever(client=client, task=SALES_TASK, sources=NO_VECTORS)
        assert [d.id for d in anyio.run(retriever.ainvoke, "okapi")] == ["mem_sourced"]
        denied = GatewayRetriever(client=client, task={"type": "payroll_review"})
        with pytest.raises(Forbidden) as refused:
            denied.invoke("okapi")
    assert refused.value.code == "policy_denied" and refused.value.trace_id


def test_llamaindex_nodes_carry_the_items_metadata_and_trace(live: LiveGateway, key: str) -> None:
    from llama_index.core.schema import NodeWithScore, TextNode

    from gateway.adapters.llamaindex import GatewayRetriever

    retriever = GatewayRetriever.from_url(live.url, key, SALES_TASK, sources=NO_VECTORS)
    found = retriever.retrieve("okapi")
    assert len(found) == 1 and isinstance(found[0], NodeWithScore) and found[0].score is None
    node = found[0].node
    assert isinstance(node, TextNode) and node.node_id == "mem_sourced" and node.text == "okapi renewal terms agreed"
    assert_metadata(node.metadata, live)

    async def in_a_loop() -> list[NodeWithScore]:
        try:
            return await retriever.aretrieve("okapi")
        finally:
            await retriever.aclose()

    async_found = anyio.run(in_a_loop)
    assert [n.node.node_id for n in async_found] == ["mem_sourced"]
    assert_metadata(async_found[0].node.metadata, live)


def test_llamaindex_with_one_client_of_either_kind(live: LiveGateway, key: str) -> None:
    from gateway.adapters.llamaindex import GatewayRetriever

    with GatewayClient(live.url, key) as client:
        only_sync = GatewayRetriever(SALES_TASK, client=client, sources=NO_VECTORS)
        assert [n.node.node_id for n in anyio.run(only_sync.aretrieve, "okapi")] == ["mem_sourced"]

    async def only_async() -> list[str]:
        async with AsyncGatewayClient(live.url, key) as client:
            retriever = GatewayRetriever(SALES_TASK, async_client=client, sources=NO_VECTORS)
            return [n.node.node_id for n in await retriever.aretrieve("okapi")]

    assert anyio.run(only_async) == ["mem_sourced"]
    with pytest.raises(ValueError, match="client"):
        GatewayRetriever(SALES_TASK)


@pytest.mark.parametrize(
    ("module", "framework", "extra"),
    [
        ("gateway.adapters.langchain", "langchain_core", "governed-gateway[langchain]"),
        ("gateway.adapters.llamaindex", "llama_index", "governed-gateway[llamaindex]"),
    ],
)
def test_a_missing_extra_names_what_to_install(monkeypatch: pytest.MonkeyPatch, module: str, framework: str, extra: str) -> None:
    for name in [n for n in sys.modules if n == framework or n.startswith(framework + ".")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if it were not installed
    monkeypatch.setitem(sys.modules, framework, None)
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError, match=extra.replace("[", r"\[").replace("]", r"\]")):
        importlib.import_module(module)
