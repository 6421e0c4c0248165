"""A lone writer bulk-loads while the service's own background work runs: refusals, and a reader's p95.

Issue 54, as a new user would meet it: one `gateway serve` on the embedded default with its
background workers on (embedding with the default model, personal-data analysis), one tenant, and
nobody else calling. A writer `PUT`s the SciFact abstracts (public data, 1.5 KB each) to
`/v1/items` in batches of 500, one batch after another as any loader script does, then sends every
item again changed (so each is embedded and analysed anew). A reader of the same tenant calls a
retrieve (a SciFact claim, every source on) one call at a time throughout.

Reported per run: the writer's batches answered and refused (429), the reader's calls answered and
refused, and the reader's p50/p95 while the changed items are sent, against its idle p95 measured
in the same run on the same store (the loaded corpus, the server restarted with its background
work off, so the baseline is the same call without the service's own work beside it). The backlog
the writer left (`/readyz` `background`) says how far the background lagged: it is reported, not
refused. Over several runs the distribution of the ratio is printed.

    .venv/bin/python bench/writer_bench.py --data-set ../shared/data/scifact            # 2 runs, ~8 min
    .venv/bin/python bench/writer_bench.py --data-set ../shared/data/scifact --runs 3 --limit 2000
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import (  # noqa: E402
    Server,
    batches,
    bench_dir,
    code_revision,
    create_key,
    free_port,
    interrupted,
    percentile,
    scifact,
    serving,
)

TASK = {"type": "account_followup", "scope": "sales"}
BACKGROUND_ON = {"GATEWAY_PII_BACKGROUND": "true", "GATEWAY_BACKGROUND_EMBEDDING": "true"}
BACKGROUND_OFF = {"GATEWAY_PII_BACKGROUND": "false", "GATEWAY_BACKGROUND_EMBEDDING": "false"}


class Reader:
    """One client calling a retrieve after another until stopped: statuses and latencies (ms)."""

    def __init__(self, url: str, key: str, claims: list[str]) -> None:
        self.url, self.key, self.claims = url, key, claims
        self.samples: list[tuple[float, int, float]] = []  # (when, status, ms)
        self.timings: list[tuple[float, dict[str, float]]] = []  # (when, the answer's `timings`)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Reader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(120)

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=120) as client:
            n = 0
            while not self._stop.is_set():
                body = {"task": TASK, "query": self.claims[n % len(self.claims)]}
                n += 1
                started = time.perf_counter()
                try:
                    response = client.post("/v1/retrieve", json=body)
                    status = response.status_code
                except httpx.HTTPError:
                    status = 0
                now = time.monotonic()
                self.samples.append((now, status, (time.perf_counter() - started) * 1000))
                if status == 200:
                    timings = dict(response.json().get("timings") or {})
                    for part in response.headers.get("server-timing", "").split(","):  # queue, app, audit
                        name, _, duration = part.strip().partition(";dur=")
                        if duration:
                            timings[f"server-timing {name}"] = float(duration)
                    self.timings.append((now, timings))

    def between(self, start: float, end: float) -> list[tuple[int, float]]:
        return [(status, ms) for when, status, ms in self.samples if start <= when <= end]

    def stages(self, start: float = 0.0, end: float = float("inf")) -> dict[str, float]:
        """The median of each stage of the answers' `timings` (ms), the slowest first."""
        found: dict[str, list[float]] = {}
        for when, timings in self.timings:
            if start <= when <= end:
                for stage, ms in timings.items():
                    if isinstance(ms, (int, float)):
                        found.setdefault(stage, []).append(float(ms))
        medians = {stage: statistics.median(values) for stage, values in found.items()}
        return dict(sorted(medians.items(), key=lambda kv: -kv[1])[:6])


def write_all(url: str, key: str, bodies: list[bytes]) -> list[int]:
    """PUT each body in turn, as a loader script does; the status of each."""
    statuses = []
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    with httpx.Client(base_url=url, headers=headers, timeout=300) as client:
        for number, body in enumerate(bodies, start=1):
            response = client.put("/v1/items", content=body)
            statuses.append(response.status_code)
            mark = "" if response.status_code == 200 else f"  <- {response.text[:120]}"
            print(f"    batch {number:>2}/{len(bodies)}: {response.status_code}{mark}", flush=True)
    return statuses


def changed(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**item, "text": f"{item['text']} (revised)"} for item in items]


def one_run(data_dir: Path, items: list[dict[str, Any]], claims: list[str], idle_s: float) -> dict[str, Any]:
    writer = create_key(data_dir, "acme", "user:loader", "ingest")
    reader_key = create_key(data_dir, "acme", "user:alice", "agent", "confidential", "sales")
    first, second = batches(items), batches(changed(items))
    with serving(Server(data_dir, free_port(), env=BACKGROUND_ON, label="writer")) as server:
        with Reader(server.url, reader_key, claims) as reader:
            print(f"  loading {len(items):,} items in {len(first)} batches", flush=True)
            loaded = write_all(server.url, writer, first)
            print("  sending them again changed", flush=True)
            began = time.monotonic()
            resent = write_all(server.url, writer, second)
            ended = time.monotonic()
        ready = httpx.get(f"{server.url}/readyz", timeout=10).json()
    during = reader.between(began, ended)
    everything = [(status, ms) for _, status, ms in reader.samples]
    with serving(Server(data_dir, free_port(), env=BACKGROUND_OFF, label="idle")) as server:
        with Reader(server.url, reader_key, claims) as idle_reader:
            time.sleep(idle_s)
    idle = [(status, ms) for _, status, ms in idle_reader.samples]
    ok_during = [ms for status, ms in during if status == 200]
    ok_idle = [ms for status, ms in idle if status == 200]
    return {
        "writes": len(loaded) + len(resent),
        "writes_refused": sum(s == 429 for s in loaded + resent),
        "writes_failed": sum(s not in (200, 429) for s in loaded + resent),
        "reads": len(everything),
        "reads_refused": sum(s == 429 for s, _ in everything),
        "reads_failed": sum(s not in (200, 429) for s, _ in everything),
        "during_p50": percentile(ok_during, 50),
        "during_p95": percentile(ok_during, 95),
        "idle_p50": percentile(ok_idle, 50),
        "idle_p95": percentile(ok_idle, 95),
        "during_n": len(ok_during),
        "idle_n": len(ok_idle),
        "backlog": ready.get("background", {}),
        "during_stages": reader.stages(began, ended),
        "idle_stages": idle_reader.stages(),
        "refused_total": ready["admission"]["refused"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-set", type=Path, required=True, help="the SciFact directory (BEIR layout)")
    parser.add_argument("--limit", type=int, default=5183, help="abstracts to load (default: all 5,183)")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--idle-seconds", type=float, default=30.0, help="how long the idle reader is measured")
    parser.add_argument("--data", type=Path, help="keep the runs' stores here (default: a temporary directory)")
    args = parser.parse_args()
    items, claims = scifact(args.data_set, args.limit)
    print(f"writer_bench at {code_revision()}: {len(items):,} SciFact abstracts, {args.runs} runs", flush=True)
    results = []
    try:
        for run in range(1, args.runs + 1):
            with bench_dir(args.data / f"run{run}" if args.data else None, "writer-bench-") as data_dir:
                print(f"run {run}", flush=True)
                result = one_run(data_dir, items, claims, args.idle_seconds)
                results.append(result)
                print(
                    f"  writer: {result['writes']} batches, {result['writes_refused']} refused, "
                    f"{result['writes_failed']} failed otherwise; reader: {result['reads']} calls, "
                    f"{result['reads_refused']} refused, {result['reads_failed']} failed otherwise",
                    flush=True,
                )
                print(
                    f"  reader while the changed items were sent: p50 {result['during_p50']:.0f} ms, "
                    f"p95 {result['during_p95']:.0f} ms ({result['during_n']} calls); idle: p50 {result['idle_p50']:.0f} ms, "
                    f"p95 {result['idle_p95']:.0f} ms ({result['idle_n']} calls); p95 ratio "
                    f"{result['during_p95'] / result['idle_p95']:.2f}x",
                    flush=True,
                )
                print(f"  backlog left when the writer finished: {json.dumps(result['backlog'])}", flush=True)
                for phase in ("during", "idle"):
                    stages = ", ".join(f"{k} {v:.0f}" for k, v in result[f"{phase}_stages"].items())
                    print(f"  reader's slowest stages {phase} (median ms): {stages}", flush=True)
    except KeyboardInterrupt:
        return interrupted()
    ratios = [r["during_p95"] / r["idle_p95"] for r in results]
    print(
        f"\nover {len(results)} runs: writer refused {sum(r['writes_refused'] for r in results)} of "
        f"{sum(r['writes'] for r in results)} batches; reader refused {sum(r['reads_refused'] for r in results)} of "
        f"{sum(r['reads'] for r in results)} calls; reader p95 during / idle: "
        + ", ".join(f"{x:.2f}x" for x in ratios)
        + f" (median {statistics.median(ratios):.2f}x)"
    )
    return 0 if all(r["writes_refused"] == 0 and r["reads_refused"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
