"""The LangChain and LlamaIndex retrievers against a live gateway: the framework's documents, with
the item's metadata and the call's trace id, on the sync and the async path; never a forbidden item.
The number of results (LangChain's `k`, LlamaIndex's `similarity_top_k`) cuts the answer to its first
k items and never lowers the gateway's `limit`; it only narrows. LangChain's own standard suite is tests/client/test_langchain_standard.py."""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
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
# Four notes alice may read that match "kestrel", and one she may not (finance only).
KESTRELS = [memory(f"mem_kestrel_{n}", f"kestrel account note {n}") for n in range(4)]
KESTREL_HIDDEN = memory("mem_kestrel_finance", "kestrel finance margin", acl=["group:finance"])
KESTREL_IDS = [k["id"] for k in KESTRELS]
BAD_COUNTS = [0, -1, 201, True, 2.5, "3"]
WALRUSES = [memory(f"mem_walrus_{n}", f"walrus pricing note {n}") for n in range(6)]  # the manual's example asks for 4
AGENTS = (Path(__file__).resolve().parents[2] / "docs" / "agents.md").read_text()  # the manual's page


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveGateway]:
    directory = tmp_path_factory.mktemp("adapters")
    with serve_gateway(f"sqlite:///{directory / 'gateway.db'}", directory) as served:
        seed(served.gateway)
        served.gateway.ingest("acme", [SOURCED, HIDDEN, *KESTRELS, KESTREL_HIDDEN, *WALRUSES])
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


class Recorded:
    """The `limit` of each retrieve a client sent (None when the body had none: the gateway's own)."""

    def __init__(self) -> None:
        self.limits: list[int | None] = []

    def hook(self, request: httpx.Request) -> None:
        self.limits.append(json.loads(request.content).get("limit"))

    async def ahook(self, request: httpx.Request) -> None:
        self.hook(request)


def test_langchain_k_in_the_constructor_and_per_call_keeps_the_first_k(live: LiveGateway, key: str) -> None:
    from gateway.adapters.langchain import GatewayRetriever

    sent = Recorded()
    with httpx.Client(event_hooks={"request": [sent.hook]}) as http, GatewayClient(live.url, key, http=http) as client:
        everything = GatewayRetriever(client=client, task=SALES_TASK)  # the gateway's own limit, semantic on too
        assert sorted(d.id or "" for d in everything.invoke("kestrel")) == KESTREL_IDS  # never the finance note
        two = GatewayRetriever(client=client, task=SALES_TASK, k=2)
        assert two.k == 2
        first_two = two.invoke("kestrel")
        assert len(first_two) == 2 and {d.id for d in first_two} <= set(KESTREL_IDS)
        assert [d.id for d in two.invoke("kestrel", k=1)] == [first_two[0].id]  # the call's k wins over the field
        assert len(everything.invoke("kestrel", k=3)) == 3
        assert len(everything.invoke("kestrel", k=200)) == 4  # k only narrows: still never the finance note
        assert len(two.invoke("kestrel", k=None)) == 2  # None: the field's
        # k never lowers the gateway's limit (50 candidates per source), so the ranking is the same:
        # the first k are the first k of the same call without k. Above 50 it raises it to k.
        ranked = [d.id for d in everything.invoke("kestrel")]
        assert [[d.id for d in everything.invoke("kestrel", k=n)] for n in (1, 2, 3)] == [ranked[:1], ranked[:2], ranked[:3]]
        assert sent.limits == [None, None, None, None, 200, None, None, None, None, None]
        # The sync client alone serves the async path, with the call's k.
        assert [d.id for d in anyio.run(lambda: everything.ainvoke("kestrel", k=1))] == ranked[:1]
        assert len(everything.invoke("kestrel", k=51)) == 4 and sent.limits[-2:] == [None, 51]

    async def on_the_async_client() -> list[int]:
        async with httpx.AsyncClient(event_hooks={"request": [sent.ahook]}) as http:
            retriever = GatewayRetriever(async_client=AsyncGatewayClient(live.url, key, http=http), task=SALES_TASK, k=3)
            return [len(await retriever.ainvoke("kestrel")), len(await retriever.ainvoke("kestrel", k=1))]

    assert anyio.run(on_the_async_client) == [3, 1]
    assert sent.limits[-2:] == [None, None]


@pytest.mark.parametrize("bad", BAD_COUNTS)
def test_langchain_a_bad_k_is_a_value_error_naming_k_before_any_call(live: LiveGateway, key: str, bad: Any) -> None:
    from gateway.adapters.langchain import GatewayRetriever

    with pytest.raises(ValueError, match=r"k: expected a whole number from 1 to 200"):
        GatewayRetriever(task=SALES_TASK, k=bad)
    sent = Recorded()
    with httpx.Client(event_hooks={"request": [sent.hook]}) as http, GatewayClient(live.url, key, http=http) as client:
        retriever = GatewayRetriever(client=client, task=SALES_TASK)
        with pytest.raises(
            ValueError, match=r"^k: expected a whole number from 1 to 200 \(the most the gateway's `limit` allows\)"
        ):
            retriever.invoke("kestrel", k=bad)
        with pytest.raises(ValueError, match=r"^k: "):
            anyio.run(lambda: retriever.ainvoke("kestrel", k=bad))
    assert sent.limits == []  # refused here, never a 422 (or a 500) from the gateway


def test_langchain_invoke_refuses_an_argument_it_does_not_take(live: LiveGateway, key: str) -> None:
    from gateway.adapters.langchain import GatewayRetriever

    with GatewayClient(live.url, key) as client:
        retriever = GatewayRetriever(client=client, task=SALES_TASK)
        with pytest.raises(TypeError, match=r"^GatewayRetriever: invoke and ainvoke take k, not \['top_k'\]$"):
            retriever.invoke("kestrel", top_k=1)
        with pytest.raises(TypeError, match=r"take k, not \['search_kwargs'\]$"):
            anyio.run(lambda: retriever.ainvoke("kestrel", search_kwargs={"k": 1}))
        assert len(retriever.invoke("kestrel", k=1, verbose=False)) == 1  # LangChain's own `verbose` passes


def test_llamaindex_similarity_top_k_keeps_the_first_nodes(live: LiveGateway, key: str) -> None:
    from gateway.adapters.llamaindex import GatewayRetriever

    sent = Recorded()
    with httpx.Client(event_hooks={"request": [sent.hook]}) as http, GatewayClient(live.url, key, http=http) as client:
        everything = GatewayRetriever(SALES_TASK, client=client)
        ranked = [n.node.node_id for n in everything.retrieve("kestrel")]
        assert sorted(ranked) == KESTREL_IDS
        two = GatewayRetriever(SALES_TASK, client=client, similarity_top_k=2)
        assert two.similarity_top_k == 2 and [n.node.node_id for n in two.retrieve("kestrel")] == ranked[:2]
        assert [n.node.node_id for n in anyio.run(two.aretrieve, "kestrel")] == ranked[:2]  # the sync client in a thread
        two.similarity_top_k = 1  # an attribute, as LlamaIndex's own retrievers have it
        assert [n.node.node_id for n in two.retrieve("kestrel")] == ranked[:1]
        widest = GatewayRetriever(SALES_TASK, client=client, similarity_top_k=200)
        assert len(widest.retrieve("kestrel")) == 4  # it only narrows: never the finance note
        assert sent.limits == [None, None, None, None, 200]  # the gateway's own limit, raised only above it

    async def on_the_async_client() -> list[str]:
        async with httpx.AsyncClient(event_hooks={"request": [sent.ahook]}) as http:
            retriever = GatewayRetriever(
                SALES_TASK, async_client=AsyncGatewayClient(live.url, key, http=http), similarity_top_k=3
            )
            return [n.node.node_id for n in await retriever.aretrieve("kestrel")]

    assert anyio.run(on_the_async_client) == ranked[:3]


@pytest.mark.parametrize("bad", BAD_COUNTS)
def test_llamaindex_a_bad_similarity_top_k_is_a_value_error_naming_it(live: LiveGateway, key: str, bad: Any) -> None:
    from gateway.adapters.llamaindex import GatewayRetriever

    with GatewayClient(live.url, key) as client:
        with pytest.raises(ValueError, match=r"^similarity_top_k: expected a whole number from 1 to 200"):
            GatewayRetriever(SALES_TASK, client=client, similarity_top_k=bad)
        retriever = GatewayRetriever(SALES_TASK, client=client)
        retriever.similarity_top_k = bad  # set later: checked at the call, before it is sent
        with pytest.raises(ValueError, match=r"^similarity_top_k: "):
            retriever.retrieve("kestrel")


def test_the_manuals_example_runs_against_a_live_gateway(live: LiveGateway, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    section = AGENTS.split("\n## LangChain and LlamaIndex\n", 1)[1].split("\n## ", 1)[0]
    example = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert example, "the LangChain and LlamaIndex section of docs/agents.md has no example"
    code = example.group(1)
    assert "http://127.0.0.1:8080" in code
    monkeypatch.setenv("GATEWAY_KEY", key)
    names: dict[str, Any] = {}
    exec(compile(code.replace("http://127.0.0.1:8080", live.url), "docs/agents.md", "exec"), names)
    walruses = {w["id"] for w in WALRUSES}
    assert len(names["documents"]) == 4 and {d.id for d in names["documents"]} <= walruses
    assert [d.id for d in names["best"]] == [names["documents"][0].id]
    assert len(names["nodes"]) == 4 and {n.node.node_id for n in names["nodes"]} <= walruses


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
