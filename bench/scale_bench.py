"""A retrieve's cost as the corpus grows (issue 57): one store grown 1k -> 10k -> 100k -> 1M items.

The corpus is public text we did not shape: SciFact's 5,183 abstracts and their tagged copies (a copy
is a new id with a `copyN` tag), each with its vector supplied at load (`vector` + `vector_model`):
the abstract's own bge-small vector, computed once per run folder and cached, with a little noise
per copy so no two vectors are equal. Every item is readable by one of 1,000 groups (`group:sN`,
N = position mod 1,000) and one of two (`group:hN`, N = position mod 2), so three callers of one
tenant see a fixed share of it whatever its size:

- `0.1%`: groups `s0`;  `1%`: groups `s0`..`s9`;  `50%`: group `h0`.

At each size the store is grown with `gateway ingest FILE.ndjson` (the rows past the last size) and
copied (`--work`/`sizes/N`, up to 100,000). Then every size is served at once (`gateway serve` per
size, one worker each, background work off; each waits until its Tantivy index and HNSW graph are
built before the clock starts) and the callers ask the same SciFact claims as the dullest call there
is: a standard-depth `scout` retrieve with every source on (exact, graph, lexical, semantic), one
client, each retrieve followed by a `/healthz` of the same server, **interleaved**: for each claim,
each size's callers in turn, so a busy minute on this shared machine falls on every size alike.
Reported per size and caller: p50 and p95 of the retrieve, its p50 against `/healthz`'s p50 in the
same run, the p50 of each stage from the answers' own `timings`, the semantic plan the answers name,
and the server's peak RSS and start-up time (process start to `/readyz` 200, measured alone). Then,
in this process on each size's store, each caller's recall@10: semantic search's plan against exact
search over every permitted vector, lexical search's top 10 against its ranking of every match. The
last table is each caller's p50 at each size against its p50 at the first size: the issue's target
is at most 2x at 1M.

    .venv/bin/python bench/scale_bench.py --sizes 1000,10000,100000           # ~15 min on 2 cores
    .venv/bin/python bench/scale_bench.py --sizes 1000,10000,100000,1000000   # ~1.5 h, ~10 GB in --work
    .venv/bin/python bench/scale_bench.py --sizes 1000,10000 --queries 30     # quick

    .venv/bin/python bench/scale_bench.py --postgres --sizes 1000,10000,100000            # PostgreSQL + pgvector
    .venv/bin/python bench/scale_bench.py --postgres --sizes 1000,10000,100000,1000000    # loaded once; --reuse skips it

`--work` keeps the vectors' cache, the store and a copy of it at each size up to 100,000
(`sizes/N`); `--reuse` starts from a store a previous run grew (its sizes already loaded are not
loaded again) and measures a smaller size on its copy, so every size's figure comes from the same
run.

`--postgres` runs one embedded PostgreSQL with pgvector (tests/embedded_pg.py) whose data directory
is `--work`/postgres, kept after the run, and gives each size a database of its own (`scale_N`),
loaded once with the corpus's first N items, written in the same slices as SQLite's store is grown
(the same rows, the same vectors). A database is loaded by `gateway ingest` alone, as two processes
on the file's two halves from PARALLEL_FROM items (disjoint ids; concurrent writers are a supported
setup on PostgreSQL: a batch commits whole, `item_change` numbers rows by its sequence and the Tantivy
catch-up reads it up to the transaction horizon, a supplied vector goes in with its item), about
twice the rate of one process here. Its pgvector mirror and HNSW index are then made by the step
`gateway serve` runs at start (`connectors.sql.pgvector.prepare`: the vectors copied into the mirror,
the graph built, with `maintenance_work_mem` BUILD_MEMORY so a million vectors' graph is built in
memory), and the database is vacuumed and analyzed, as autovacuum would leave it; then
`store-postgres/N/scale-bench.json` marks it loaded, so `--reuse` serves it as it is. The sizes are
then served together and measured interleaved as on SQLite, and recall is checked on each database.
`--plot FILE.svg` draws each caller's p50 against items (log scale).

`--postgres --pgvector-index ivfflat` serves and checks each size with pgvector's IVFFlat index
(GATEWAY_PGVECTOR_INDEX=ivfflat) instead of HNSW, on a copy of its database (`scale_N_ivfflat`,
CREATE DATABASE ... TEMPLATE scale_N, as large again on disk) whose index `prepare` swaps, timed;
`scale_N` keeps its HNSW index, so the two are compared on the same rows (bench/pgvector_index_bench.py
times the two plans alternating). With `--reuse` or `--recall-only` a copy already made is used as it is.

    .venv/bin/python bench/scale_bench.py --postgres --sizes 100000,1000000 --reuse --recall-only --pgvector-index ivfflat
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Server, clean_env, code_revision, create_key, free_port, gateway_executable, percentile, scifact  # noqa: E402

from core.constraints import ItemFilter  # noqa: E402
from core.records import RecallQuery  # noqa: E402

TENANT = "bench"
TASK = {"type": "account_followup", "scope": "sales"}
CALLERS = {"0.1%": "sales,s0", "1%": "sales," + ",".join(f"s{n}" for n in range(10)), "50%": "sales,h0"}
SERVICE_LIMIT = 50  # a retrieve's default `limit` (api/retrieve.py): what each source is asked for
NOISE = 0.02  # the copies' vectors: the abstract's, nudged (cosine ~0.98 with it)
WARMUP = 10
KEEP_COPIES_UP_TO = 100_000  # sizes whose store is copied (sizes/N) so a later --reuse run measures them again
PARALLEL_FROM = 10_000  # PostgreSQL: a database this large is loaded by two `gateway ingest` processes at once
BUILD_MEMORY = "4GB"  # PostgreSQL: maintenance_work_mem for the HNSW build (a million vectors' graph fits)
STAGES = (
    "decide_ms",
    "embed_ms",
    "graph_ms",
    "sections_ms",
    "lexical_ms",
    "semantic_ms",
    "recall_ms",
    "verify_ms",
    "fuse_ms",
    "mask_ms",
    "total_ms",
)


def abstract_vectors(work: Path, docs: list[dict[str, Any]]) -> tuple[npt.NDArray[np.float32], str]:
    """Each abstract's bge-small vector as the service would embed it (cached in `work`), and the model id."""
    from gateway.settings import load_settings
    from gateway.writes.embeddings import embed_many, load_embedder
    from gateway.writes.vectorize import _passage

    settings = load_settings({"data_dir": work / "model-probe"}, environ={})
    embedder, why = load_embedder(settings, threads=os.cpu_count() or 1, bulk=True)
    if embedder is None:
        raise SystemExit(f"no embedding model: {why}")
    cache = work / f"vectors-{embedder.model_id.replace('/', '_')}-{len(docs)}.npy"
    if cache.exists():
        return np.load(cache), embedder.model_id
    print(f"embedding {len(docs):,} abstracts once with {embedder.model_id} (cached in {cache})...", flush=True)
    started = time.perf_counter()
    vectors = embed_many(embedder, [_passage(str(d["text"]), str(d["section"])) for d in docs], 32)
    print(f"  {len(docs) / (time.perf_counter() - started):.1f} items/s", flush=True)
    np.save(cache, vectors)
    return vectors, embedder.model_id


def write_slice(
    path: Path, docs: list[dict[str, Any]], vectors: npt.NDArray[np.float32], model: str, start: int, stop: int
) -> None:
    """Items `start`..`stop` of the grown corpus as NDJSON, each with its vector."""
    rng = np.random.default_rng(start)
    with path.open("w", encoding="utf-8") as out:
        for i in range(start, stop):
            doc, copy = docs[i % len(docs)], i // len(docs)
            vector = vectors[i % len(docs)]
            if copy:
                vector = vector + rng.standard_normal(len(vector)).astype(np.float32) * NOISE / np.sqrt(len(vector)) * 7
                vector = vector / np.linalg.norm(vector)
            item = {
                **doc,
                "id": f"{doc['id']}_{copy}",
                "tags": [f"copy{copy}"],
                "acl": [f"group:s{i % 1000}", f"group:h{i % 2}"],
                "vector": [round(float(x), 5) for x in vector],
                "vector_model": model,
            }
            out.write(json.dumps(item, ensure_ascii=False) + "\n")


@dataclass(frozen=True)
class Store:
    """Where the corpus lives: a data folder (keys, logs; the SQLite file unless `url` is set)."""

    folder: Path
    url: str | None = None  # a PostgreSQL database URL
    pgvector_index: str = "hnsw"  # PostgreSQL: the vector index its database holds (GATEWAY_PGVECTOR_INDEX)

    @property
    def env(self) -> dict[str, str]:
        if not self.url:
            return {}  # Tantivy ranks lexical search on either store
        return {"GATEWAY_DATABASE_URL": self.url, "GATEWAY_PGVECTOR_INDEX": self.pgvector_index}


def grow(store: Store, paths: list[Path]) -> float:
    """`gateway ingest` of each file, one process a file, all at once; seconds until the last ends.
    Each process's output is in `store.folder` (ingest-N.log: its progress lines, then its report)."""
    started = time.perf_counter()
    running: list[tuple[subprocess.Popen[bytes], Path]] = []
    for n, path in enumerate(paths):
        log = store.folder / f"ingest-{n}.log"
        with log.open("wb") as out:
            command = [gateway_executable(), "ingest", "--data", str(store.folder), "--tenant", TENANT, str(path)]
            env = clean_env({"GATEWAY_PII_BACKGROUND": "false", **store.env})
            running.append((subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env), log))
    for process, log in running:
        if process.wait() != 0:
            raise SystemExit(f"gateway ingest failed ({process.returncode}): {log.read_text()[-800:]}")
    return time.perf_counter() - started


def split(path: Path, parts: int) -> list[Path]:
    """`path`'s lines cut into `parts` files of consecutive lines (about as many in each); `path` removed."""
    if parts <= 1:
        return [path]
    with path.open("rb") as file:
        lines = sum(1 for _ in file)
    out = [path.with_suffix(f".{n}.ndjson") for n in range(parts)]
    with path.open("rb") as file:
        for n, part in enumerate(out):
            with part.open("wb") as write:
                for _ in range(-(-lines // parts) if n < parts - 1 else lines):
                    if not (line := file.readline()):
                        break
                    write.write(line)
    path.unlink()
    return out


def timed(
    client: httpx.Client, method: str, path: str, key: str | None, body: dict[str, Any] | None
) -> tuple[float, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    started = time.perf_counter()
    response = client.request(method, path, json=body, headers=headers)
    ms = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise SystemExit(f"{method} {path}: HTTP {response.status_code} {response.text[:300]}")
    return ms, response.json()


def request(claim: str) -> dict[str, Any]:
    return {
        "task": TASK,
        "query": claim,
        "mode": "scout",
        "sources": {"exact": True, "graph": True, "lexical": True, "semantic": True},
    }


def rotated(things: list[Any], turn: int) -> list[Any]:
    """`things` starting at `turn` (mod their count): each goes first as often as the others (the
    first call after another server ran pays for a colder cache)."""
    turn %= max(len(things), 1)
    return things[turn:] + things[:turn]


@dataclass
class Served:
    """One size's server, its callers' keys, and what its start cost."""

    size: int
    server: Server
    keys: dict[str, str]
    start_s: float
    indexed_s: float


def measure(sized: list[Served], claims: list[str], warmups: list[str]) -> dict[int, dict[str, dict[str, Any]]]:
    """Every size's callers asked the same claims, interleaved: for each claim, each size's callers
    in turn (each retrieve followed by a `/healthz` of the same server), so a busy minute on this
    shared machine falls on every size alike and the ratios between sizes hold. The warm-up claims
    are others than the measured ones: a measured claim's query embedding is never already cached."""
    samples: dict[tuple[int, str], dict[str, Any]] = {}
    clients = {s.size: httpx.Client(base_url=s.server.url, timeout=120) for s in sized}
    try:
        for s in sized:
            for key in s.keys.values():
                for claim in warmups:
                    timed(clients[s.size], "POST", "/v1/retrieve", key, request(claim))
        for s in sized:
            for caller in s.keys:
                samples[s.size, caller] = {
                    "retrieve": [],
                    "healthz": [],
                    "plans": Counter[str](),
                    "returned": [],
                    "stages": {stage: [] for stage in STAGES},
                }
        for turn, claim in enumerate(claims):
            for s in rotated(sized, turn):
                client = clients[s.size]
                for caller, key in rotated(list(s.keys.items()), turn):
                    sample = samples[s.size, caller]
                    ms, answer = timed(client, "POST", "/v1/retrieve", key, request(claim))
                    sample["retrieve"].append(ms)
                    sample["healthz"].append(timed(client, "GET", "/healthz", None, None)[0])
                    for stage in STAGES:
                        if isinstance(answer.get("timings", {}).get(stage), (int, float)):
                            sample["stages"][stage].append(float(answer["timings"][stage]))
                    semantic = answer.get("sources", {}).get("semantic", {})
                    sample["plans"][str(semantic.get("detail") or semantic.get("status")).split(";")[0]] += 1
                    sample["returned"].append(len(answer.get("items", [])))
    finally:
        for client in clients.values():
            client.close()
    out: dict[int, dict[str, dict[str, Any]]] = {}
    for (size, caller), sample in samples.items():
        out.setdefault(size, {})[caller] = {
            "p50": percentile(sample["retrieve"], 50),
            "p95": percentile(sample["retrieve"], 95),
            "healthz": percentile(sample["healthz"], 50),
            "stages": {stage: percentile(values, 50) for stage, values in sample["stages"].items() if values},
            "plans": dict(sample["plans"]),
            "returned": percentile(sample["returned"], 50),
        }
    return out


def serve(size: int, store: Store) -> Served:
    """`store` served, with a fresh key per caller made in it (a copy holds only the keys of the run
    that made it), once its indexes are built: seconds to `/readyz` 200, and until `/readyz` says
    the tenant's Tantivy index is ready and no HNSW graph is building. `/healthz` answers throughout."""
    keys = callers(store)
    env = {"GATEWAY_PII_BACKGROUND": "false", "GATEWAY_BACKGROUND_EMBEDDING": "false", **store.env}
    server = Server(store.folder, free_port(), env=env, label="scale")
    started = time.perf_counter()
    server.start()
    server.wait_ready()
    ready = time.perf_counter() - started
    while True:
        body = httpx.get(f"{server.url}/readyz", timeout=10).json()
        lexical, semantic = body.get("lexical", {}), body.get("semantic", {})
        built = lexical.get("engine") != "tantivy" or (
            lexical.get("tenants_ready", 0) >= 1 and not lexical.get("tenants_building")
        )
        if built and not semantic.get("graphs_building") and httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200:
            return Served(size, server, keys, ready, time.perf_counter() - started)
        time.sleep(0.5)


def finish(one: Served, figures: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One size's record: its callers' figures, its start, and its server's peak RSS (read before it stops)."""
    peak = one.server.memory_kib().get("VmHWM", 0) / 1024
    return {"callers": figures, "start_s": one.start_s, "indexed_s": one.indexed_s, "peak_mib": peak}


@contextlib.contextmanager
def backend(postgres: bool, work: Path) -> Iterator[Callable[[str], str] | None]:
    """None (SQLite in the store folder), or an embedded PostgreSQL whose data directory is
    `work`/postgres (kept after the run, stopped cleanly): a function giving a database's URL."""
    if not postgres:
        yield None
        return
    from tests.embedded_pg import Server as Postgres

    server = Postgres(work / "postgres")
    try:
        yield server.database_url  # the superuser's: pgvector may be created in any database
    finally:
        server.stop()


def kept(conn: Any, name: str, marker: Path, size: int) -> bool:
    """Whether database `name` exists and its marker says a run loaded it with `size` items."""
    from sqlalchemy import text

    exists = conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).first() is not None
    return exists and marker.exists() and json.loads(marker.read_text())["items"] == size


def load_postgres(
    database: Callable[[str], str],
    work: Path,
    size: int,
    sizes: list[int],
    reuse: bool,
    corpus: Callable[[Path, int, int], None],
    dims: int,
    may_load: bool = True,
) -> Store:
    """Size `size`'s own database (`scale_N`) on the embedded server, loaded with the corpus's first
    `size` items as SQLite's store is grown (the same slices, so the same rows and vectors), by
    `gateway ingest` (two processes on its two halves from PARALLEL_FROM items), its pgvector mirror
    and HNSW index then made by the service's own start-up step (`prepare`, given
    `maintenance_work_mem` to build the graph in memory) and the tables vacuumed and analyzed, as
    autovacuum would leave them. With `reuse`, a database whose marker (`store-postgres/N/
    scale-bench.json`) says it was loaded is served as it is."""
    from sqlalchemy import create_engine, text

    from connectors.sql.pgvector import prepare
    from core.store import open_store

    name, folder = f"scale_{size}", work / "store-postgres" / str(size)
    url, marker = database(name), folder / "scale-bench.json"
    admin = create_engine(database("postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            if reuse and kept(conn, name, marker, size):
                print(f"\n{size:,} items: loaded by a previous run (database {name})", flush=True)
                return Store(folder, url)
            if not may_load:
                raise SystemExit(f"--recall-only: database {name} is not loaded (run the bench once with --work {work})")
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            conn.execute(text(f"CREATE DATABASE {name}"))
    finally:
        admin.dispose()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    store = Store(folder, url)
    subprocess.run([gateway_executable(), "migrate", "--database-url", url], check=True, env=clean_env(), capture_output=True)
    part = work / f"slice-{size}.ndjson"
    with part.open("wb") as out:  # SQLite's slices: each seeds its vectors' noise with its start
        for start, stop in zip((0, *sizes), sizes):
            if start < size:
                corpus(part.with_suffix(".slice"), start, min(stop, size))
                with part.with_suffix(".slice").open("rb") as slice_:
                    shutil.copyfileobj(slice_, out)
        part.with_suffix(".slice").unlink()
    parts = split(part, 2 if size >= PARALLEL_FROM else 1)
    seconds = grow(store, parts)
    for path in parts:
        path.unlink()
    print(
        f"\n{size:,} items: loaded into database {name} in {seconds:.0f} s ({size / seconds:,.0f} items/s, "
        f"{len(parts)} gateway ingest process{'es' if len(parts) > 1 else ''})",
        flush=True,
    )
    started = time.perf_counter()
    engine = open_store(f"{url}?options=-cmaintenance_work_mem%3D{BUILD_MEMORY}")
    reason = prepare(engine, dims)
    engine.dispose()
    if reason is not None:
        raise SystemExit(f"pgvector: {reason}")
    vacuum = create_engine(url, isolation_level="AUTOCOMMIT")
    with vacuum.connect() as conn:
        conn.execute(text("VACUUM (ANALYZE)"))
    vacuum.dispose()
    print(f"  pgvector mirror and HNSW index built, tables vacuumed: {time.perf_counter() - started:.0f} s", flush=True)
    marker.write_text(json.dumps({"items": size, "database": name}))
    return store


def ivfflat_copy(database: Callable[[str], str], work: Path, size: int, dims: int, reuse: bool) -> Store:
    """Size `size`'s database with an IVFFlat index instead of HNSW (`scale_N_ivfflat`): a copy of
    `scale_N` (CREATE DATABASE ... TEMPLATE, the files copied; HNSW's stays as it was), its index
    then swapped by the service's own start-up step (`prepare` with index `ivfflat`, lists from the
    rows, `maintenance_work_mem` BUILD_MEMORY: k-means over a million rows' sample needs ~3.4 GB),
    timed. With `reuse`, a copy whose marker says it was made is served as it is."""
    from sqlalchemy import create_engine, text

    from connectors.sql.pgvector import lists_for, prepare
    from core.store import open_store

    name, folder = f"scale_{size}_ivfflat", work / "store-postgres" / f"{size}-ivfflat"
    url, marker = database(name), folder / "scale-bench.json"
    admin = create_engine(database("postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            if reuse and kept(conn, name, marker, size):
                print(f"\n{size:,} items: IVFFlat copy made by a previous run (database {name})", flush=True)
                return Store(folder, url, "ivfflat")
            started = time.perf_counter()
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            conn.execute(text(f"CREATE DATABASE {name} TEMPLATE scale_{size} STRATEGY FILE_COPY"))
            print(
                f"\n{size:,} items: database {name} copied from scale_{size} in {time.perf_counter() - started:.0f} s", flush=True
            )
    finally:
        admin.dispose()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    engine = open_store(f"{url}?options=-cmaintenance_work_mem%3D{BUILD_MEMORY}")
    with engine.connect() as conn:
        rows = int(conn.execute(text("SELECT count(*) FROM item_pgvector")).scalar() or 0)
    started = time.perf_counter()
    reason = prepare(engine, dims, "ivfflat")
    built = time.perf_counter() - started
    engine.dispose()
    if reason is not None:
        raise SystemExit(f"pgvector: {reason}")
    print(f"  IVFFlat index built ({lists_for(rows):,} lists for {rows:,} rows), HNSW's dropped: {built:.0f} s", flush=True)
    marker.write_text(json.dumps({"items": size, "database": name, "lists": lists_for(rows), "build_s": round(built, 1)}))
    return Store(folder, url, "ivfflat")


def caller_filter(caller: str) -> ItemFilter:
    """What the policy lets `caller` read of the bench's items (documents, any sensitivity the
    corpus holds, active), as the connectors receive it: its groups are the principals."""
    return ItemFilter(
        tenant=TENANT,
        principals=tuple(f"group:{g}" for g in CALLERS[caller].split(",")),
        sensitivities=("public", "internal", "confidential"),
        valid_at=datetime.now(timezone.utc),
        scopes=(),
        kinds=("document",),
        statuses=("active",),
        subjects=(),
    )


# A returned item counts as one of the true 10 when its score is within this of the 10th true score
# (ann-benchmarks' recall: ties and near-ties at the 10th place are interchangeable). The corpus's
# copies make them common: a copy's text is its abstract's (equal BM25 scores), its vector the
# abstract's nudged (cosines within ~0.01 of each other).
SEMANTIC_EPSILON = 1e-3
LEXICAL_EPSILON = 1e-6


@dataclass
class Hits:
    """recall@10 counted two ways: the same items as the exhaustive top 10 (`strict`), and items
    scoring at least the exhaustive 10th's score less epsilon (`within`, ann-benchmarks' way)."""

    same: int = 0
    close: int = 0
    total: int = 0

    def add(self, found: list[tuple[Any, float]], truth: list[tuple[Any, float]], epsilon: float) -> None:
        self.total += len(truth)
        self.same += len({key for key, _ in found} & {key for key, _ in truth})
        if truth:
            threshold = truth[-1][1] - epsilon * max(1.0, abs(truth[-1][1]))
            self.close += min(len(truth), sum(1 for _, score in found if score >= threshold))

    def strict(self) -> float:
        return self.same / max(self.total, 1)

    def within(self) -> float:
        return self.close / max(self.total, 1)


def recall(url: str, claims: list[str], model: str, pgvector_index: str = "hnsw") -> dict[str, dict[str, Any]]:
    """Each caller's top 10 from the engines the service uses against the exhaustive answer over its
    admitted rows, in this process on the same store: semantic search's plan (`auto`) against exact
    search over every permitted vector, and lexical search's top 10 against its ranking of every
    match (Tantivy; or PostgreSQL's own ranking, whose top 10 is exhaustive by construction).
    Mean recall@10 per caller, and the semantic plans `auto` chose."""
    from connectors.sql.lexical import FullTextConnector
    from connectors.sql.pgvector import PgvectorConnector, literal
    from connectors.sql.pushdown import bound
    from connectors.sql.vectors import VectorIndex, permitted_pks
    from core.store import open_store
    from gateway.settings import load_settings
    from gateway.writes.embeddings import load_embedder

    settings = load_settings({"data_dir": Path(tempfile.mkdtemp(prefix="scale-recall-"))}, environ={})
    embedder, why = load_embedder(settings, threads=os.cpu_count() or 1)
    if embedder is None or embedder.model_id != model:
        raise SystemExit(f"recall: the service's model is not available here ({why or embedder and embedder.model_id})")
    queries = [RecallQuery(text=c, vector=tuple(float(x) for x in embedder.embed([c])[0]), model=model, limit=10) for c in claims]
    engine = open_store(url)
    lexical = FullTextConnector(engine, "tantivy")
    assert lexical.text is not None
    lexical.text.build_now_max = 10**9
    with engine.connect() as conn:
        lexical.text.state(conn, TENANT)  # built now, not in the background
    postgres = engine.dialect.name == "postgresql"
    index = None if postgres else VectorIndex(engine, model, len(queries[0].vector or ()), admitted=lexical.admitted)
    pgvector = PgvectorConnector(engine, model, len(queries[0].vector or ()), index=pgvector_index) if postgres else None
    if index is not None:
        with engine.connect() as conn:
            index.tenant(conn, TENANT)
        while index.readiness()["graphs_building"]:  # `auto` plans as the served index does: graph built
            time.sleep(0.5)

    permitted: dict[tuple[str, ...], tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]] = {}

    def exhaustive(where: ItemFilter, query: RecallQuery) -> list[tuple[int, float]]:
        """The best 10 of every permitted row's vector, scored here: the permitted rows listed once
        per caller by the pushdown's own statement, their vectors taken from the index's matrix."""
        assert index is not None and query.vector is not None
        caller = where.principals
        if caller not in permitted:
            with engine.connect() as conn:
                vectors = index.tenant(conn, TENANT)
                pks = [int(pk) for (pk,) in conn.execute(permitted_pks(()), {**bound(where), "vector_model": model})]
            rows = np.array([vectors.row_of[pk] for pk in pks if pk in vectors.row_of], dtype=np.int64)
            permitted[caller] = (vectors.pks[rows], vectors.matrix[rows])
        keys, matrix = permitted[caller]
        scores = matrix @ np.asarray(query.vector, dtype=np.float32)
        best = np.argsort(-scores, kind="stable")[:10]
        return [(int(keys[i]), float(scores[i])) for i in best]

    def semantic(where: ItemFilter, query: RecallQuery, exact: bool) -> tuple[list[tuple[Any, float]], str]:
        """The top `query.limit` by exhaustive search (`exact`), or by the plan the service's connector
        chooses, and that plan; keyed by item pk (in-process index) or id (pgvector)."""
        limit = query.limit
        if index is not None:
            if exact:
                return exhaustive(where, query), "exact"
            found, plan = index.nearest(where, query, "auto")
            return [(pk, float(score)) for pk, score in found], plan
        assert pgvector is not None and query.vector is not None
        if not exact:  # the connector's own choice: the admitted rows ranked exactly when few, else the vector index
            candidates, strategy = pgvector._search(where, query)
            return [(c.record.id, c.score) for c in candidates], strategy
        parameters = {**bound(where), "pgv_query": literal(query.vector), "pgv_model": model}
        with engine.connect() as conn, conn.begin():
            pgvector._tune(conn, limit)
            rows = conn.execute(pgvector._statement((), limit, exact=True), parameters).all()
        return sorted(
            ((str(r._mapping["id"]), 1.0 - float(r._mapping["pgv_distance"])) for r in rows), key=lambda f: -f[1]
        ), "exact"

    def lexical_top(where: ItemFilter, query: RecallQuery, limit: int) -> list[tuple[str, float]]:
        found = asyncio.run(lexical.search(where, replace(query, limit=limit)))
        return [(c.record.id, c.score) for c in found.candidates]

    out: dict[str, dict[str, Any]] = {}
    for caller in CALLERS:
        where = caller_filter(caller)
        semantic_hits = {10: Hits(), SERVICE_LIMIT: Hits()}
        lexical_hits = Hits()
        plans: Counter[str] = Counter()
        for query in queries:
            truth = semantic(where, query, exact=True)[0][:10]
            for limit, hits in semantic_hits.items():  # a caller asking for 10, and the service's default limit
                found, plan = semantic(where, replace(query, limit=limit), exact=False)
                hits.add(found[:10], truth, SEMANTIC_EPSILON)
                if limit == SERVICE_LIMIT:
                    plans[plan] += 1
            lexical_hits.add(lexical_top(where, query, 10), lexical_top(where, query, 1000)[:10], LEXICAL_EPSILON)
        out[caller] = {
            "semantic_recall": semantic_hits[SERVICE_LIMIT].strict(),
            "semantic_recall_ties": semantic_hits[SERVICE_LIMIT].within(),
            "semantic_recall_limit_10": semantic_hits[10].strict(),
            "semantic_recall_limit_10_ties": semantic_hits[10].within(),
            "semantic_plans": dict(plans),
            "lexical_recall": lexical_hits.strict(),
            "lexical_recall_ties": lexical_hits.within(),
        }
    engine.dispose()
    return out


def report(size: int, result: dict[str, Any]) -> None:
    figures = result["callers"]
    print(
        f"\n{size:,} items: server start to /readyz {result['start_s']:.1f} s, to its indexes built "
        f"{result['indexed_s']:.1f} s; peak RSS {result['peak_mib']:,.0f} MiB"
    )
    print(f"  {'caller':>6} {'p50 ms':>8} {'p95 ms':>8} {'x healthz':>9}  {'items':>5}  stages p50 ms / semantic plan")
    for caller, f in figures.items():
        stage_text = " ".join(f"{s[:-3]} {v:.1f}" for s, v in f["stages"].items() if s != "total_ms")
        print(
            f"  {caller:>6} {f['p50']:8.1f} {f['p95']:8.1f} {f['p50'] / f['healthz']:8.0f}x  {f['returned']:5.0f}  {stage_text}  {f['plans']}",
            flush=True,
        )


def report_recall(size: int, recalled: dict[str, dict[str, Any]]) -> None:
    print(f"\n{size:,} items: recall@10 against exhaustive search (in this process, the same store)")
    for caller, r in recalled.items():
        print(
            f"  {caller:>6} semantic {r['semantic_recall']:.3f}, ties {r['semantic_recall_ties']:.3f} "
            f"(asking for 10: {r['semantic_recall_limit_10']:.3f}, ties {r['semantic_recall_limit_10_ties']:.3f}; "
            f"plans {r['semantic_plans']}); lexical {r['lexical_recall']:.3f}, ties {r['lexical_recall_ties']:.3f}",
            flush=True,
        )


def callers(store: Store) -> dict[str, str]:
    """A fresh key per caller in `store`."""
    return {
        caller: create_key(store.folder, TENANT, f"user:caller-{n}", "agent", groups=groups, env=store.env)
        for n, (caller, groups) in enumerate(CALLERS.items())
    }


def plot(results: dict[int, dict[str, Any]], path: Path, title: str) -> None:
    """Each caller's p50 (and /healthz's) against items, both axes log scale, as SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(results)
    figure, axes = plt.subplots(figsize=(6.4, 4.0))
    for caller in CALLERS:
        axes.plot(sizes, [results[n]["callers"][caller]["p50"] for n in sizes], marker="o", label=f"caller reading {caller}")
    healthz = [percentile([f["healthz"] for f in results[n]["callers"].values()], 50) for n in sizes]
    axes.plot(sizes, healthz, marker=".", linestyle=":", color="grey", label="/healthz (same run)")
    first = results[sizes[0]]["callers"]
    target = max(first[c]["p50"] for c in CALLERS) * 2
    axes.axhline(target, color="red", linewidth=0.8, linestyle="--", label="2x the slowest p50 at the first size")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("items in the tenant")
    axes.set_ylabel("p50 ms (one client)")
    axes.set_title(title, fontsize=10)
    axes.grid(True, which="both", linewidth=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, format="svg", metadata={"Date": None})
    plt.close(figure)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data-set", type=Path, default=Path("/work/shared/data/scifact"))
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--work", type=Path, default=Path("/tmp/scale-bench"))
    parser.add_argument("--reuse", action="store_true", help="grow the store a previous run left in --work")
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL 17 + pgvector instead of SQLite")
    parser.add_argument(
        "--pgvector-index",
        choices=("hnsw", "ivfflat"),
        default="hnsw",
        help="with --postgres: ivfflat serves and checks each size on a copy of its database with an IVFFlat index (scale_N_ivfflat)",
    )
    parser.add_argument("--plot", type=Path, help="draw p50 against items into this SVG file")
    parser.add_argument(
        "--no-recall", action="store_true", help="skip the recall@10 check (it builds the indexes in this process)"
    )
    parser.add_argument(
        "--recall-only",
        action="store_true",
        help="only the recall@10 check, on the stores (or PostgreSQL databases) --work holds; never loads one",
    )
    args = parser.parse_args()
    if args.plot and importlib.util.find_spec("matplotlib") is None:  # say so now, not after an hour's run
        raise SystemExit("--plot draws with matplotlib, which is not installed: .venv/bin/pip install matplotlib")
    sizes = sorted(int(s) for s in args.sizes.split(","))
    docs, claims = scifact(args.data_set, 10**9)
    warmups, claims = claims[:WARMUP], claims[WARMUP : WARMUP + args.queries]
    args.work.mkdir(parents=True, exist_ok=True)
    vectors, model = abstract_vectors(args.work, docs)
    with backend(args.postgres, args.work) as database:
        print(
            f"scale bench ({'PostgreSQL, ' + args.pgvector_index if database else 'SQLite'}): code {code_revision()}, {os.cpu_count()} cores, "
            f"{len(claims)} claims a caller a size, model {model}",
            flush=True,
        )
        results: dict[int, dict[str, Any]] = {}
        measured: dict[int, Store] = {}  # each size's store (a copy, the grown store, or its database), served together
        if database:

            def corpus(path: Path, start: int, stop: int) -> None:
                write_slice(path, docs, vectors, model, start, stop)

            for size in sizes:
                measured[size] = load_postgres(
                    database,
                    args.work,
                    size,
                    sizes,
                    args.reuse or args.recall_only,
                    corpus,
                    vectors.shape[1],
                    not args.recall_only,
                )
                if args.pgvector_index == "ivfflat":
                    measured[size] = ivfflat_copy(database, args.work, size, vectors.shape[1], args.reuse or args.recall_only)
            if args.recall_only:
                for size, at in measured.items():
                    report_recall(size, recall(at.url or "", claims, model, at.pgvector_index))
                return 0
        else:
            folder = args.work / "store"
            marker = folder / "scale-bench.json"
            # --recall-only reads the stores, never empties them
            loaded = json.loads(marker.read_text())["items"] if (args.reuse or args.recall_only) and marker.exists() else 0
            if args.recall_only and not loaded:
                raise SystemExit(f"--recall-only: no store in {folder} (run the bench once with --work {args.work})")
            if not loaded:
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir(parents=True)
            store = Store(folder)
            if args.recall_only:
                for size in sizes:
                    at = folder if size == loaded else args.work / "sizes" / str(size)
                    report_recall(size, recall(f"sqlite:///{at / 'gateway.db'}", claims, model))
                return 0
            for size in sizes:
                if size > loaded:
                    part = args.work / "slice.ndjson"
                    write_slice(part, docs, vectors, model, loaded, size)
                    seconds = grow(store, [part])
                    part.unlink()
                    print(
                        f"\n{size:,} items: grew by {size - loaded:,} in {seconds:.0f} s ({(size - loaded) / seconds:,.0f} items/s)",
                        flush=True,
                    )
                    loaded = size
                    marker.write_text(json.dumps({"items": loaded}))
                    if size <= KEEP_COPIES_UP_TO:
                        kept = args.work / "sizes" / str(size)
                        shutil.rmtree(kept, ignore_errors=True)
                        shutil.copytree(folder, kept, ignore=shutil.ignore_patterns("*.log", "*.bak"))
            for size in sizes:  # once grown: the store is the largest size, a smaller one its copy
                if size < loaded and not (args.work / "sizes" / str(size)).exists():
                    print(
                        f"\n{size:,} items: the store already holds {loaded:,} and keeps no copy at {size:,}; skipped", flush=True
                    )
                    continue
                measured[size] = store if size == loaded else Store(args.work / "sizes" / str(size))
        print(f"\nserving {', '.join(f'{n:,}' for n in measured)} items together; the callers' claims interleaved", flush=True)
        together: list[Served] = []
        try:
            for size, at in measured.items():
                together.append(serve(size, at))
            figures = measure(together, claims, warmups)
            for one in together:
                results[one.size] = finish(one, figures[one.size])
        finally:
            for one in together:
                one.server.stop()
        for size in measured:
            report(size, results[size])
        for size, at in measured.items():
            if not args.no_recall:
                results[size]["recall"] = recall(
                    at.url or f"sqlite:///{at.folder / 'gateway.db'}", claims, model, at.pgvector_index
                )
                report_recall(size, results[size]["recall"])
    if len(results) > 1:
        first = min(results)
        print(f"\np50 against the p50 at {first:,} items (target at 1,000,000: <= 2x)")
        print(f"  {'items':>9} " + " ".join(f"{c:>7}" for c in CALLERS))
        for size, r in results.items():
            print(
                f"  {size:>9,} "
                + " ".join(f"{r['callers'][c]['p50'] / results[first]['callers'][c]['p50']:6.2f}x" for c in CALLERS)
            )
        if args.plot:
            plot(results, args.plot, f"scale_bench, {'PostgreSQL + pgvector' if args.postgres else 'SQLite (embedded)'}, 2 cores")
            print(f"plot: {args.plot}")
    name = "scale-bench-results-postgres.json" if args.postgres else "scale-bench-results.json"
    if args.postgres and args.pgvector_index == "ivfflat":
        name = "scale-bench-results-postgres-ivfflat.json"
    (args.work / name).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
