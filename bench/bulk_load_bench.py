"""Bulk load: `gateway ingest` and a streamed `PUT /v1/items` against the store's own floor, one run.

The corpus is public text we did not shape: SciFact's 5,183 abstracts (title + abstract, ~1.5 KB),
copied as often as `--items` needs, each copy a new id, tag and ACL group (ten groups), written
once to an NDJSON file in the run's temp folder. Then, each on a fresh store:

- **floor**: the store's own insert-and-index rate for the same rows, the gateway's work left out:
  the rows built before the clock starts, then per 500 rows one transaction of `executemany` into
  `item`, `item_principal` and `item_tag` and (SQLite) one `INSERT ... SELECT` into the tenant's FTS5
  table (PostgreSQL maintains its tsvector column and indexes itself). Only the store's time counts.
- **gateway ingest**: the command a newcomer runs, `gateway ingest --tenant bench FILE.ndjson`, timed
  end to end as a subprocess (start-up, validation, normalisation, hashing, entity links, writes),
  its peak RSS sampled;
- **PUT /v1/items (NDJSON)**: `gateway serve` (background work off, so the figure is the write path's)
  and one client streaming the same file in one request;
- **with vectors** (`--vectors N`, default 20,000): N items each carrying a 384-number vector and
  the index's model id (random unit vectors: what is timed is taking them, not making them), through
  `gateway ingest`, against the same N items without vectors.

Figures are items/s and the ratio to the floor measured in the same run (the machine is shared;
absolute rates drift). `--postgres` runs the same on an embedded PostgreSQL (tests/embedded_pg.py).

    .venv/bin/python bench/bulk_load_bench.py --data-set /work/shared/data/scifact --items 100000
    .venv/bin/python bench/bulk_load_bench.py --data-set /work/shared/data/scifact --items 1000000 --skip-http
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Server, clean_env, create_key, free_port, gateway_executable, scifact, serving  # noqa: E402

TENANT = "bench"
BATCH = 500


def entries(data_set: Path, count: int) -> Iterator[dict[str, Any]]:
    docs, _ = scifact(data_set, 10**9)
    for i in range(count):
        doc = docs[i % len(docs)]
        copy = i // len(docs)
        yield {**doc, "id": f"{doc['id']}_{copy}", "tags": [f"copy{copy}"], "acl": [f"group:g{i % 10}"]}


def write_ndjson(path: Path, items: Iterator[dict[str, Any]]) -> int:
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for item in items:
            out.write(json.dumps(item, ensure_ascii=False) + "\n")
            count += 1
    return count


class PeakRss:
    """The peak RSS of a process tree, sampled every 0.1 s on a thread."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(self.pid)
                self.peak = max(self.peak, sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]))
            time.sleep(0.1)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def floor(database_url: str, path: Path) -> float:
    """Seconds the store itself spends inserting and indexing the file's rows (see the docstring):
    the rows are made into the driver's parameter tuples before the clock starts, and written with
    the driver's own executemany."""
    from core.store import ensure_tenant_index, index_new_items, open_store, writer
    from gateway.writes.item_batch import VALUE_TABLES
    from gateway.writes.items import ItemIn, row_for

    engine = open_store(database_url)
    with writer(engine).begin() as conn:
        ensure_tenant_index(conn, TENANT)
    spent, pk, columns = 0.0, 0, None
    with path.open(encoding="utf-8") as lines:
        while True:
            rows = []
            for line in lines:
                pk += 1
                rows.append({**row_for(ItemIn.model_validate(json.loads(line)), TENANT), "pk": pk})
                if len(rows) == BATCH:
                    break
            if not rows:
                break
            columns = columns or list(rows[0])
            params = [tuple(_driver_value(r[c]) for c in columns) for r in rows]
            marks = ", ".join(["?" if engine.dialect.name == "sqlite" else "%s"] * len(columns))
            item_sql = f"INSERT INTO item ({', '.join(columns)}) VALUES ({marks})"
            values = {table.name: [(r["pk"], v) for r in rows for v in r[field]] for field, table, _ in VALUE_TABLES}
            mark = "?" if engine.dialect.name == "sqlite" else "%s"
            started = time.perf_counter()
            with writer(engine).begin() as conn:
                cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
                cursor.executemany(item_sql, params)
                for field, table, column in VALUE_TABLES:
                    if values[table.name]:
                        cursor.executemany(
                            f"INSERT INTO {table.name} (item_pk, {column}) VALUES ({mark}, {mark})", values[table.name]
                        )
                index_new_items(conn, TENANT, [r["pk"] for r in rows])
            spent += time.perf_counter() - started
    engine.dispose()
    return spent


def _driver_value(value: Any) -> Any:
    """A row value as the driver takes it: JSON columns as JSON text."""
    return json.dumps(value) if isinstance(value, (list, dict)) else value


def cli_ingest(env: dict[str, str], store: list[str], path: Path) -> tuple[float, int, dict[str, Any]]:
    started = time.perf_counter()
    proc = subprocess.Popen(
        [gateway_executable(), "ingest", *store, "--tenant", TENANT, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=clean_env(env),
    )
    rss = PeakRss(proc.pid)
    out, _ = proc.communicate()
    seconds = time.perf_counter() - started
    peak = rss.stop()
    report = json.loads(out.decode().strip().splitlines()[-1])
    return seconds, peak, report


def http_ingest(data_dir: Path, env: dict[str, str], path: Path) -> tuple[float, int, dict[str, Any]]:
    server = Server(
        data_dir, free_port(), env={**env, "GATEWAY_BACKGROUND_EMBEDDING": "false", "GATEWAY_PII_BACKGROUND": "false"}
    )
    with serving(server):
        key = create_key(data_dir, TENANT, "user:loader", "ingest") if not env.get("GATEWAY_DATABASE_URL") else _pg_key(env)
        rss = PeakRss(server.pid)

        def body() -> Iterator[bytes]:
            with path.open("rb") as file:
                while chunk := file.read(1 << 16):
                    yield chunk

        started = time.perf_counter()
        response = httpx.put(
            f"{server.url}/v1/items",
            content=body(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/x-ndjson"},
            timeout=3600,
        )
        seconds = time.perf_counter() - started
        peak = rss.stop()
    if response.status_code != 200:
        raise SystemExit(f"PUT /v1/items: {response.status_code} {response.text[:300]}")
    return seconds, peak, response.json()


def _pg_key(env: dict[str, str]) -> str:
    done = subprocess.run(
        [gateway_executable(), "keys", "create", "--database-url", env["GATEWAY_DATABASE_URL"], "--tenant", TENANT]
        + ["--principal", "user:loader", "--roles", "ingest"],
        capture_output=True,
        text=True,
        env=clean_env(env),
    )
    return next(line.strip() for line in done.stdout.splitlines() if line.strip().startswith("gw_"))


def with_vectors(source: Path, target: Path, count: int, model: str, dims: int) -> None:
    rng = np.random.default_rng(7)
    with source.open(encoding="utf-8") as lines, target.open("w", encoding="utf-8") as out:
        for n, line in enumerate(lines):
            if n == count:
                break
            vector = rng.standard_normal(dims).astype(np.float32)
            vector /= np.linalg.norm(vector)
            item = {**json.loads(line), "vector": [round(float(x), 6) for x in vector], "vector_model": model}
            out.write(json.dumps(item) + "\n")


def head(source: Path, target: Path, count: int) -> None:
    with source.open(encoding="utf-8") as lines, target.open("w", encoding="utf-8") as out:
        for n, line in enumerate(lines):
            if n == count:
                break
            out.write(line)


@contextlib.contextmanager
def stores(postgres: bool) -> Iterator[Any]:
    """A factory of fresh, empty stores: (store flags for the CLI, extra env, database URL, data dir)."""
    if not postgres:

        def sqlite(folder: Path) -> tuple[list[str], dict[str, str], str, Path]:
            folder.mkdir(parents=True, exist_ok=True)
            return ["--data", str(folder)], {}, f"sqlite:///{folder}/gateway.db", folder

        yield sqlite
        return
    from tests.embedded_pg import Server as Postgres
    from tests.embedded_pg import fresh_schema

    server = Postgres()
    opened: list[Iterator[str]] = []

    def pg(folder: Path) -> tuple[list[str], dict[str, str], str, Path]:
        schemas = fresh_schema(server.url)
        url = next(schemas)
        opened.append(schemas)
        subprocess.run([gateway_executable(), "migrate", "--database-url", url], check=True, env=clean_env(), capture_output=True)
        folder.mkdir(parents=True, exist_ok=True)
        return ["--database-url", url], {"GATEWAY_DATABASE_URL": url}, url, folder

    try:
        yield pg
    finally:
        for schemas in opened:
            with contextlib.suppress(StopIteration, Exception):
                next(schemas)
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data-set", type=Path, default=Path("/work/shared/data/scifact"))
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--vectors", type=int, default=20_000, help="items carrying vectors (0: skip)")
    parser.add_argument("--postgres", action="store_true")
    parser.add_argument("--skip-http", action="store_true")
    args = parser.parse_args()
    from gateway.writes.embeddings import OnnxBgeSmall

    backend = "PostgreSQL" if args.postgres else "SQLite"
    with tempfile.TemporaryDirectory(prefix="bulk-load-") as tmp, stores(args.postgres) as fresh:
        root = Path(tmp)
        corpus = root / "corpus.ndjson"
        count = write_ndjson(corpus, entries(args.data_set, args.items))
        size_mb = corpus.stat().st_size / 1e6
        print(f"{backend}: {count:,} items, {size_mb:,.0f} MB of NDJSON, {os.cpu_count()} cores")
        _, _, url, _ = fresh(root / "floor")
        floor_s = floor(url, corpus)
        floor_rate = count / floor_s
        print(f"  floor (store's insert + index, its time only)  {floor_rate:9,.0f} items/s  ({floor_s:.1f} s)")
        flags, env, _, _ = fresh(root / "cli")
        seconds, peak, report = cli_ingest(env, flags, corpus)
        cli_s = seconds
        assert report["created"] == count and not report["rejected"], report
        print(
            f"  gateway ingest FILE.ndjson (end to end)         {count / seconds:9,.0f} items/s  "
            f"{count / seconds / floor_rate:5.2f}x floor  ({seconds:.1f} s, peak RSS {peak / 2**20:,.0f} MiB)"
        )
        if not args.skip_http:
            _, env, _, folder = fresh(root / "http")
            seconds, peak, report = http_ingest(folder, env, corpus)
            assert report["created"] == count and not report["rejected"], report
            print(
                f"  PUT /v1/items, NDJSON streamed (one request)   {count / seconds:9,.0f} items/s  "
                f"{count / seconds / floor_rate:5.2f}x floor  ({seconds:.1f} s, server peak RSS {peak / 2**20:,.0f} MiB)"
            )
        if args.vectors:
            n = min(args.vectors, count)
            plain, vectored = root / "plain.ndjson", root / "vectors.ndjson"
            with_vectors(corpus, vectored, n, OnnxBgeSmall.MODEL_ID, OnnxBgeSmall.dims)
            if n == count:  # the whole corpus: its text-only load above is the comparison
                plain_s = cli_s
            else:
                head(corpus, plain, n)
                flags, env, _, _ = fresh(root / "plain")
                plain_s, _, _ = cli_ingest(env, flags, plain)
            flags, env, _, _ = fresh(root / "vectors")
            vector_s, peak, report = cli_ingest(env, flags, vectored)
            assert report["created"] == n and not report["rejected"], report
            print(
                f"  gateway ingest, {n:,} items with vectors        {n / vector_s:9,.0f} items/s  "
                f"{plain_s / vector_s:5.2f}x the same items without  ({vector_s:.1f} s, peak RSS {peak / 2**20:,.0f} MiB)"
            )


if __name__ == "__main__":
    main()
