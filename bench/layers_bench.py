"""Layers beside their engines' floors, governance overhead, and the service's memory (issue 18, items 1 and 5).

In one run, on SciFact (5,183 abstracts, real MiniLM vectors) and on 100,000 synthetic items (the
retrieve benchmark's generator, random unit vectors written straight to item_vector):

- every retrieve layer's time, from the pipeline's own `timings` (the audit write timed around
  the service's own `AuditStore.write`), beside a bare call of the engine underneath it, in this
  process on the same data: ONNX `session.run`, numpy or hnswlib over the permitted rows, one
  FTS5 MATCH by bm25, one regorus evaluation of the same policy input, a bare INSERT;
- governance overhead: the same pipeline with an allow-all policy stub and no verify (both in
  bench/ungoverned.py, never in the service), governed / ungoverned;
- the RSS of a real `gateway serve` at 0, 5k and 100k items with its vector index warm.

Run from the project root with the project's venv:

    .venv/bin/python bench/layers_bench.py --data-set /work/shared/data/scifact \\
        --store /tmp/layers-scifact --synthetic-store /tmp/layers-100k          # keep both stores
    .venv/bin/python bench/layers_bench.py --data-set /work/shared/data/scifact --queries 50 --items 20000  # quick

See bench/README.md ("Layers beside their floors").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean, median
from typing import Any

import anyio.to_thread
import floors
import httpx
import numpy as np
from harness import Server, code_revision, free_port
from sqlalchemy import text
from ungoverned import AllowAllEngine, RecordingEngine, UngovernedPipeline

from audit.record import TraceBuilder, new_trace_id
from connectors.sql.lexical import fts_match, query_terms
from connectors.sql.pushdown import bound
from core.actor import Actor
from core.instants import utc_now
from core.records import RecallQuery
from core.request import RetrieveRequest, parse_retrieve
from core.store import close_store, lexical_table, open_store, writer
from gateway.auth import create_api_key
from gateway.context import GatewayContext, build_context
from gateway.pipeline.pipeline import Pipeline
from gateway.pipeline.semantic import semantic_search
from gateway.policy.decide import constraints_from, request_input
from gateway.policy.embedded import build_engine
from gateway.settings import Settings

TARGET_RATIO = 3.0
TARGET_GOVERNANCE = 1.25
FETCH_IDS = 10
GRAPH_WAIT_S = 900
SEED = 20261201

# (key, layer, what its floor is)
LAYERS = (
    ("embed", "query embedding", "ONNX session.run on the tokenised query"),
    ("vector", "vector search", "numpy exact over permitted rows / hnswlib knn_query (what the layer used)"),
    ("lexical", "lexical", "one FTS5 MATCH ... ORDER BY bm25 LIMIT k"),
    ("embed_alone", "embedding, alone", "as above; the source run by itself, not beside lexical"),
    ("vector_alone", "vector, alone", "as above"),
    ("lexical_alone", "lexical, alone", "as above"),
    ("exact", "exact (fetch 10 ids)", "SELECT * FROM item WHERE tenant=? AND id IN (...)"),
    ("graph", "graph", "(none: no entities in either corpus, the walk has no start)"),
    ("decide", "decide", "one regorus evaluation in-process, same input"),
    ("verify", "verify", "one regorus evaluation in-process, same input"),
    ("fuse", "fuse/rank/pack", "reciprocal-rank fusion of the two lists and a sort, in Python"),
    ("audit", "audit write", "bare INSERT + COMMIT of a row of the audit row's size"),
)
EXTRA = ("sections", "recall", "mask", "pipeline")  # reported without a floor


def permitted_ids(index: Any, where: Any, limit: int) -> tuple[Any, dict[str, Any]]:
    """The statement (and values) that lists the permitted pks with a current vector: the set the
    numpy floor scores. The index's own statement where it has one (since issue 18,
    connectors.sql.vectors.permitted_pks), else its older per-call `_current`."""
    from connectors.sql import vectors

    if hasattr(vectors, "permitted_pks"):
        return vectors.permitted_pks(()), index._values(where)
    return index._current(where, RecallQuery(limit=limit)), bound(where)


@dataclass(frozen=True, slots=True)
class Corpus:
    name: str
    data_dir: Path
    key: str
    items: int
    bodies: list[dict[str, Any]]
    fetch_bodies: list[dict[str, Any]]
    synthetic: bool


@dataclass(slots=True)
class Series:
    layer: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)

    def add(self, layer: float | None, floor: float | None) -> None:
        if layer is not None:
            self.layer.append(layer)
        if floor is not None:
            self.floor.append(floor)


@dataclass(slots=True)
class Figures:
    corpus: Corpus
    series: dict[str, Series] = field(default_factory=dict)
    governed: list[float] = field(default_factory=list)
    ungoverned: list[float] = field(default_factory=list)
    strategies: dict[str, int] = field(default_factory=dict)
    candidates: list[int] = field(default_factory=list)
    audit_row_bytes: list[int] = field(default_factory=list)
    graph_ran: int = 0

    def s(self, key: str) -> Series:
        return self.series.setdefault(key, Series())


# ---------------------------------------------------------------- corpora


def scifact_corpus(data_set: Path, store: Path, queries: int) -> Corpus:
    """SciFact through the real path (PUT /v1/items, then `gateway embed`), as the quality benchmark loads it."""
    import quality_bench

    data = quality_bench.read_data_set(data_set)
    # The service's default model, which quality_bench.prepare loads and embeds with (it measures
    # one model at a time, named in MODEL_ENV); this benchmark's own servers run on the default too.
    quality_bench.MODEL_ENV.setdefault("GATEWAY_EMBEDDINGS", "bge-small")
    key, _, _ = quality_bench.prepare(store, data, True)
    claims = [claim for _, claim in data.queries]
    rng = random.Random(SEED)
    bodies = [{"task": quality_bench.TASK, "query": claims[i % len(claims)], "depth": "standard"} for i in range(queries)]
    ids = [f"{quality_bench.ID_PREFIX}{doc['_id']}" for doc in data.corpus]
    fetch = [{"task": quality_bench.TASK, "fetch": rng.sample(ids, FETCH_IDS)} for _ in range(queries)]
    return Corpus("SciFact", store, key, len(data.corpus), bodies, fetch, False)


def synthetic_corpus(store: Path, items: int, queries: int, model: str, dims: int) -> Corpus:
    """The retrieve benchmark's items (ingested in-process through the write path), with random unit vectors."""
    import retrieve_bench

    key, _ = retrieve_bench.prepare_store(store, items, True)
    write_random_vectors(store, model, dims)
    tenant = retrieve_bench.AGENT["tenant"]
    engine = open_store(f"sqlite:///{(store / 'gateway.db').resolve()}")
    try:
        with engine.connect() as conn:
            ids = list(conn.execute(text("SELECT id FROM item WHERE tenant = :t ORDER BY pk"), {"t": tenant}).scalars())
    finally:
        engine.dispose()
    rng = random.Random(SEED)
    bodies = [
        {k: v for k, v in b.items() if k != "sources"}
        for b in retrieve_bench.retrieve_bodies(queries, retrieve_bench.QUERY_SEED, "standard")
    ]
    fetch = [{"task": retrieve_bench.TASK, "fetch": rng.sample(ids, FETCH_IDS)} for _ in range(queries)]
    return Corpus("synthetic", store, key, items, bodies, fetch, True)


def write_random_vectors(store: Path, model: str, dims: int, chunk: int = 5000) -> None:
    """A random unit vector for every embeddable item that has none (embedding 100k texts takes hours
    on 2 cores); stored exactly as `gateway embed` stores vectors, under the packaged model's id."""
    engine = open_store(f"sqlite:///{(store / 'gateway.db').resolve()}")
    rng = np.random.default_rng(SEED)
    written = 0
    try:
        while True:
            with engine.connect() as conn:
                rows = conn.execute(
                    text(
                        "SELECT item.pk, item.content_hash FROM item LEFT JOIN item_vector v ON v.item_pk = item.pk "
                        "WHERE item.kind IN ('memory', 'document', 'property') AND v.item_pk IS NULL ORDER BY item.pk LIMIT :n"
                    ),
                    {"n": chunk},
                ).all()
            if not rows:
                break
            matrix = rng.standard_normal((len(rows), dims)).astype(np.float32)
            matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
            seq = time.time_ns()
            with writer(engine).begin() as conn:
                conn.execute(
                    text(
                        "INSERT INTO item_vector (item_pk, model, dims, vector, content_hash, seq) "
                        "VALUES (:pk, :model, :dims, :vector, :hash, :seq)"
                    ),
                    [
                        {"pk": r.pk, "model": model, "dims": dims, "vector": v.tobytes(), "hash": r.content_hash, "seq": seq}
                        for r, v in zip(rows, matrix)
                    ],
                )
            written += len(rows)
        if written:
            print(f"  wrote {written:,} random unit vectors to item_vector", flush=True)
    finally:
        engine.dispose()


# ---------------------------------------------------------------- one call, governed or not


async def one_call(
    context: GatewayContext, pipeline: Pipeline, actor: Actor, request: RetrieveRequest
) -> tuple[dict[str, Any], float, float, int]:
    """The pipeline and then the audit write, as `traced` runs them: (body, pipeline ms, audit ms, row bytes)."""
    # Every call embeds its query: the bodies repeat each query for the governed and the ungoverned
    # call, and the service's cache of recent query vectors would halve the embedding layer.
    context.connectors.semantic.vectors.clear()
    trace = TraceBuilder(new_trace_id(), "retrieve", utc_now(), key=context.audit.key)
    trace.tenant, trace.actor = actor.tenant, actor.principal
    trace.policy_engine, trace.policy_revision = pipeline.policy.name, pipeline.policy.revision
    started = time.perf_counter()
    response = await pipeline.retrieve(actor, request, trace)
    piped = time.perf_counter()
    frozen = trace.freeze(200)
    await context.audit.write(frozen)
    done = time.perf_counter()
    row = len(json.dumps({name: getattr(frozen, name) for name in frozen.__dataclass_fields__}, default=str))
    return response.wire(), (piped - started) * 1000, (done - piped) * 1000, row


async def wait_for_graphs(index: Any) -> None:
    """The service builds each large tenant's HNSW graph in the background after warm-up; wait for it."""
    deadline = time.monotonic() + GRAPH_WAIT_S
    while time.monotonic() < deadline:
        tenants = list(index._tenants.values())
        if all(t.graph is not None or t.size < index.ann_min_items for t in tenants):
            return
        await asyncio.sleep(0.5)
    raise SystemExit("the vector index's graphs were not built in time")


class FloorKit:
    """What the bare calls need, prepared once: regorus in-process, raw SQLite connections, the model."""

    def __init__(self, context: GatewayContext) -> None:
        self.context = context
        self.rego = build_engine(context.policy.bundle)
        db = context.settings.data_dir / "gateway.db"
        self.sql = sqlite3.connect(f"file:{db}?mode=ro", uri=True, check_same_thread=False)
        journal = str(self.sql.execute("PRAGMA journal_mode").fetchone()[0])
        self.inserts = floors.InsertFloor(
            context.settings.data_dir / "layers-insert-floor.db", journal, 1
        )  # NORMAL, as core.store
        semantic = context.connectors.semantic
        assert semantic.embedder is not None and semantic.connector is not None
        self.embedder: Any = semantic.embedder
        self.index: Any = getattr(semantic.connector, "index")

    def close(self) -> None:
        self.sql.close()
        self.inserts.close()

    async def alone(self, figures: Figures, request: RetrieveRequest, recorder: RecordingEngine) -> None:
        """The lexical and semantic sources each run by themselves (in recall they run side by side
        and share the interpreter), with the same filter and query."""
        where = constraints_from(recorder.results["request"]).items
        query = RecallQuery(text=request.query, limit=request.limit)
        lexical = await self.context.connectors.lexical.search(where, query)
        self.context.connectors.semantic.vectors.clear()  # embedded again, as in the calls
        semantic = await semantic_search(self.context.connectors.semantic, where, query)
        embed = semantic.embed_ms or 0.0
        figures.s("lexical_alone").add(lexical.ms, figures.s("lexical").floor[-1])
        figures.s("embed_alone").add(embed, figures.s("embed").floor[-1])
        figures.s("vector_alone").add(semantic.ms - embed, figures.s("vector").floor[-1])

    def measure(
        self, figures: Figures, request: RetrieveRequest, recorder: RecordingEngine, body: dict[str, Any], row_bytes: int
    ) -> None:
        """Every floor for this call, on the inputs the governed call just used."""
        query = request.query or ""
        figures.s("decide").add(None, floors.rego_eval(self.rego, "data.gateway.request", _dumps(recorder.inputs["request"])))
        if "items" in recorder.inputs:
            figures.s("verify").add(None, floors.rego_eval(self.rego, "data.gateway.items", _dumps(recorder.inputs["items"])))
            figures.candidates.append(len(recorder.inputs["items"]["items"]))
        encodings = self.embedder._tokenizer.encode_batch([query])
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        figures.s("embed").add(None, floors.onnx_run(self.embedder._session, feeds))

        where = constraints_from(recorder.results["request"]).items
        lexical_ms, lexical_ids = floors.fts_bm25(
            self.sql, lexical_table(where.tenant), fts_match(query_terms(query)), request.limit
        )
        figures.s("lexical").add(None, lexical_ms)

        q = self.embedder.embed([query])[0]
        tenant = self.index._tenants[where.tenant]
        with self.context.store.connect() as conn:
            pks = [int(pk) for (pk,) in conn.execute(*permitted_ids(self.index, where, request.limit))]
        rows = np.array([tenant.row_of[pk] for pk in pks if pk in tenant.row_of], dtype=np.int64)
        exact_ms = floors.numpy_exact(tenant.matrix, rows, q, request.limit)
        detail = (body["sources"].get("semantic") or {}).get("detail") or ""
        strategy = "approximate" if "approximate" in detail else "exact"
        figures.strategies[strategy] = figures.strategies.get(strategy, 0) + 1
        figures.s("vector_numpy").add(None, exact_ms)
        if tenant.graph is not None:
            window = max(request.limit * 4, 64)
            tenant.graph.set_ef(max(window, 128))
            figures.s("vector_hnsw").add(None, floors.hnsw_knn(tenant.graph, q, min(window, tenant.graph_rows)))
        vector_floor = figures.s("vector_hnsw").floor[-1] if strategy == "approximate" else exact_ms
        figures.s("vector").add(None, vector_floor)

        semantic_ids = (
            [int(tenant.pks[r]) for r in rows[np.argsort(-(tenant.matrix[rows] @ q))[: request.limit]]] if len(rows) else []
        )
        figures.s("fuse").add(None, floors.rrf([lexical_ids, semantic_ids], request.limit))
        figures.s("audit").add(None, self.inserts.insert(row_bytes))
        figures.audit_row_bytes.append(row_bytes)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def layer_times(figures: Figures, body: dict[str, Any], pipeline_ms: float, audit_ms: float) -> None:
    timings, sources = body["timings"], body["sources"]
    embed = timings.get("embed_ms")
    semantic = timings.get("semantic_ms")
    figures.s("embed").add(embed, None)
    figures.s("vector").add(semantic - embed if semantic is not None and embed is not None else None, None)
    figures.s("lexical").add(timings.get("lexical_ms"), None)
    figures.s("decide").add(timings.get("decide_ms"), None)
    figures.s("verify").add(timings.get("verify_ms"), None)
    figures.s("fuse").add(timings.get("fuse_ms"), None)
    figures.s("sections").add(timings.get("sections_ms"), None)
    figures.s("recall").add(timings.get("recall_ms"), None)
    figures.s("mask").add(timings.get("mask_ms"), None)
    figures.s("pipeline").add(pipeline_ms, None)
    figures.s("audit").add(audit_ms, None)
    if (sources.get("graph") or {}).get("status") not in (None, "skipped"):
        figures.graph_ran += 1
        figures.s("graph").add(timings.get("graph_ms"), None)


async def measure_corpus(corpus: Corpus, warmup: int) -> Figures:
    """Governed and ungoverned calls in turn (the order alternates, so neither always finds the cache
    warm), each followed by the floors on the same inputs; then fetch calls for the exact layer."""
    settings = Settings(data_dir=corpus.data_dir, pii_background=False, background_embedding=False)
    context = await build_context(settings)
    kit: FloorKit | None = None
    try:
        connector = context.connectors.semantic.connector
        if connector is None:
            raise SystemExit(f"semantic search is unavailable: {context.connectors.semantic.unavailable}")
        print(f"[{corpus.name}] warming the vector index and building its graphs...", flush=True)
        started = time.perf_counter()
        await anyio.to_thread.run_sync(getattr(connector, "warm"))
        await wait_for_graphs(getattr(connector, "index"))
        print(
            f"[{corpus.name}] index warm in {time.perf_counter() - started:.1f} s; measuring {len(corpus.bodies)} queries "
            f"({warmup} warm-up)",
            flush=True,
        )
        actor = context.authenticator.authenticate(f"Bearer {corpus.key}")
        recorder = RecordingEngine(context.policy)
        governed = Pipeline(settings, context.store, recorder, context.connectors, context.privacy)
        first = parse_retrieve(corpus.bodies[0])
        captured = await context.policy.evaluate("request", request_input(actor, first, utc_now()))
        stub = AllowAllEngine(captured, context.policy.loaded_at)
        ungoverned = UngovernedPipeline(settings, context.store, stub, context.connectors, context.privacy)
        kit = FloorKit(context)
        figures = Figures(corpus)
        for number, raw in enumerate(corpus.bodies):
            request = parse_retrieve(raw)
            kept = number >= warmup
            body: dict[str, Any] = {}
            row = 0
            for governed_turn in (True, False) if number % 2 == 0 else (False, True):
                if governed_turn:
                    recorder.inputs.clear()
                    recorder.results.clear()
                    body, pipeline_ms, audit_ms, row = await one_call(context, governed, actor, request)
                    if kept:
                        layer_times(figures, body, pipeline_ms, audit_ms)
                        figures.governed.append(pipeline_ms + audit_ms)
                else:
                    _, pipeline_ms, audit_ms, _ = await one_call(context, ungoverned, actor, request)
                    if kept:
                        figures.ungoverned.append(pipeline_ms + audit_ms)
            if kept:  # after both calls, so the bare calls warm neither
                kit.measure(figures, request, recorder, body, row)
                await kit.alone(figures, request, recorder)
        tenant = actor.tenant
        for number, raw in enumerate(corpus.fetch_bodies):
            request = parse_retrieve(raw)
            body, _, _, _ = await one_call(context, governed, actor, request)
            if number >= warmup:
                figures.s("exact").add(body["sources"]["exact"]["ms"], floors.exact_lookup(kit.sql, tenant, request.fetch or []))
        return figures
    finally:
        if kit is not None:
            kit.close()
        await context.policy.aclose()
        close_store(context.store)


# ---------------------------------------------------------------- memory


def rss_kib(pid: int) -> tuple[int, int]:
    """(the serving process's VmRSS, the sum over its child processes: the policy workers), in KiB."""
    import psutil

    process = psutil.Process(pid)
    children = sum(child.memory_info().rss for child in process.children(recursive=True)) // 1024
    return process.memory_info().rss // 1024, children


def measure_memory(label: str, data_dir: Path, items: int, key: str, body: dict[str, Any]) -> dict[str, Any]:
    """`gateway serve` on the store, its vector index warm (HNSW graph built where one is), then 20
    retrieves, then its RSS."""
    server = Server(data_dir, free_port(), env={"GATEWAY_BACKGROUND_EMBEDDING": "false"}, label="layers-memory")
    server.start()
    try:
        server.wait_ready()
        headers = {"Authorization": f"Bearer {key}"}
        deadline = time.monotonic() + GRAPH_WAIT_S
        with httpx.Client(base_url=server.url, headers=headers, timeout=60) as client:
            while True:
                answer = client.post("/v1/retrieve", json=body)
                if answer.status_code != 200:
                    raise SystemExit(f"memory step {label}: HTTP {answer.status_code}: {answer.text[:300]}")
                detail = (answer.json()["sources"].get("semantic") or {}).get("detail") or ""
                if items < 2000 or "approximate" in detail or time.monotonic() > deadline:
                    break
                time.sleep(1)
            for _ in range(20):
                client.post("/v1/retrieve", json=body)
        time.sleep(1)
        own, children = rss_kib(server.pid)
        return {
            "label": label,
            "items": items,
            "rss_mib": own / 1024,
            "policy_workers_mib": children / 1024,
            "strategy": "approximate" if "approximate" in detail else "exact",
        }
    finally:
        server.stop()


def empty_store(data_dir: Path, tenant: str, principal: str, groups: list[str]) -> str:
    engine = open_store(f"sqlite:///{(data_dir / 'gateway.db').resolve()}")
    try:
        return create_api_key(
            engine, tenant=tenant, principal=principal, roles=["agent"], groups=groups, clearance="confidential"
        )
    finally:
        engine.dispose()


def memory_steps(args: argparse.Namespace, corpora: list[Corpus], scratch: Path) -> list[dict[str, Any]]:
    import retrieve_bench

    agent = retrieve_bench.AGENT
    body = {"task": retrieve_bench.TASK, "query": "pricing discount renewal", "depth": "standard"}
    steps = []
    empty = scratch / "empty"
    empty.mkdir(parents=True, exist_ok=True)
    key = empty_store(empty, str(agent["tenant"]), str(agent["principal"]), list(agent["groups"]))
    steps.append(measure_memory("empty store", empty, 0, key, body))
    print(f"  RSS {steps[-1]['rss_mib']:.0f} MiB at 0 items", flush=True)
    small = scratch / "synthetic-small"
    small.mkdir(parents=True, exist_ok=True)
    model, dims = model_and_dims()
    small_corpus = synthetic_corpus(small, args.memory_step, 1, model, dims)
    for corpus in [small_corpus, *corpora]:
        probe = body if corpus.synthetic else corpus.bodies[0]
        label = f"{corpus.name} {corpus.items:,}"
        steps.append(measure_memory(label, corpus.data_dir, corpus.items, corpus.key, probe))
        print(f"  RSS {steps[-1]['rss_mib']:.0f} MiB at {label}", flush=True)
    return steps


def model_and_dims() -> tuple[str, int]:
    """The default embedder's model id (the synthetic store's vectors are stored under it)."""
    from gateway.writes.integer_model import model_id

    return model_id(), 384


# ---------------------------------------------------------------- reporting


def summary(figures: Figures) -> dict[str, Any]:
    rows = []
    for key, name, floor_is in LAYERS + tuple((k, k, "") for k in EXTRA):
        series = figures.series.get(key, Series())
        layer = {"mean": mean(series.layer), "p50": median(series.layer)} if series.layer else None
        floor = {"mean": mean(series.floor), "p50": median(series.floor)} if series.floor else None
        ratio = layer["mean"] / floor["mean"] if layer and floor and floor["mean"] > 0 else None
        rows.append(
            {
                "key": key,
                "layer": name,
                "layer_ms": layer,
                "floor_ms": floor,
                "ratio": ratio,
                "floor_is": floor_is,
                "met": None if ratio is None else ratio <= TARGET_RATIO,
            }
        )
    for key in ("vector_numpy", "vector_hnsw"):
        both = figures.series.get(key)
        if both and both.floor:
            rows.append(
                {
                    "key": key,
                    "layer": key,
                    "layer_ms": None,
                    "floor_ms": {"mean": mean(both.floor), "p50": median(both.floor)},
                    "ratio": None,
                    "floor_is": "both vector floors, whatever the layer used",
                    "met": None,
                }
            )
    g, u = figures.governed, figures.ungoverned
    return {
        "corpus": figures.corpus.name,
        "items": figures.corpus.items,
        "queries": len(g),
        "layers": rows,
        "governance": {
            "governed_ms": {"mean": mean(g), "p50": median(g)},
            "ungoverned_ms": {"mean": mean(u), "p50": median(u)},
            "ratio_mean": mean(g) / mean(u),
            "ratio_p50": median(g) / median(u),
            "met": mean(g) / mean(u) <= TARGET_GOVERNANCE,
        },
        "vector_strategy": figures.strategies,
        "verified_candidates_mean": mean(figures.candidates) if figures.candidates else 0,
        "audit_row_bytes_mean": mean(figures.audit_row_bytes) if figures.audit_row_bytes else 0,
        "graph_ran": figures.graph_ran,
    }


def print_table(result: dict[str, Any]) -> None:
    print(
        f"\n=== {result['corpus']}: {result['items']:,} items, {result['queries']} queries, standard depth; "
        f"vector search {result['vector_strategy']}; {result['verified_candidates_mean']:.0f} candidates verified on average ==="
    )
    print(f"{'layer':<22}{'layer ms mean/p50':>20}{'floor ms mean/p50':>20}{'ratio':>8}  floor")
    for row in result["layers"]:
        layer, floor = row["layer_ms"], row["floor_ms"]
        if layer is None and floor is None:
            note = "did not run" if row["key"] == "graph" else "-"
            print(f"{row['layer']:<22}{note:>20}")
            continue
        left = f"{layer['mean']:.2f} / {layer['p50']:.2f}" if layer else "-"
        right = f"{floor['mean']:.3f} / {floor['p50']:.3f}" if floor else "-"
        ratio = f"{row['ratio']:.1f}x" if row["ratio"] is not None else ""
        flag = "" if row["met"] is None else ("  " if row["met"] else " !")
        print(f"{row['layer']:<22}{left:>20}{right:>20}{ratio:>8}{flag} {row['floor_is']}")
    gov = result["governance"]
    print(
        f"governance: governed {gov['governed_ms']['mean']:.2f} ms / ungoverned {gov['ungoverned_ms']['mean']:.2f} ms "
        f"= {gov['ratio_mean']:.2f} (p50 {gov['governed_ms']['p50']:.2f} / {gov['ungoverned_ms']['p50']:.2f} = {gov['ratio_p50']:.2f}); "
        f"target <= {TARGET_GOVERNANCE} -> {'MET' if gov['met'] else 'MISSED'}"
    )
    missed = [r["layer"] for r in result["layers"] if r["met"] is False]
    print(f"layers within {TARGET_RATIO:.0f}x of their floor: {'all' if not missed else 'not ' + ', '.join(missed)}")


def print_memory(steps: list[dict[str, Any]]) -> dict[str, Any]:
    print("\n=== memory: `gateway serve`, vector index warm, after 20 retrieves ===")
    for step in steps:
        print(
            f"  {step['label']:<22} {step['items']:>8,} items  RSS {step['rss_mib']:7.0f} MiB  "
            f"(+ policy workers {step['policy_workers_mib']:.0f} MiB)  vector search {step['strategy']}"
        )
    synthetic = [s for s in steps if s["label"].startswith("synthetic")]
    growth: dict[str, Any] = {}
    if len(synthetic) >= 2 and synthetic[-1]["items"] > synthetic[0]["items"]:
        low, high = synthetic[0], synthetic[-1]
        growth["per_100k_mib"] = (high["rss_mib"] - low["rss_mib"]) / (high["items"] - low["items"]) * 100_000
        print(f"  growth per 100k items (synthetic {low['items']:,} -> {high['items']:,}): {growth['per_100k_mib']:.0f} MiB")
    if synthetic and steps[0]["items"] == 0:
        growth["zero_to_largest_mib"] = synthetic[-1]["rss_mib"] - steps[0]["rss_mib"]
    return growth


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-set", type=Path, help="the SciFact directory (BEIR layout); read where it lies, never copied")
    parser.add_argument("--store", type=Path, help="SciFact store dir, kept and reused (default: a temp dir, removed)")
    parser.add_argument(
        "--synthetic-store", type=Path, help="synthetic store dir, kept and reused (default: a temp dir, removed)"
    )
    parser.add_argument("--items", type=int, default=100_000, help="synthetic items (default 100000)")
    parser.add_argument("--queries", type=int, default=200, help="queries per corpus, warm-up included (default 200)")
    parser.add_argument("--warmup", type=int, default=20, help="first queries not counted (default 20)")
    parser.add_argument(
        "--memory-step", type=int, default=5000, help="the small synthetic store of the memory figures (default 5000)"
    )
    parser.add_argument(
        "--skip", choices=("scifact", "synthetic", "memory"), action="append", default=[], help="leave a part out"
    )
    parser.add_argument("--json", type=Path, help="also write every figure as JSON to this file ('-' for stdout)")
    args = parser.parse_args(argv)
    if args.items < 1 or args.queries < 1 or args.warmup < 0 or args.memory_step < 1:
        parser.error("--items, --queries and --memory-step must be positive, --warmup not negative")
    if args.warmup >= args.queries:
        parser.error("--warmup must be smaller than --queries")
    if "scifact" not in args.skip and args.data_set is None:
        parser.error("--data-set is required (or --skip scifact)")
    if args.data_set is not None and not (args.data_set / "corpus.jsonl").is_file():
        parser.error(f"--data-set: {args.data_set / 'corpus.jsonl'} is missing (expected the BEIR layout)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally blocks stop servers and engines
    scratch = Path(tempfile.mkdtemp(prefix="gateway-layers-"))
    stores = {"scifact": args.store or scratch / "scifact", "synthetic": args.synthetic_store or scratch / "synthetic"}
    for store in stores.values():
        store.mkdir(parents=True, exist_ok=True)
    try:
        model, dims = model_and_dims()
        corpora = []
        if "scifact" not in args.skip:
            corpora.append(scifact_corpus(args.data_set, stores["scifact"], args.queries))
        if "synthetic" not in args.skip:
            print(f"Synthetic store: {args.items:,} items in {stores['synthetic']}", flush=True)
            corpora.append(synthetic_corpus(stores["synthetic"], args.items, args.queries, model, dims))
        results = []
        for corpus in corpora:
            result = summary(asyncio.run(measure_corpus(corpus, args.warmup)))
            print_table(result)
            results.append(result)
        memory: dict[str, Any] = {}
        if "memory" not in args.skip:
            print("\nMemory: a real `gateway serve` per store...", flush=True)
            steps = memory_steps(args, corpora, scratch)
            memory = {"steps": steps, **print_memory(steps)}
        report: dict[str, Any] = {
            "code": code_revision(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
            "corpora": results,
            "memory": memory,
        }
        print(f"\ncode {report['code']}, {report['cpus']} CPUs, load average at the end {report['load_average'][0]:.2f}")
        if args.json:
            rendered = json.dumps(report, indent=2)
            if str(args.json) == "-":
                print(rendered)
            else:
                args.json.write_text(rendered)
                print(f"figures written to {args.json}")
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
