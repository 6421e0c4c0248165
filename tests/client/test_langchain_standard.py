"""LangChain's own standard retriever suite (`langchain-tests`, RetrieversIntegrationTests) against
GatewayRetriever over HTTP (`from_url`) on a live gateway: every retriever built here talks to a
real socket, the sync path through GatewayClient and the async one through AsyncGatewayClient.

The suite asks `invoke("okapi", k=1)` and `GatewayRetriever(k=3)` for exactly that many documents,
and the default for documents at all; the seeded notes give six matches (more than the largest k it
asks), on the default pipeline (lexical and semantic), and the gateway packs every match its budget
holds, so the cut to the first k is what makes the count exact. No standard test is overridden or xfailed:
the suite's own test_no_overrides_DO_NOT_OVERRIDE checks that."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests

from gateway.adapters.langchain import GatewayRetriever
from tests.conftest import LiveGateway, serve_gateway
from tests.gateway.fixtures import SALES_TASK, memory

QUERY = "okapi"
NOTES = [
    memory(f"mem_okapi_{n}", f"okapi account note {n}: {topic}")
    for n, topic in enumerate(["renewal terms", "pricing call", "contract draft", "kickoff meeting", "escalation", "review"])
]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveGateway]:
    directory = tmp_path_factory.mktemp("langchain-standard")
    with serve_gateway(f"sqlite:///{directory / 'gateway.db'}", directory) as served:
        served.gateway.ingest("acme", NOTES)
        yield served


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # the suite's one async test (ainvoke) runs on anyio's asyncio runner


@pytest.mark.anyio
class TestGatewayRetrieverStandard(RetrieversIntegrationTests):
    """The suite's tests, unchanged; only its properties are ours."""

    @pytest.fixture(autouse=True)
    async def gateway_and_cleanup(self, live: LiveGateway, anyio_backend: str) -> AsyncIterator[None]:
        """The live gateway and alice's key for this test; after it, every retriever the suite made
        is closed, its async client on the event loop that used it."""
        self.live = live
        self.token = live.gateway.key("alice", groups=("sales",), clearance="confidential")
        self.made: list[GatewayRetriever] = []
        yield
        for retriever in self.made:
            await retriever.aclose()

    @property
    def retriever_constructor(self) -> Callable[..., GatewayRetriever]:  # type: ignore[override]
        def make(**params: Any) -> GatewayRetriever:
            retriever = GatewayRetriever.from_url(self.live.url, self.token, **params)
            self.made.append(retriever)
            return retriever

        return make

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"task": SALES_TASK}

    @property
    def retriever_query_example(self) -> str:
        return QUERY


def test_the_seeded_notes_give_more_documents_than_the_suite_asks(live: LiveGateway) -> None:
    """The suite's counts are exact only if the default finds more than its largest k (3)."""
    key = live.gateway.key("alice", groups=("sales",), clearance="confidential")
    retriever = GatewayRetriever.from_url(live.url, key, task=SALES_TASK)
    try:
        assert sorted(d.id or "" for d in retriever.invoke(QUERY)) == sorted(n["id"] for n in NOTES)
    finally:
        retriever.close()
