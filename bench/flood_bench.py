"""One tenant floods the gateway with each cheap-looking call shape; another tenant's latency is measured.

One `gateway serve` on the embedded default (SQLite), two tenants:

- acme, the flooder: 20,000 notes that all match the flood's lexical query, and a dense graph (300
  entities, 3,000 edges) for deep walks;
- globex, the probe: 200 notes, read by one client with a light lexical retrieve, one call at a time.

For each mix the probe's p95 is measured idle, then while the flood runs, in the same run (in
alternating rounds, pooled: the idle p95 of a shared machine moves by a third between minutes), and the
benchmark prints the ratio (target: at most 3x for every mix, on 2 cores), with how many flood
calls were answered and refused (429) and whether the probe was ever refused or partial:

- `lexical`: 16 clients, a lexical query over the 20,000 matching rows;
- `long query`: 30 clients, 4,000-character queries with semantic search (embedding);
- `deep graph`: 20 clients, deep walks from 20 entities at depth 3;
- `mcp tools/list`: 16 clients listing the MCP tools;
- `expand loop`: 8 clients paging with a tiny budget: retrieve, then expand until the cursor ends.

The flood clients run in this process, on the same 2 cores as the server, as an attacker's would
on a shared node: the figure is what a tenant beside them sees.

    .venv/bin/python bench/flood_bench.py                  # every mix, 2 rounds of 8 s of flood each (~6 min)
    .venv/bin/python bench/flood_bench.py --mix lexical --seconds 5
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import Server, code_revision, create_key, free_port, percentile  # noqa: E402

from core.store import close_store, open_store  # noqa: E402
from gateway.writes.items import ingest  # noqa: E402

TASK = {"type": "account_followup", "scope": "sales"}
PROBE = {"task": TASK, "query": "renewal pricing", "depth": "fast", "sources": {"semantic": False}}
LONG_WORDS = "contract renewal pricing discount quarterly review account escalation security audit budget".split()


def seed(data_dir: Path) -> None:
    engine = open_store(f"sqlite:///{data_dir / 'gateway.db'}")
    try:
        rng = random.Random(14)
        notes = [
            {
                "id": f"acme_note_{i}",
                "kind": "memory",
                "acl": ["*"],
                "text": f"renewal pricing review {i} for the account, {' '.join(rng.choices(LONG_WORDS, k=12))}",
            }
            for i in range(20_000)
        ]
        entities = [
            {"id": f"ent_{i}", "kind": "entity", "entity_type": "contact", "acl": ["*"], "text": f"contact {i}"}
            for i in range(300)
        ]
        edges = [
            {
                "id": f"edge_{n}",
                "kind": "edge",
                "from": f"ent_{rng.randrange(300)}",
                "to": f"ent_{rng.randrange(300)}",
                "relation": rng.choice(["works_at", "reports_to", "knows"]),
                "confidence": 0.5 + rng.random() / 2,
                "acl": ["*"],
            }
            for n in range(3000)
        ]
        for start in range(0, len(notes), 2000):
            assert not ingest(engine, "acme", notes[start : start + 2000]).rejected
        assert not ingest(engine, "acme", entities + edges).rejected
        probe_notes = [
            {"id": f"note_{i}", "kind": "memory", "acl": ["*"], "text": f"renewal pricing note {i} for the account"}
            for i in range(200)
        ]
        assert not ingest(engine, "globex", probe_notes).rejected
    finally:
        close_store(engine)


def long_query(rng: random.Random) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < 3990:
        words.append(rng.choice(LONG_WORDS))
    return " ".join(words)[:4000]


def mixes() -> dict[str, tuple[int, Callable[[httpx.Client, str, random.Random], int]]]:
    def retrieve(body: dict[str, Any]) -> Callable[[httpx.Client, str, random.Random], int]:
        return lambda client, key, rng: client.post("/v1/retrieve", json=body, headers=auth(key)).status_code

    def long(client: httpx.Client, key: str, rng: random.Random) -> int:
        body = {"task": TASK, "query": long_query(rng), "depth": "standard"}
        return client.post("/v1/retrieve", json=body, headers=auth(key)).status_code

    def tools_list(client: httpx.Client, key: str, rng: random.Random) -> int:
        headers = {**auth(key), "Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        return client.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}, headers=headers
        ).status_code

    def expand_loop(client: httpx.Client, key: str, rng: random.Random) -> int:
        first = client.post(
            "/v1/retrieve",
            json={"task": TASK, "query": "renewal pricing review", "depth": "fast", "budget": {"bytes": 300}},
            headers=auth(key),
        )
        status, cursor = first.status_code, first.json().get("cursor") if first.status_code == 200 else None
        for _ in range(20):
            if not cursor:
                break
            page = client.post(
                "/v1/retrieve",
                json={"task": TASK, "mode": "expand", "cursor": cursor, "budget": {"bytes": 300}},
                headers=auth(key),
            )
            status, cursor = page.status_code, page.json().get("cursor") if page.status_code == 200 else None
        return status

    lexical = {"task": TASK, "query": "renewal pricing review account", "depth": "fast", "sources": {"semantic": False}}
    deep = {
        "task": TASK,
        "mode": "brief",
        "depth": "deep",
        "graph": {"max_depth": 3},
        "entities": [{"id": f"ent_{i}"} for i in range(20)],
        "sources": {"semantic": False},
    }
    return {
        "lexical": (16, retrieve(lexical)),
        "long query": (30, long),
        "deep graph": (20, retrieve(deep)),
        "mcp tools/list": (16, tools_list),
        "expand loop": (8, expand_loop),
    }


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


SERVER_TIMING: dict[str, list[float]] = {"app": [], "audit": []}  # the probe's own, from its Server-Timing header


def probe(url: str, key: str, calls: int) -> tuple[list[float], Counter[str]]:
    times, outcomes = [], Counter[str]()
    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(calls):
            started = time.perf_counter()
            response = client.post("/v1/retrieve", json=PROBE, headers=auth(key))
            times.append((time.perf_counter() - started) * 1000)
            for part in response.headers.get("server-timing", "").split(","):
                name, _, duration = part.strip().partition(";dur=")
                if name in SERVER_TIMING and duration:
                    SERVER_TIMING[name].append(float(duration))
            outcomes[
                str(response.status_code) + (" partial" if response.status_code == 200 and response.json()["partial"] else "")
            ] += 1
    return times, outcomes


def flood(
    url: str, key: str, clients: int, call: Callable[[httpx.Client, str, random.Random], int], stop: threading.Event
) -> tuple[list[threading.Thread], Counter[int]]:
    statuses: Counter[int] = Counter()
    lock = threading.Lock()

    def client_loop(seed_: int) -> None:
        rng = random.Random(seed_)
        with httpx.Client(base_url=url, timeout=60) as client:
            while not stop.is_set():
                try:
                    status = call(client, key, rng)
                except httpx.HTTPError:
                    status = 0
                with lock:
                    statuses[status] += 1
                if status == 429:
                    time.sleep(0.05)  # an attacker retries at once; a little pause keeps this process's own CPU in check

    threads = [threading.Thread(target=client_loop, args=(n,), daemon=True) for n in range(clients)]
    for thread in threads:
        thread.start()
    return threads, statuses


LONE = {"task": TASK, "mode": "brief", "query": "renewal pricing note for the account"}


def lone_actor(url: str, key: str, clients: int, seconds: float) -> tuple[float, list[float], Counter[int], list[float]]:
    """One actor calling with `clients` parallel clients on an otherwise idle service, as an agent
    framework calls tools in parallel: throughput, latencies, statuses and queue waits (Server-Timing)."""
    stop = threading.Event()
    times: list[float] = []
    waits: list[float] = []
    statuses: Counter[int] = Counter()
    lock = threading.Lock()

    def client_loop() -> None:
        with httpx.Client(base_url=url, timeout=60) as client:
            while not stop.is_set():
                started = time.perf_counter()
                response = client.post("/v1/retrieve", json=LONE, headers=auth(key))
                took = (time.perf_counter() - started) * 1000
                timing = dict(
                    part.strip().split(";dur=")
                    for part in response.headers.get("server-timing", "").split(",")
                    if ";dur=" in part
                )
                with lock:
                    statuses[response.status_code] += 1
                    times.append(took)
                    waits.append(float(timing.get("queue", 0.0)))

    threads = [threading.Thread(target=client_loop, daemon=True) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(60)
    return len(times) / (time.perf_counter() - started), times, statuses, waits


def spread(values: list[float]) -> str:
    """min / median / max of per-round figures."""
    ordered = sorted(values)
    return f"{ordered[0]:.2f} / {ordered[len(ordered) // 2]:.2f} / {ordered[-1]:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mix", action="append", choices=sorted(mixes()), help="run only this mix (repeatable)")
    parser.add_argument("--seconds", type=float, default=6.0, help="how long each flood runs while the probe reads")
    parser.add_argument("--calls", type=int, default=60, help="probe calls idle and under each flood, per round")
    parser.add_argument("--rounds", type=int, default=3, help="idle-then-flood rounds per mix (default 3)")
    parser.add_argument("--lone-seconds", type=float, default=6.0, help="how long the lone actor runs at each client count")
    parser.add_argument("--no-lone", action="store_true", help="skip the lone actor's part")
    parser.add_argument("--capacity", type=int, help="GATEWAY_ADMISSION_CAPACITY for the server (default: its own)")
    args = parser.parse_args()
    chosen = {name: mix for name, mix in mixes().items() if not args.mix or name in args.mix}
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        started = time.perf_counter()
        seed(data_dir)
        flooder = create_key(data_dir, "acme", "user:flood", "agent", "confidential", groups="sales")
        reader = create_key(data_dir, "globex", "user:gina", "agent", "confidential", groups="sales")
        print(f"seeded in {time.perf_counter() - started:.0f} s; code {code_revision()}")
        env = {"GATEWAY_BACKGROUND_EMBEDDING": "false"}
        if args.capacity:
            env["GATEWAY_ADMISSION_CAPACITY"] = str(args.capacity)
        server = Server(data_dir, free_port(), env=env, label="flood")
        server.start()
        lone_rows, rows = [], []
        try:
            server.wait_ready()
            probe(server.url, reader, 20)  # warm-up
            for clients in () if args.no_lone else (1, 4, 8, 16):
                rate, times, statuses, waits = lone_actor(server.url, reader, clients, args.lone_seconds)
                lone_rows.append((clients, rate, times, statuses, waits))
                print(f"  lone actor, {clients} clients: {rate:.1f} calls/s, 429: {statuses.get(429, 0)}")
                time.sleep(1.0)
            for name, (clients, call) in chosen.items():
                idle: list[float] = []
                during: list[float] = []
                ratios: list[float] = []
                outcomes: Counter[str] = Counter()
                statuses = Counter[int]()
                for values in SERVER_TIMING.values():
                    values.clear()
                for _ in range(args.rounds):  # idle and flood alternate: drift hits both alike
                    round_idle = probe(server.url, reader, args.calls)[0]
                    round_during: list[float] = []
                    stop = threading.Event()
                    threads, answered = flood(server.url, flooder, clients, call, stop)
                    time.sleep(1.0)
                    finish = time.monotonic() + args.seconds
                    while time.monotonic() < finish or len(round_during) < args.calls:
                        times, seen = probe(server.url, reader, 10)
                        round_during += times
                        outcomes += seen
                    stop.set()
                    for thread in threads:
                        thread.join(60)
                    statuses += answered
                    idle += round_idle
                    during += round_during
                    ratios.append(percentile(round_during, 95) / percentile(round_idle, 95))
                    time.sleep(2.0)  # the flood's last calls drain before the next idle baseline
                rows.append((name, clients, idle, during, ratios, statuses, outcomes))
                print(
                    f"  {name}: probe p95 {percentile(idle, 95):.1f} -> {percentile(during, 95):.1f} ms "
                    f"(per round {', '.join(f'{r:.2f}x' for r in ratios)}); in the server: handler p95 "
                    f"{percentile(SERVER_TIMING['app'], 95):.1f} ms, audit write p95 {percentile(SERVER_TIMING['audit'], 95):.1f} ms"
                )
        finally:
            server.stop()
            if any(status >= 500 for row in rows for status in row[5]):  # a 5xx is a bug: say where
                print(f"\n5xx answers; the server's log ends:\n{server.log_tail(60)}")
    if lone_rows:
        print("\n=== one actor alone, parallel clients of brief retrieves (2 cores, one process; target: no 429) ===")
        print(f"{'clients':>7} {'calls/s':>8} {'p50 ms':>7} {'p95 ms':>7} {'429':>5} {'waited':>7} {'wait p95 ms':>11}")
        for clients, rate, times, statuses, waits in lone_rows:
            waited = sum(1 for w in waits if w >= 1)
            print(
                f"{clients:>7} {rate:>8.1f} {percentile(times, 50):>7.1f} {percentile(times, 95):>7.1f} "
                f"{statuses.get(429, 0):>5} {waited:>7} {percentile(waits, 95):>11.1f}"
            )
    print("\n=== another tenant's probe under each flood (2 cores, one process; target p95 at most 2x, bound 3x) ===")
    print(
        f"{'mix':<16} {'clients':>7} {'idle p50/p95':>13} {'flood p50/p95':>14} {'p95 ratio min/med/max':>22}  flood answers      probe answers"
    )
    for name, clients, idle, during, ratios, statuses, outcomes in rows:
        flood_answers = ", ".join(f"{status}: {count}" for status, count in sorted(statuses.items()))
        probe_answers = ", ".join(f"{status}: {count}" for status, count in sorted(outcomes.items()))
        print(
            f"{name:<16} {clients:>7} {percentile(idle, 50):>6.1f}/{percentile(idle, 95):<6.1f} "
            f"{percentile(during, 50):>7.1f}/{percentile(during, 95):<6.1f} {spread(ratios):>22}  {flood_answers:<18} {probe_answers}"
        )


if __name__ == "__main__":
    main()
