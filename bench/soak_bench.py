"""Soak: the embedded default under a mixed read/write load for 10 minutes at 8 concurrent clients.

Reports p50/p95 and the server's RSS per minute, and the 5xx count. The writers rewrite a fixed set
of items (each rewrite re-embedded and re-analysed in the background), so the store's size stays
put and memory growth is the service's own. Targets (issue 14): 0 5xx, p95
drift within 20% (the last minute against the first after warm-up), RSS growth under 10% after
warm-up.

Run from the project root with the project's venv:

    .venv/bin/python bench/soak_bench.py --minutes 1     # a short smoke run
    .venv/bin/python bench/soak_bench.py                 # 10 minutes
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from harness import Server, code_revision, free_port, percentile
from retrieve_bench import QUERY_SEED, prepare_store, retrieve_bodies

from core.store import close_store, open_store
from gateway.auth import create_api_key

ITEMS = 5_000
CLIENTS = 8
WRITERS = 2
UPDATED_BATCHES = 50  # each writer rewrites 50 batches of 10 items over and over
DRIFT_TARGET = 1.20
RSS_TARGET = 1.10


@dataclass
class Minute:
    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    rss_kib: int = 0


def keys(data_dir: Path) -> tuple[list[str], list[str]]:
    engine = open_store(f"sqlite:///{(data_dir / 'gateway.db').resolve()}")
    try:
        readers = [
            create_api_key(
                engine, tenant="acme", principal=f"user:reader{i}", roles=["agent"], groups=["sales"], clearance="confidential"
            )
            for i in range(CLIENTS - WRITERS)
        ]
        writers = [
            create_api_key(engine, tenant="acme", principal=f"user:writer{i}", roles=["ingest"], groups=[], clearance="internal")
            for i in range(WRITERS)
        ]
    finally:
        close_store(engine)
    return readers, writers


async def client(url: str, key: str, writer: bool, number: int, minutes: list[Minute], started: float, until: float) -> None:
    rng = random.Random(number)
    bodies = retrieve_bodies(2000, QUERY_SEED + number, "fast") + retrieve_bodies(500, QUERY_SEED + 100 + number, "standard")
    rng.shuffle(bodies)
    sent = 0
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        while time.monotonic() < until:
            begun = time.monotonic()
            if writer:
                # A fixed set of ids, rewritten in turn: the store's size stays put, so memory that
                # grows is the service's, not the data's (each rewrite is re-embedded and re-analysed).
                slot = sent % UPDATED_BATCHES
                items = [
                    {
                        "id": f"soak_{number}_{slot}_{i}",
                        "kind": "memory",
                        "text": f"soak note {sent} {i} about renewal pricing",
                        "acl": ["*"],
                        "tags": ["billing"],
                    }
                    for i in range(10)
                ]
                response = await http.put("/v1/items", json=items)
            else:
                response = await http.post("/v1/retrieve", json=bodies[sent % len(bodies)])
            sent += 1
            minute = minutes[min(int((time.monotonic() - started) // 60), len(minutes) - 1)]
            minute.latencies.append((time.monotonic() - begun) * 1000)
            minute.statuses[response.status_code] = minute.statuses.get(response.status_code, 0) + 1
            if response.status_code == 429:
                await asyncio.sleep(float(response.headers.get("retry-after", "1")))


async def soak(server: Server, readers: list[str], writers: list[str], total_minutes: int) -> list[Minute]:
    minutes = [Minute() for _ in range(total_minutes)]
    started = time.monotonic()
    until = started + total_minutes * 60

    async def sample_memory() -> None:
        while time.monotonic() < until:
            await asyncio.sleep(5)
            index = min(int((time.monotonic() - started) // 60), total_minutes - 1)
            minutes[index].rss_kib = server.memory_kib().get("VmRSS", 0)

    tasks = [client(server.url, key, False, n, minutes, started, until) for n, key in enumerate(readers)]
    tasks += [client(server.url, key, True, 100 + n, minutes, started, until) for n, key in enumerate(writers)]
    await asyncio.gather(sample_memory(), *tasks)
    return minutes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--minutes", type=int, default=10)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="gateway-soak-"))
    server = None
    try:
        prepare_store(work, ITEMS, reuse=False)
        readers, writers = keys(work)
        server = Server(work, free_port(), label="soak")
        server.start()
        server.wait_ready()
        print(
            f"code {code_revision()}; {args.minutes} minutes, {CLIENTS} clients ({WRITERS} rewriting {UPDATED_BATCHES} batches of 10, "
            f"the rest retrieving: 80% fast, 20% standard), {ITEMS:,} items to start",
            flush=True,
        )
        minutes = asyncio.run(soak(server, readers, writers, args.minutes))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("minute  calls   p50 ms   p95 ms   RSS MiB  5xx  429")
    for number, minute in enumerate(minutes, start=1):
        errors = sum(n for status, n in minute.statuses.items() if status >= 500)
        print(
            f"{number:>6} {len(minute.latencies):>6} {percentile(minute.latencies, 50):>8.1f} {percentile(minute.latencies, 95):>8.1f} "
            f"{minute.rss_kib / 1024:>9.0f} {errors:>4} {minute.statuses.get(429, 0):>4}"
        )
    errors = sum(n for m in minutes for status, n in m.statuses.items() if status >= 500)
    warm = minutes[1] if len(minutes) > 1 else minutes[0]
    drift = percentile(minutes[-1].latencies, 95) / percentile(warm.latencies, 95)
    growth = minutes[-1].rss_kib / warm.rss_kib if warm.rss_kib else float("nan")
    ok = errors == 0 and drift <= DRIFT_TARGET and growth <= RSS_TARGET
    print(
        f"5xx: {errors}; p95 drift (last minute / minute 2): {drift:.2f} (target <= {DRIFT_TARGET}); "
        f"RSS growth (last / minute 2): {growth:.3f} (target <= {RSS_TARGET})  {'OK' if ok else 'NOT MET'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
