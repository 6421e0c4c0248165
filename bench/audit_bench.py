"""Audit benchmark: what the audit-trace write adds to a retrieve at 100k items, and whether the audit
export streams 100,000 traces in bounded memory.

Run from the project root with the project's venv:

    .venv/bin/python bench/audit_bench.py --quick     # 1/10 size smoke run
    .venv/bin/python bench/audit_bench.py             # 100k items, exports at 10k and 100k traces, SQLite
    .venv/bin/python bench/audit_bench.py --postgres-url postgresql+psycopg://postgres@127.0.0.1:5432/test

See bench/history/audit_bench.md ("Reading the report") for what each printed figure means.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import secrets
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
from harness import Server, bench_dir, code_revision, free_port, interrupted, percentile, request_timed, send_all
from retrieve_bench import AGENT, QUERY_SEED, TENANTS, count_items, generate, retrieve_bodies
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import Engine
from sqlmodel import SQLModel

from audit.chain import append, audit_item, audit_trace
from audit.integrity import verify
from audit.record import Trace, new_trace_id
from core.store import migrate_store, open_store, writer
from gateway.auth import create_api_key
from gateway.writes.items import ingest

AGENT_KEY: dict[str, Any] = dict(AGENT)  # the retrieve benchmark's agent, user:alice in acme
TENANT = str(AGENT["tenant"])
AUDITOR: dict[str, Any] = {
    "tenant": TENANT,
    "principal": "user:auditor",
    "roles": ["auditor"],
    "groups": [],
    "clearance": "internal",
}
# The service would otherwise embed the freshly loaded items in the background, competing for the
# CPUs and, on SQLite, for the write lock the audit append takes.
SERVER_ENV = {"GATEWAY_BACKGROUND_EMBEDDING": "false"}
AUDIT_SHARE_TARGET = 0.10
WARMUP_REQUESTS = 30
FLOOR_REQUESTS = 100
CONCURRENCY = 8
FILL_BATCH = 500
FILL_SEED = 11
TEMPLATES = 200
SAMPLE_INTERVAL_S = 0.01
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Sizes:
    items: int
    requests: int
    export_rows: tuple[int, int]  # the chain's length before each export: small, large


FULL = Sizes(items=100_000, requests=400, export_rows=(10_000, 100_000))
QUICK = Sizes(items=10_000, requests=100, export_rows=(1_000, 10_000))


@dataclass(frozen=True, slots=True)
class Backend:
    name: str
    url: str
    data_dir: Path  # the SQLite store, or only the server logs on PostgreSQL
    server_env: dict[str, str]


@contextmanager
def postgres_schema(base_url: str) -> Iterator[str]:
    """A fresh schema of its own (as tests/conftest.py does), dropped at the end."""
    schema = "gw_bench_" + secrets.token_hex(6)
    admin = create_engine(base_url)
    try:
        with admin.begin() as conn:
            conn.execute(text(f"CREATE SCHEMA {schema}"))
        try:
            migrate_store(f"{base_url}{'&' if '?' in base_url else '?'}options=-csearch_path%3D{schema}")
            yield f"{base_url}{'&' if '?' in base_url else '?'}options=-csearch_path%3D{schema}"
        finally:
            with admin.begin() as conn:
                conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    finally:
        admin.dispose()


@contextmanager
def serving(backend: Backend, label: str) -> Iterator[Server]:
    server = Server(backend.data_dir, free_port(), env=backend.server_env, label=label)
    try:
        server.start()
        server.wait_ready()
        yield server
    finally:
        server.stop()


def analyze(engine: Engine) -> None:
    """On PostgreSQL, refresh the planner's statistics of the store's tables, as autovacuum would in a
    growing table: without them ingest slows with every chunk (229 -> 78 items/s over 25k items on the
    test server, which runs with autovacuum off). SQLite is used as ingest leaves it, as in the
    retrieve benchmark."""
    if engine.dialect.name == "postgresql":
        tables = ", ".join(table.name for table in SQLModel.metadata.sorted_tables)
        with engine.begin() as conn:
            conn.execute(text(f"ANALYZE {tables}"))


def autovacuum(engine: Engine) -> str:
    if engine.dialect.name != "postgresql":
        return "n/a"
    with engine.connect() as conn:
        return str(conn.execute(text("SHOW autovacuum")).scalar_one())


def load(engine: Engine, count: int) -> float:
    """The retrieve benchmark's corpus (same generator and seed), ingested chunk by chunk; items/s."""
    started = time.perf_counter()
    done = 0
    for chunk in generate(count):
        for tenant, _ in TENANTS:
            report = ingest(engine, tenant, [item for owner, item in chunk if owner == tenant])
            if report.rejected:
                raise SystemExit(f"ingest rejected {len(report.rejected)} items, first: {report.rejected[0]}")
        analyze(engine)
        done += len(chunk)
        print(f"  loaded {done:>7,}/{count:,} items  ({done / (time.perf_counter() - started):,.0f} items/s)", flush=True)
    return count / (time.perf_counter() - started)


# ---------------------------------------------------------------- 1. the audit write against the retrieve


@dataclass(frozen=True, slots=True)
class Timed:
    """One response: client-observed ms, and the server's split from its Server-Timing header."""

    status: int
    client_ms: float
    app_ms: float
    audit_ms: float


@dataclass(frozen=True, slots=True)
class Phase:
    label: str
    samples: list[Timed]
    wall_s: float

    @property
    def ok(self) -> list[Timed]:
        return [s for s in self.samples if s.status == 200]

    @property
    def errors(self) -> Counter[int]:
        return Counter(s.status for s in self.samples if s.status != 200)

    def p(self, field: str, q: float) -> float:
        return percentile([getattr(s, field) for s in self.ok], q)

    @property
    def audit_share(self) -> float:
        """p50 of the audit write over p50 of the whole retrieve, as the client saw it."""
        return self.p("audit_ms", 50) / self.p("client_ms", 50)


def server_timing(header: str) -> dict[str, float]:
    """`app;dur=12.3, audit;dur=0.4` -> {"app": 12.3, "audit": 0.4}."""
    timings: dict[str, float] = {}
    for metric in header.split(","):
        name, _, params = metric.strip().partition(";")
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key == "dur":
                timings[name] = float(value)
    return timings


async def timed(client: httpx.AsyncClient, method: str, path: str, body: dict[str, Any] | None) -> Timed:
    response, client_ms = await request_timed(client, method, path, body)
    if response is None:
        return Timed(0, client_ms, float("nan"), float("nan"))
    timing = server_timing(response.headers.get("server-timing", ""))
    return Timed(response.status_code, client_ms, timing.get("app", float("nan")), timing.get("audit", float("nan")))


async def run_phase(
    client: httpx.AsyncClient, label: str, method: str, path: str, bodies: list[dict[str, Any] | None], concurrency: int
) -> Phase:
    """Send every body once, from `concurrency` workers each holding one keep-alive connection."""
    samples, seconds = await send_all(bodies, concurrency, lambda body: timed(client, method, path, body))
    return Phase(label, samples, seconds)


def fast_bodies(count: int, seed: int) -> list[dict[str, Any] | None]:
    """The retrieve benchmark's `fast` (lexical only) request bodies."""
    return list(retrieve_bodies(count, seed, "fast"))


async def measure_overhead(url: str, key: str, requests: int, chain_label: str, under_load: bool) -> list[Phase]:
    """After a warm-up: /healthz (the HTTP floor), then `requests` retrieves from 1 client, and from
    CONCURRENCY clients when `under_load`. The 1-client bodies are the same on every call."""
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, limits=limits, timeout=60) as client:
        await run_phase(client, "warm-up", "POST", "/v1/retrieve", fast_bodies(WARMUP_REQUESTS, QUERY_SEED + 99), 1)
        phases = [
            await run_phase(client, "healthz, 1 client", "GET", "/healthz", [None] * FLOOR_REQUESTS, 1),
            await run_phase(
                client, f"retrieve, 1 client, {chain_label}", "POST", "/v1/retrieve", fast_bodies(requests, QUERY_SEED), 1
            ),
        ]
        if under_load:
            phases.append(
                await run_phase(
                    client,
                    f"retrieve, {CONCURRENCY} clients, {chain_label}",
                    "POST",
                    "/v1/retrieve",
                    fast_bodies(requests, QUERY_SEED + 1),
                    CONCURRENCY,
                )
            )
    return phases


# ---------------------------------------------------------------- 2. filling the chain


@dataclass(frozen=True, slots=True)
class Template:
    """A real retrieve's trace from phase 1, appended again under new ids."""

    policy_engine: str | None
    policy_revision: str | None
    lineage: dict[str, Any]


def retrieve_lineages(engine: Engine) -> list[Template]:
    statement = (
        select(audit_trace.c.policy_engine, audit_trace.c.policy_revision, audit_trace.c.lineage)
        .where(audit_trace.c.chain == TENANT, audit_trace.c.endpoint == "retrieve", audit_trace.c.status_code == 200)
        .order_by(audit_trace.c.pk)
        .limit(TEMPLATES)
    )
    with engine.connect() as conn:
        templates = [Template(r.policy_engine, r.policy_revision, r.lineage) for r in conn.execute(statement)]
    if not templates:
        raise SystemExit("no successful retrieve trace to model the filled traces on")
    return templates


def trace_values(template: Template) -> dict[str, Any]:
    """A new trace with the template's lineage, as the row AuditStore.write_sync would append."""
    trace = Trace(
        trace_id=new_trace_id(),
        created_at=datetime.now(timezone.utc),
        endpoint="retrieve",
        status_code=200,
        decision="allow",
        tenant=TENANT,
        actor=AGENT_KEY["principal"],
        policy_engine=template.policy_engine,
        policy_revision=template.policy_revision,
        error_code=None,
        lineage=template.lineage,
    )
    return {f.name: getattr(trace, f.name) for f in fields(trace)}


def chain_rows(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(audit_trace).where(audit_trace.c.chain == TENANT)).scalar_one())


def fill_chain(engine: Engine, target: int, templates: list[Template]) -> tuple[int, float]:
    """Append traces to the tenant's chain with the store's own `audit.chain.append`, FILL_BATCH per
    transaction, until it holds `target` rows; returns the rows appended and the seconds taken."""
    missing = target - chain_rows(engine)
    rng = random.Random(FILL_SEED + target)
    started = time.perf_counter()
    done = 0
    while done < missing:
        batch = min(FILL_BATCH, missing - done)
        with writer(engine).begin() as conn:
            for _ in range(batch):
                append(conn, trace_values(rng.choice(templates)))
        done += batch
        if done % 10_000 < FILL_BATCH or done == missing:
            analyze(engine)
            print(f"  appended {done:>7,}/{missing:,} traces  ({done / (time.perf_counter() - started):,.0f}/s)", flush=True)
    return done, time.perf_counter() - started


# ---------------------------------------------------------------- 2. exporting, and the server's memory


class MemorySampler:
    """Reads the server's memory every SAMPLE_INTERVAL_S while the block runs, from this process's clock."""

    FIGURES = ("VmRSS", "RssAnon", "RssFile")

    def __init__(self, server: Server) -> None:
        self.server = server
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while True:
            self.samples.append((time.perf_counter(), self.server.memory_kib()))
            if self._stop.wait(SAMPLE_INTERVAL_S):
                return

    def peak(self, figure: str, start: float = float("-inf"), end: float = float("inf")) -> int:
        return max((s[figure] for at, s in self.samples if start <= at <= end), default=0)


@dataclass(frozen=True, slots=True)
class ExportRun:
    fmt: str
    status: int
    rows: int
    body_bytes: int
    seconds: float
    first_row_s: float  # until the first row arrived (a CSV header is sent before the query runs)
    before: dict[str, int]  # KiB, /proc/<pid>/status just before the request
    hwm_kib: int  # VmHWM after the export (reset just before it when the kernel allows)
    peak: dict[str, int]  # sampled maxima during the export
    anon_by_quarter: list[int]  # sampled RssAnon maxima in each quarter of the export's time, KiB
    hwm_reset: bool

    @property
    def growth_kib(self) -> int:
        """Peak RSS during the export over RSS just before it."""
        return self.hwm_kib - self.before["VmRSS"]

    def peak_growth(self, figure: str) -> int:
        return self.peak[figure] - self.before[figure]


def export_once(server: Server, key: str, fmt: str) -> ExportRun:
    """GET /v1/audit/export, the body read in chunks and dropped (only lines and bytes counted)."""
    before = server.memory_kib()
    hwm_reset = server.reset_peak_memory()
    lines = size = 0
    first_row_s = float("nan")
    header_lines = 1 if fmt == "csv" else 0  # one line per row after it: the lineage JSON escapes newlines
    headers = {"Authorization": f"Bearer {key}"}
    with MemorySampler(server) as sampler, httpx.Client(base_url=server.url, headers=headers, timeout=300) as client:
        started = time.perf_counter()
        with client.stream("GET", "/v1/audit/export", params={"format": fmt}) as response:
            for chunk in response.iter_raw():
                size += len(chunk)
                lines += chunk.count(b"\n")
                if lines > header_lines and first_row_s != first_row_s:  # still NaN
                    first_row_s = time.perf_counter() - started
        ended = time.perf_counter()
    hwm = server.memory_kib()["VmHWM"]
    quarter = (ended - started) / 4
    return ExportRun(
        fmt,
        response.status_code,
        lines - header_lines,
        size,
        ended - started,
        first_row_s,
        before,
        hwm,
        {figure: sampler.peak(figure) for figure in MemorySampler.FIGURES},
        [sampler.peak("RssAnon", started + q * quarter, started + (q + 1) * quarter) for q in range(4)],
        hwm_reset,
    )


@dataclass(frozen=True, slots=True)
class ExportSize:
    chain_rows: int
    appended: int
    fill_s: float
    baseline: dict[str, int]  # KiB after start-up and the warm-up retrieves
    runs: list[ExportRun]

    @property
    def peak_growth_kib(self) -> int:
        """The highest peak RSS of any export over the start-up baseline."""
        return max(run.hwm_kib for run in self.runs) - self.baseline["VmRSS"]

    def peak_growth_kib_of(self, figure: str) -> int:
        """The highest sampled `figure` (RssAnon, RssFile) of any export over the start-up baseline."""
        return max(run.peak[figure] for run in self.runs) - self.baseline[figure]


def measure_exports(server: Server, agent_key: str, auditor_key: str) -> tuple[dict[str, int], list[ExportRun]]:
    """Baseline memory after a few retrieves, then the export as JSONL and as CSV."""
    headers = {"Authorization": f"Bearer {agent_key}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as client:
        for body in retrieve_bodies(10, QUERY_SEED + 98, "fast"):
            client.post("/v1/retrieve", json=body).raise_for_status()
    baseline = server.memory_kib()
    return baseline, [export_once(server, auditor_key, fmt) for fmt in ("jsonl", "csv")]


# ---------------------------------------------------------------- one backend, start to end


@dataclass(frozen=True, slots=True)
class Result:
    backend: Backend
    sizes: Sizes
    load_rate: float
    autovacuum: str
    overhead: list[Phase]
    overhead_long_chain: list[Phase]
    templates: list[Template]
    exports: list[ExportSize]
    verified: dict[str, Any]
    verify_s: float
    counts: dict[str, int]


def table_count(engine: Engine, table: Any) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def run_backend(backend: Backend, sizes: Sizes) -> Result:
    engine = open_store(backend.url)
    try:
        if count_items(engine):
            raise SystemExit(f"{backend.name}: the store is not empty; use a fresh --data directory")
        statistics = autovacuum(engine)
        print(f"[{backend.name}] loading {sizes.items:,} items", flush=True)
        load_rate = load(engine, sizes.items)
        agent_key = create_api_key(engine, **AGENT_KEY)
        auditor_key = create_api_key(engine, **AUDITOR)

        print(f"[{backend.name}] measuring the audit write against {sizes.requests} retrieves", flush=True)
        with serving(backend, "audit-retrieve") as server:
            overhead = asyncio.run(measure_overhead(server.url, agent_key, sizes.requests, "short chain", under_load=True))
        templates = retrieve_lineages(engine)

        exports: list[ExportSize] = []
        overhead_long_chain: list[Phase] = []
        for target in sizes.export_rows:
            print(f"[{backend.name}] filling the {TENANT} chain to {target:,} traces", flush=True)
            appended, fill_s = fill_chain(engine, target, templates)
            rows = chain_rows(engine)
            with serving(backend, f"audit-export-{target}") as server:
                print(f"[{backend.name}] exporting {rows:,} traces (server pid {server.pid})", flush=True)
                baseline, runs = measure_exports(server, agent_key, auditor_key)
                if target == sizes.export_rows[-1]:
                    print(f"[{backend.name}] measuring the audit write again, chain at {chain_rows(engine):,} rows", flush=True)
                    overhead_long_chain = asyncio.run(
                        measure_overhead(
                            server.url, agent_key, sizes.requests, f"chain {chain_rows(engine) // 1000}k rows", under_load=False
                        )
                    )
            exports.append(ExportSize(rows, appended, fill_s, baseline, runs))

        print(f"[{backend.name}] verifying the {TENANT} chain", flush=True)
        started = time.perf_counter()
        verified = verify(engine, TENANT).wire()
        verify_s = time.perf_counter() - started
        counts = {
            "chain": chain_rows(engine),
            "audit_trace": table_count(engine, audit_trace),
            "audit_item": table_count(engine, audit_item),
        }
    finally:
        engine.dispose()
    return Result(
        backend, sizes, load_rate, statistics, overhead, overhead_long_chain, templates, exports, verified, verify_s, counts
    )


# ---------------------------------------------------------------- reporting


def mark(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def mib(kib: float) -> str:
    return f"{kib / 1024:,.1f}"


def overhead_lines(phases: list[Phase]) -> list[str]:
    floor = next(p for p in phases if p.label.startswith("healthz")).p("client_ms", 50)
    lines = [f"  healthz, 1 client: p50 {floor:.2f} ms (the HTTP floor of this run)"]
    for phase in phases:
        if phase.label.startswith("healthz"):
            continue
        ok = phase.ok
        audit_sum, client_sum = sum(s.audit_ms for s in ok), sum(s.client_ms for s in ok)
        lines += [
            f"  {phase.label} ({len(phase.samples)} requests, {len(phase.samples) / phase.wall_s:.1f} req/s):",
            f"    retrieve (client) p50 {phase.p('client_ms', 50):7.2f} ms  p95 {phase.p('client_ms', 95):7.2f} ms"
            f"   p50 = {phase.p('client_ms', 50) / floor:.1f}x healthz",
            f"    app;dur           p50 {phase.p('app_ms', 50):7.2f} ms  p95 {phase.p('app_ms', 95):7.2f} ms",
            f"    audit;dur         p50 {phase.p('audit_ms', 50):7.2f} ms  p95 {phase.p('audit_ms', 95):7.2f} ms"
            f"   max {max((s.audit_ms for s in ok), default=float('nan')):.2f} ms",
            f"    audit share: p50(audit) / p50(retrieve) = {phase.audit_share:.1%}"
            f" (p95/p95 {phase.p('audit_ms', 95) / phase.p('client_ms', 95):.1%}; sums {audit_sum / client_sum:.1%})",
        ]
    return lines


def export_lines(size: ExportSize) -> list[str]:
    base = size.baseline
    fill = (
        f"{size.appended:,} appended in {size.fill_s:.1f} s ({size.appended / size.fill_s:,.0f}/s)"
        if size.appended
        else "none appended"
    )
    lines = [
        f"  chain at {size.chain_rows:,} rows ({fill}); server after start-up + 10 retrieves: "
        f"VmRSS {mib(base['VmRSS'])} MiB (anon {mib(base['RssAnon'])}, file {mib(base['RssFile'])})",
        f"    {'format':<6} {'status':>6} {'rows':>9} {'body MB':>9} {'s':>7} {'rows/s':>8} {'MB/s':>6} {'1st row':>8}"
        f" {'RSS before':>11} {'VmHWM':>8} {'growth':>8} {'anon +':>7} {'file +':>7}  (MiB)",
    ]
    for run in size.runs:
        lines.append(
            f"    {run.fmt:<6} {run.status:>6} {run.rows:>9,} {run.body_bytes / 1e6:>9.1f} {run.seconds:>7.2f}"
            f" {run.rows / run.seconds:>8,.0f} {run.body_bytes / 1e6 / run.seconds:>6.1f} {run.first_row_s:>7.2f}s"
            f" {mib(run.before['VmRSS']):>11} {mib(run.hwm_kib):>8} {'+' + mib(run.growth_kib):>8}"
            f" {'+' + mib(run.peak_growth('RssAnon')):>7} {'+' + mib(run.peak_growth('RssFile')):>7}"
            + ("" if run.hwm_reset else "  (VmHWM not reset: peak since start)")
        )
    for run in size.runs:
        quarters = ", ".join(f"+{mib(kib - run.before['RssAnon'])}" for kib in run.anon_by_quarter)
        lines.append(f"    {run.fmt} RssAnon over the export, highest in each quarter of its time: {quarters} MiB")
    return lines


def report(result: Result) -> bool:
    """Print one backend's report; returns False when any response was not 200 or the chain is broken."""
    sizes = result.sizes
    packed = [len(t.lineage.get("packed") or ()) for t in result.templates]
    lineage_bytes = [len(json.dumps(t.lineage, sort_keys=True)) for t in result.templates]
    print(
        f"\n=== audit benchmark, {result.backend.name}: {sizes.items:,} items, {sizes.requests} retrieves/phase, "
        f"{os.cpu_count()} CPUs, code {code_revision()} ==="
    )
    statistics = (
        "" if result.autovacuum == "n/a" else f"; autovacuum {result.autovacuum}, ANALYZE after every chunk and fill step"
    )
    print(f"load: {result.load_rate:,.0f} items/s{statistics}")
    print("1. audit write vs retrieve (client-observed; app and audit from each response's Server-Timing):")
    print("\n".join(overhead_lines(result.overhead)))
    print("\n".join(overhead_lines(result.overhead_long_chain)))
    sequential = next(p for p in result.overhead if "1 client" in p.label and p.label.startswith("retrieve"))
    print(
        f"  target: audit adds < {AUDIT_SHARE_TARGET:.0%} to retrieve p50: {sequential.audit_share:.1%} -> "
        f"{mark(sequential.audit_share < AUDIT_SHARE_TARGET)}"
    )
    print(
        f"2. export (GET /v1/audit/export, auditor key, body read in chunks and dropped); the filled traces copy "
        f"{len(result.templates)} real retrieve lineages: {sum(packed) / len(packed):.0f} packed ids "
        f"(min {min(packed)}, max {max(packed)}), {sum(lineage_bytes) / len(lineage_bytes) / 1024:.1f} KiB of lineage JSON each"
    )
    for size in result.exports:
        print("\n".join(export_lines(size)))
    small, large = result.exports[0], result.exports[-1]
    body_small = max(r.body_bytes for r in small.runs) / MIB
    body_large = max(r.body_bytes for r in large.runs) / MIB
    print(
        f"  bounded memory: peak RSS over the start-up baseline {mib(small.peak_growth_kib)} MiB at {small.chain_rows:,} rows "
        f"(largest body {body_small:,.0f} MiB), {mib(large.peak_growth_kib)} MiB at {large.chain_rows:,} rows "
        f"(largest body {body_large:,.0f} MiB): {large.chain_rows / small.chain_rows:.0f}x the rows, "
        f"{large.peak_growth_kib / max(small.peak_growth_kib, 1):.1f}x the growth; of which RssAnon "
        f"+{mib(small.peak_growth_kib_of('RssAnon'))} -> +{mib(large.peak_growth_kib_of('RssAnon'))} MiB, "
        f"RssFile +{mib(small.peak_growth_kib_of('RssFile'))} -> +{mib(large.peak_growth_kib_of('RssFile'))} MiB"
    )
    counts, verified = result.counts, result.verified
    chain = verified["chains"].get(TENANT, {})
    print(
        f"chain: verify {'ok' if verified['ok'] else 'BROKEN ' + str(verified['first_broken'])}, {chain.get('rows', 0):,} rows "
        f"checked in {result.verify_s:.1f} s; rows at the end: {TENANT} chain {counts['chain']:,}, "
        f"audit_trace {counts['audit_trace']:,}, audit_item {counts['audit_item']:,}"
    )
    return report_errors(result)


def report_errors(result: Result) -> bool:
    failed = [f"{p.label}: {dict(p.errors)}" for p in result.overhead + result.overhead_long_chain if p.errors]
    failed += [
        f"export {r.fmt} at {s.chain_rows:,} rows: HTTP {r.status}" for s in result.exports for r in s.runs if r.status != 200
    ]
    if not result.verified["ok"]:
        failed.append(f"chain broken: {result.verified['first_broken']}")
    if not failed:
        print("errors: none")
        return True
    print("\n" + "!" * 78)
    for line in failed:
        print(f"!!! {line}")
    print("!!! THE FIGURES ABOVE INCLUDE FAILURES AND ARE NOT VALID")
    print("!" * 78)
    return False


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1/10 size: 10k items, exports at 1k and 10k traces, 100 retrieves")
    parser.add_argument("--requests", type=int, help="retrieves per measured phase (default 400; 100 with --quick)")
    parser.add_argument(
        "--data", type=Path, help="data directory, must be new or empty (default: a temp dir, removed at the end)"
    )
    parser.add_argument(
        "--postgres-url",
        help="also run on this PostgreSQL, in a fresh schema dropped at the end "
        "(e.g. postgresql+psycopg://postgres@127.0.0.1:5432/test)",
    )
    parser.add_argument("--skip-sqlite", action="store_true", help="run on PostgreSQL only")
    args = parser.parse_args(argv)
    if args.requests is not None and args.requests < 1:
        parser.error("--requests must be positive")
    if args.skip_sqlite and not args.postgres_url:
        parser.error("--skip-sqlite needs --postgres-url")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally blocks stop the server
    sizes = QUICK if args.quick else FULL
    if args.requests:
        sizes = replace(sizes, requests=args.requests)
    with bench_dir(args.data, "gateway-audit-bench-") as root:
        ok = True
        try:
            if not args.skip_sqlite:
                data_dir = root / "sqlite"
                data_dir.mkdir(parents=True, exist_ok=True)
                backend = Backend("SQLite", f"sqlite:///{(data_dir / 'gateway.db').resolve()}", data_dir, SERVER_ENV)
                ok = report(run_backend(backend, sizes)) and ok
            if args.postgres_url:
                data_dir = root / "postgres"
                data_dir.mkdir(parents=True, exist_ok=True)
                with postgres_schema(args.postgres_url) as url:
                    backend = Backend("PostgreSQL", url, data_dir, {**SERVER_ENV, "GATEWAY_DATABASE_URL": url})
                    ok = report(run_backend(backend, sizes)) and ok
            return 0 if ok else 1
        except KeyboardInterrupt:
            return interrupted()


if __name__ == "__main__":
    sys.exit(main())
