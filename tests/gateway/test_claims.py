"""Workers share the background backlog through claims (gateway/writes/claims.py): two workers over
one store, on SQLite and on PostgreSQL, in two threads with engines of their own or in two
processes, never embed (nor analyse) an item twice and together leave nothing waiting; a worker
that dies holding claims strands its items only until the claims expire."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from core.store import close_store, open_store
from gateway.background import Limit
from gateway.privacy.detect import Detector
from gateway.privacy.store import analyze_all, analyze_pending, pending
from gateway.writes.claims import Claimer, claimed
from gateway.writes.embeddings import Vectors
from gateway.writes.items import ingest
from gateway.writes.vectorize import _COLUMNS as EMBED_COLUMNS
from gateway.writes.vectorize import EMBEDDED_KINDS, _stale, embed_all, embed_pending, lag

ITEMS = 60


class Recording:
    """A fake Embedder (the protocol: `model_id`, `dims`, `embed`) that counts each text it embeds
    and takes a little time a call, so two workers interleave."""

    model_id = "recording@1"
    dims = 4

    def __init__(self, log: Path | None = None) -> None:
        self.seen: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.log = log

    def embed(self, texts: list[str]) -> Vectors:
        time.sleep(0.002 * len(texts))
        with self._lock:
            self.seen.update(texts)
        if self.log is not None:
            with self.log.open("a", encoding="utf-8") as out:
                out.writelines(f"{t}\n" for t in texts)
        return np.tile(np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32), (len(texts), 1))


class Counting:
    """A fake Detector: no spans, every text counted."""

    version = "counting@1"

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self._lock = threading.Lock()

    def analyze_batch(self, texts: list[str], batch_size: int = 32) -> list[tuple[Any, ...]]:
        time.sleep(0.002 * len(texts))
        with self._lock:
            self.seen.update(texts)
        return [() for _ in texts]


def texts() -> list[str]:
    return [f"note {i}: the Globex renewal, item number {i}" for i in range(ITEMS)]


def load(url: str) -> None:
    engine = open_store(url)
    try:
        report = ingest(
            engine, "acme", [{"id": f"m{i}", "kind": "memory", "text": t, "acl": ["*"]} for i, t in enumerate(texts())]
        )
        assert not report.rejected
    finally:
        close_store(engine)


def in_threads(*jobs: Callable[[], Any]) -> None:
    failures: list[BaseException] = []

    def run(job: Callable[[], Any]) -> None:
        try:
            job()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures, failures


def background_loop(url: str, work: Callable[[Any, Claimer], int], kind: str) -> Callable[[], None]:
    """A background worker's loop (`embed_pending`/`analyze_pending` with its claimer) on an engine
    of its own, until a batch finds nothing it can claim."""

    def loop() -> None:
        engine = open_store(url)
        claimer = Claimer.of(kind)
        try:
            while work(engine, claimer):
                pass
        finally:
            close_store(engine)

    return loop


def test_two_workers_never_embed_an_item_twice(database_url: str) -> None:
    """`gateway embed`'s loop and a background worker's loop, side by side, each on its own engine."""
    load(database_url)
    model = Recording()

    def bulk() -> None:
        engine = open_store(database_url)
        try:
            embed_all(engine, model, batch=2, chunk=3)
        finally:
            close_store(engine)

    step = background_loop(database_url, lambda e, c: embed_pending(e, model, Limit(4, 1 << 20), claimer=c).items, "embedding")
    in_threads(bulk, step)
    assert set(model.seen) == set(texts()) and max(model.seen.values()) == 1, model.seen.most_common(3)
    engine = open_store(database_url)
    try:
        assert lag(engine, model.model_id) == 0 and claimed(engine, "embedding") == 0
    finally:
        close_store(engine)


def test_two_workers_never_analyse_an_item_twice(database_url: str) -> None:
    load(database_url)
    detector = Counting()
    fake = cast(Detector, detector)

    def bulk() -> None:
        engine = open_store(database_url)
        try:
            analyze_all(engine, fake, batch=3)
        finally:
            close_store(engine)

    step = background_loop(database_url, lambda e, c: analyze_pending(e, fake, Limit(4, 1 << 20), claimer=c).items, "pii")
    in_threads(bulk, step)
    assert set(detector.seen) == set(texts()) and max(detector.seen.values()) == 1, detector.seen.most_common(3)
    engine = open_store(database_url)
    try:
        assert pending(engine, detector.version) == 0 and claimed(engine, "pii") == 0
    finally:
        close_store(engine)


def test_a_dead_workers_claims_expire_and_its_items_are_taken_over(database_url: str) -> None:
    load(database_url)
    engine = open_store(database_url)
    model = Recording()
    try:
        dead = Claimer.of("embedding", ttl_s=1.0)  # claims a batch, then never stores nor releases it
        joined, condition = _stale(model.model_id)
        held = dead.claim(engine, joined, condition, EMBED_COLUMNS, 10)
        assert len(held) == 10 and claimed(engine, "embedding") == 10
        assert embed_all(engine, model) == ITEMS - 10  # the others' items, not the dead worker's
        assert lag(engine, model.model_id) == 10
        time.sleep(1.2)
        assert embed_all(engine, model) == 10  # expired: taken over
        assert lag(engine, model.model_id) == 0 and max(model.seen.values()) == 1
        assert claimed(engine, "embedding") == 0
    finally:
        close_store(engine)


def embed_in_process(url: str, log: str) -> int:
    """A `gateway embed` run in a process of its own, logging each text it embedded."""
    engine = open_store(url)
    try:
        return embed_all(engine, Recording(Path(log)), batch=2, chunk=4)
    finally:
        close_store(engine)


def test_two_processes_share_the_backlog(database_url: str, tmp_path: Path) -> None:
    load(database_url)
    logs = [tmp_path / "one.log", tmp_path / "two.log"]
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        done = pool.starmap(embed_in_process, [(database_url, str(log)) for log in logs])
    assert sum(done) == ITEMS
    seen = Counter(line for log in logs if log.exists() for line in log.read_text(encoding="utf-8").splitlines())
    assert set(seen) == set(texts()) and max(seen.values()) == 1
    engine = open_store(database_url)
    try:
        assert lag(engine, Recording.model_id) == 0
    finally:
        close_store(engine)


def test_embedded_kinds_are_what_waits() -> None:
    assert "memory" in EMBEDDED_KINDS  # the items these tests write wait for a vector


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_an_analysis_batch_is_shared_in_contiguous_parts(parts: int) -> None:
    from gateway.privacy.store import _shares

    batch = [f"text {i} " * (i + 1) for i in range(7)]
    shares = _shares(batch, parts)
    assert [t for share in shares for t in share] == batch and len(shares) <= parts and all(shares)


def test_the_background_pool_analyses_as_the_detector_does(sqlite_url: str, detector: Detector) -> None:
    """The service's analysis in processes beside it (`GATEWAY_PII_PROCESSES`): the same spans as
    one-by-one analysis, every item claimed and released."""
    from gateway.privacy.store import AnalysisPool, stored_spans

    notes = [
        "Call John Smith at +1 415 555 0132 about the renewal.",
        "Nothing personal: Q3 moved to 1.2M.",
        "Mail ann@example.com",
    ]
    engine = open_store(sqlite_url)
    pool = AnalysisPool(detector.version, 2)
    try:
        ingest(engine, "acme", [{"id": f"n{i}", "kind": "memory", "text": t, "acl": ["*"]} for i, t in enumerate(notes)])
        claimer = Claimer.of("pii")
        assert analyze_pending(engine, detector, Limit(10, 1 << 20), claimer=claimer, pool=pool).items == len(notes)
        found = stored_spans(engine, "acme", [f"n{i}" for i in range(len(notes))], detector.version)
        assert {k: list(v) for k, v in found.items()} == {f"n{i}": list(detector.analyze(t)) for i, t in enumerate(notes)}
        assert pending(engine, detector.version) == 0 and claimed(engine, "pii") == 0
    finally:
        pool.close()
        close_store(engine)


def test_analysing_processes_end_when_their_parent_is_killed(detector: Detector) -> None:
    """A service killed outright (SIGKILL: no shutdown runs) leaves no analysing process behind."""
    import os
    import signal
    import subprocess
    import sys

    program = (
        "import os, sys, time\n"
        "from gateway.privacy.store import AnalysisPool\n"
        "pool = AnalysisPool(sys.argv[1], 1)\n"
        "pool.warm()\n"
        "import psutil\n"
        "print(' '.join(str(c.pid) for c in psutil.Process().children(recursive=True)), flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", program, detector.version], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    children = [int(pid) for pid in parent.stdout.readline().split()]
    assert children
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    parent.stdout.close()
    import psutil

    deadline = time.monotonic() + 15
    while any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in children):
        assert time.monotonic() < deadline, "an analysing process outlived its parent"
        time.sleep(0.2)


def test_gateway_work_embeds_what_waits_and_stops(sqlite_url: str) -> None:
    """`gateway work` (embedding only here, on the packaged model): everything waiting is embedded,
    nothing is left claimed, and it stops when nothing waits."""
    from click.testing import CliRunner

    from gateway.cli import main

    load(sqlite_url)
    env = {"GATEWAY_EMBEDDINGS": "minilm-float", "GATEWAY_PII": "none"}
    result = CliRunner().invoke(main, ["work", "--no-analyze", "--threads", "1", "--database-url", sqlite_url], env=env)
    assert result.exit_code == 0, result.output
    assert f"{ITEMS} items embedded, 0 waiting" in result.output
    engine = open_store(sqlite_url)
    try:
        assert claimed(engine, "embedding") == 0
    finally:
        close_store(engine)
