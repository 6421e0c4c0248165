"""Workers benchmark: retrieve throughput at 1, 2 and 4 worker processes, each as a ratio to /healthz
throughput at the same worker count in the same run.

Run from the project root with the project's venv:

    .venv/bin/python bench/workers_bench.py                          # 2000 items, 400 calls per phase
    .venv/bin/python bench/workers_bench.py --workers 1 2 --requests 200

The corpus (retrieve_bench's generator, acme's share) is written through PUT /v1/items and embedded
before anything is measured; every worker count then serves the same store, retrieving at the
standard depth (lexical and semantic). Each phase sends its calls from `--concurrency` clients, each holding one
keep-alive connection (the kernel hands each new connection to one worker).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from harness import Server, code_revision, free_port, load_through_api, send_all
from retrieve_bench import embed_store, generate, retrieve_bodies
from sqlalchemy import text

from core.store import close_store, open_store
from gateway.auth import create_api_key

WARMUP = 40


@dataclass(frozen=True, slots=True)
class Throughput:
    calls: int
    failed: int
    seconds: float

    @property
    def rps(self) -> float:
        return self.calls / self.seconds


def keys(data_dir: Path) -> tuple[str, str]:
    engine = open_store(f"sqlite:///{(data_dir / 'gateway.db').resolve()}")
    try:
        writer = create_api_key(engine, tenant="acme", principal="user:loader", roles=["ingest"], groups=[], clearance="internal")
        agent = create_api_key(
            engine, tenant="acme", principal="user:alice", roles=["agent"], groups=["sales"], clearance="confidential"
        )  # retrieve_bench's AGENT
        return writer, agent
    finally:
        close_store(engine)


def waiting(data_dir: Path) -> int:
    engine = open_store(f"sqlite:///{(data_dir / 'gateway.db').resolve()}")
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    text(
                        "SELECT count(*) FROM item LEFT JOIN item_vector v ON v.item_pk = item.pk "
                        "WHERE item.kind IN ('memory', 'document') AND v.item_pk IS NULL"
                    )
                ).scalar_one()
            )
    finally:
        close_store(engine)


def load_corpus(data_dir: Path, items: int) -> None:
    """Written through the API, then embedded (with two threads, not the service's one) before any measuring."""
    corpus = [item for chunk in generate(items) for tenant, item in chunk if tenant == "acme"]
    writer, _ = keys(data_dir)
    server = Server(data_dir, free_port(), workers=1, label="load")
    server.start()
    try:
        server.wait_ready()
        load_through_api(server.url, writer, corpus)
    finally:
        server.stop()
    embed_store(data_dir)  # what the service's one background worker would do, on both cores at once
    if left := waiting(data_dir):
        raise SystemExit(f"{left} items still not embedded")


async def phase(url: str, key: str, method: str, path: str, bodies: list[Any], concurrency: int) -> Throughput:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, limits=limits, timeout=60) as client:

        async def send(body: Any) -> int:
            try:
                response = await client.request(method, path, json=body)
            except httpx.HTTPError:
                return 0
            return response.status_code

        await send_all(bodies[:WARMUP], concurrency, send)  # opens the connections, warms each worker
        statuses, seconds = await send_all(bodies, concurrency, send)
    return Throughput(len(statuses), sum(1 for s in statuses if s != 200), seconds)


async def measure(url: str, key: str, requests: int, concurrency: int) -> tuple[Throughput, Throughput]:
    healthz = await phase(url, key, "GET", "/healthz", [None] * requests, concurrency)
    retrieve = await phase(url, key, "POST", "/v1/retrieve", retrieve_bodies(requests, 7, "standard"), concurrency)
    return healthz, retrieve


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=2000, help="corpus size, before acme's share is taken (default 2000)")
    parser.add_argument("--requests", type=int, default=400, help="calls per phase (default 400)")
    parser.add_argument("--concurrency", type=int, default=8, help="concurrent clients (default 8)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4], help="worker counts (default 1 2 4)")
    args = parser.parse_args(argv)
    if args.items < 1 or args.requests < 1 or args.concurrency < 1 or min(args.workers) < 1:
        parser.error("--items, --requests, --concurrency and --workers must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    data_dir = Path(tempfile.mkdtemp(prefix="gateway-workers-bench-"))
    try:
        load_corpus(data_dir, args.items)
        _, agent = keys(data_dir)
        rows = []
        for workers in args.workers:
            server = Server(data_dir, free_port(), workers=workers, label=f"workers-{workers}")
            server.start()
            try:
                server.wait_ready()
                healthz, retrieve = asyncio.run(measure(server.url, agent, args.requests, args.concurrency))
            finally:
                server.stop()
            rows.append((workers, healthz, retrieve))
            print(f"  {workers} workers: healthz {healthz.rps:,.0f}/s, retrieve {retrieve.rps:,.1f}/s", flush=True)
        print(
            f"\ncode {code_revision()}, {args.items} items generated (acme's share loaded), {args.requests} calls per phase, "
            f"{args.concurrency} clients\n"
        )
        print("| workers | /healthz calls/s | retrieve calls/s | retrieve / healthz | retrieve vs 1 worker | failed |")
        print("|---|---|---|---|---|---|")
        base = rows[0][2].rps
        for workers, healthz, retrieve in rows:
            print(
                f"| {workers} | {healthz.rps:,.0f} | {retrieve.rps:,.1f} | {retrieve.rps / healthz.rps:.3f} | "
                f"{retrieve.rps / base:.2f}x | {healthz.failed + retrieve.failed} |"
            )
        return 0 if all(h.failed + r.failed == 0 for _, h, r in rows) else 1
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
