"""Fault: PostgreSQL restarted under load. Calls get 503 during the outage, never a 500, and the
service recovers without a restart of its own.

Runs `gateway serve` on PostgreSQL (a schema of its own, dropped at the end), 4 clients retrieving
and 1 writing, restarts the local cluster (`pg_ctlcluster <version> main restart`) after a few
seconds, and prints the answers per second: how long the outage lasted for the service, what it
answered meanwhile, and when the first 200 came back.

    .venv/bin/python bench/fault_postgres_restart.py --postgres-url postgresql+psycopg://postgres@127.0.0.1:5432/test

It restarts the machine's PostgreSQL: run it where nothing else needs that server for a few seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
from harness import Server, code_revision, free_port
from retrieve_bench import TASK
from sqlalchemy import create_engine, text

from core.store import close_store, migrate_store, open_store
from gateway.auth import create_api_key
from gateway.writes.items import ingest

SECONDS = 20
RESTART_AT = 5.0


def restart_postgres() -> float:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    started = time.monotonic()
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"], check=True)
    return time.monotonic() - started


async def load(url: str, reader: str, writer: str, timeline: list[tuple[float, str, int]], started: float) -> None:
    until = started + SECONDS

    async def read() -> None:
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {reader}"}, timeout=10) as client:
            while time.monotonic() < until:
                try:
                    status = (
                        await client.post("/v1/retrieve", json={"task": TASK, "query": "renewal", "depth": "fast"})
                    ).status_code
                except httpx.TransportError:
                    status = 0
                timeline.append((time.monotonic() - started, "retrieve", status))
                await asyncio.sleep(0.02)

    async def write() -> None:
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {writer}"}, timeout=10) as client:
            number = 0
            while time.monotonic() < until:
                items = [
                    {"id": f"fault_{number}_{i}", "kind": "memory", "text": f"renewal note {number}", "acl": ["*"]}
                    for i in range(5)
                ]
                try:
                    status = (await client.put("/v1/items", json=items)).status_code
                except httpx.TransportError:
                    status = 0
                timeline.append((time.monotonic() - started, "ingest", status))
                number += 1
                await asyncio.sleep(0.05)

    await asyncio.gather(*(read() for _ in range(4)), write())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--postgres-url", required=True)
    args = parser.parse_args(argv)
    schema = "gw_fault_" + secrets.token_hex(4)
    admin = create_engine(args.postgres_url)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {schema}"))
    url = f"{args.postgres_url}?options=-csearch_path%3D{schema}"
    work = Path(tempfile.mkdtemp(prefix="gateway-fault-"))
    server = None
    try:
        migrate_store(url)  # a PostgreSQL store is migrated before it is opened
        engine = open_store(url)
        ingest(
            engine,
            "acme",
            [{"id": f"n{i}", "kind": "memory", "text": f"renewal pricing note {i}", "acl": ["*"]} for i in range(200)],
        )
        reader = create_api_key(
            engine, tenant="acme", principal="user:alice", roles=["agent"], groups=["sales"], clearance="confidential"
        )
        writer = create_api_key(engine, tenant="acme", principal="user:writer", roles=["ingest"], groups=[], clearance="internal")
        close_store(engine)
        server = Server(
            work, free_port(), env={"GATEWAY_DATABASE_URL": url, "GATEWAY_BACKGROUND_EMBEDDING": "false"}, label="fault"
        )
        server.start()
        server.wait_ready()
        timeline: list[tuple[float, str, int]] = []
        started = time.monotonic()

        async def run() -> float:
            def restart_later() -> float:
                time.sleep(RESTART_AT)
                return restart_postgres()

            restart = asyncio.get_running_loop().run_in_executor(None, restart_later)
            await load(server.url, reader, writer, timeline, started)
            return await restart

        took = asyncio.run(run())
        pid_after = server.proc.pid if server.proc and server.proc.poll() is None else None
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
        for _ in range(30):
            try:
                with admin.begin() as conn:
                    conn.execute(text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
                break
            except Exception:
                time.sleep(1)
        admin.dispose()
    print(
        f"code {code_revision()}; PostgreSQL restarted at {RESTART_AT:.0f} s (the restart took {took:.1f} s); "
        f"4 readers, 1 writer, {SECONDS} s"
    )
    print("second  answers (status: count)")
    for second in range(SECONDS):
        counts = Counter(status for t, _, status in timeline if second <= t < second + 1)
        print(f"{second:>6}  {dict(sorted(counts.items()))}")
    failures = [s for _, _, s in timeline if s >= 500 and s != 503]
    refused = [t for t, _, s in timeline if s == 503]
    last_refusal = max(refused, default=RESTART_AT)
    recovered = min((t for t, _, s in timeline if s == 200 and t > last_refusal), default=None)
    window = f" from {min(refused):.1f} s to {max(refused):.1f} s" if refused else ""
    back = f"200s again from {recovered:.1f} s" if recovered is not None else "no 200 after the restart"
    print(
        f"500s or other 5xx: {len(failures)}; 503s: {len(refused)}{window}; {back}; "
        f"the service kept running: {pid_after is not None}"
    )
    return 0 if not failures and recovered is not None and pid_after is not None else 1


if __name__ == "__main__":
    sys.exit(main())
