"""Background work yields to callers: a lone writer's bulk load, and a reader of its tenant calling
meanwhile, are never refused by the service's own embedding and personal-data analysis.

Over the real HTTP stack with the real background workers (the packaged embedding model, Presidio),
on a service made small on purpose: two seats and a 1.5 s wait bound, so that a call kept waiting
behind the background's batches for one wait bound would be a 429 here. The writer sends its
batches one after another, then sends them all again changed (every item embedded and analysed
anew); the reader calls throughout. Before issue 54 the background took every seat and the writer's
next batch waited behind it until it was refused."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

from tests.conftest import Gateway, open_gateway
from tests.gateway.fixtures import SALES_TASK

FIRST = ["Jane", "Omar", "Priya", "Lukas", "Mei", "Carlos", "Aisha", "Tomasz"]
LAST = ["Doe", "Haddad", "Raman", "Becker", "Chen", "Ortega", "Bello", "Nowak"]
WORDS = (
    "renewal pricing discount contract quarterly review escalation security audit budget onboarding "
    "invoice seats migration roadmap support ticket outage latency integration training"
).split()


def notes(count: int, round_: int, rng: random.Random) -> list[dict[str, Any]]:
    """Sales notes of about 1.2 KB, each naming a person and an address (work for the analysis)."""
    out = []
    for i in range(count):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        body = " ".join(rng.choice(WORDS) for _ in range(150))
        text = f"Call with {first} {last} ({first.lower()}.{last.lower()}@globex.example), round {round_}: {body}."
        out.append({"id": f"note_{i}", "kind": "memory", "text": text, "acl": ["*"], "scope": ["sales"]})
    return out


def test_a_lone_writers_bulk_load_and_a_reader_meanwhile_are_never_refused(sqlite_url: str, tmp_path: Path) -> None:
    settings = {"admission_capacity": 2, "admission_queue_wait_ms": 1500, "embeddings": "minilm"}
    with open_gateway(sqlite_url, tmp_path, **settings) as gateway:
        writer = gateway.key("loader", roles=("ingest",))
        reader = gateway.key("alice", groups=("sales",), clearance="confidential")
        rng = random.Random(54)
        statuses: dict[str, list[int]] = {"write": [], "read": []}
        seen: list[dict[str, Any]] = []
        done = threading.Event()

        def read() -> None:
            body = {"task": SALES_TASK, "query": "renewal pricing discount", "sources": {"semantic": True}}
            while not done.is_set():
                statuses["read"].append(gateway.retrieve(reader, body, semantic=True).status_code)
                seen.append(gateway.client.get("/readyz").json())
                time.sleep(0.05)

        reading = threading.Thread(target=read)
        reading.start()
        try:
            for round_ in (1, 2):  # loaded, then every item sent again changed
                items = notes(600, round_, rng)
                for start in range(0, len(items), 100):
                    response = write(gateway, writer, items[start : start + 100])
                    statuses["write"].append(response)
                    time.sleep(0.2)  # a loader script's own pace between batches
        finally:
            done.set()
            reading.join(60)

        assert statuses["write"] == [200] * 12, statuses["write"]
        assert statuses["read"] and set(statuses["read"]) == {200}, statuses["read"]
        # The background did run beside them (the test is not passing on an idle worker), within its share.
        background = [s["admission"]["background_in_flight"] for s in seen]
        assert max(background) >= 1 and all(b <= s["admission"]["background_seats"] for b, s in zip(background, seen))
        assert gateway.client.get("/readyz").json()["admission"]["refused"] == 0
        # What waits is reported as backlog, not as refusals.
        assert any((s["background"].get("embedding") or 0) > 0 for s in seen), "the writer should outrun the worker"


def write(gateway: Gateway, key: str, batch: list[dict[str, Any]]) -> int:
    response = gateway.client.put("/v1/items", json=batch, headers=gateway.auth(key))
    if response.status_code == 200:
        assert response.json()["rejected"] == []
    return response.status_code


def test_readyz_reports_the_backlog_by_kind_and_never_a_tenant(sqlite_url: str, tmp_path: Path) -> None:
    """/readyz answers anyone: its `background` is the process's backlog per kind of work (the number
    /metrics' gateway_background_pending already gives), never a tenant's name, nor a count per tenant."""
    with open_gateway(sqlite_url, tmp_path, embeddings="minilm") as gateway:
        for tenant in ("acme-secret-tenant", "globex"):
            gateway.ingest(tenant, notes(5, 1, random.Random(1)))
        answer = gateway.client.get("/readyz")
        body = answer.json()
        assert set(body["background"]) == {"embedding", "pii analysis"}
        assert all(v is None or isinstance(v, int) for v in body["background"].values())
        assert "acme-secret-tenant" not in answer.text and "globex" not in answer.text
