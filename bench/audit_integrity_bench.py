"""Audit integrity benchmark: what signed checkpoints cost.

1. Signing: one Ed25519 signed note, and one checkpoint of 100 new rows (the segment walk that
   checks links, hashes, seals and the item index, the Merkle tree extended by those rows, then
   the signature and the fsync'd append), against appending those 100 rows (the baseline,
   measured in the same run), and against the same checkpoints without a Merkle root (the chain
   as it was before trees, filled in a second store in the same run).
1b. Proofs: `proof_of` (a trace's inclusion path to the newest signed root, built from the
   chain's row hashes) and `verify_proof` for a sample of traces, against reading the same trace
   (`get_trace`).
2. Verify: `gateway audit verify` over a chain of N traces (default 100,000), rows/s with the
   checkpoints (held against every signed checkpoint) and without (the hash chain alone).
3. Retrieve p50 with checkpoints on against off: two servers on copies of one store, up at the
   same time, each query sent to both in turn (alternating which goes first), so that drift on a
   shared machine hits both alike; the audit write's own p50 from each response's Server-Timing,
   where sealing lands; and checkpointing's own cost per call from part 1.

Run from the project root with the project's venv:

    .venv/bin/python bench/audit_integrity_bench.py --quick   # 10,000 traces, 300 calls to each server
    .venv/bin/python bench/audit_integrity_bench.py           # 100,000 traces, 2,000 calls to each server
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
from harness import Server, code_revision, free_port, percentile
from retrieve_bench import AGENT, QUERY_SEED, prepare_store, retrieve_bodies

from audit.chain import append
from audit.integrity import Checkpointer, CheckpointLog, generate, load_signer, open_note, read_checkpoints, sign, verify
from audit.record import new_trace_id
from core.store import close_store, open_store, writer

TENANT = str(AGENT["tenant"])
CHECKPOINT_ROWS = 100
P50_TARGET = 1.02
WARMUP = 20
ITEMS = 5_000


def lineage(rng: random.Random) -> dict[str, Any]:
    """A retrieve's lineage of typical size: request shape, decision, sources, packed ids, timings."""
    packed = [f"item-{rng.randrange(100_000)}" for _ in range(rng.randrange(3, 12))]
    return {
        "version": 2,
        "request": {
            "task": {"type": "account_followup"},
            "mode": "brief",
            "depth": "standard",
            "budget_bytes": 16000,
            "query": {"hmac": "%032x" % rng.getrandbits(128), "length": rng.randrange(10, 80)},
        },
        "decision": {"allowed": True, "reasons": [], "revision": "r" * 16},
        "retrieved": {"lexical": packed, "semantic": packed[:5]},
        "packed": packed,
        "sources": {name: {"status": "ok", "count": len(packed)} for name in ("exact", "lexical", "semantic", "graph")},
        "timings": {"decide_ms": 1.1, "verify_ms": 5.8, "lexical_ms": 10.3, "total_ms": 43.0},
    }


def values(rng: random.Random) -> dict[str, Any]:
    return {
        "trace_id": new_trace_id(),
        "created_at": datetime.now(timezone.utc),
        "endpoint": "retrieve",
        "status_code": 200,
        "decision": "allow",
        "tenant": TENANT,
        "actor": "user:alice",
        "policy_engine": "embedded",
        "policy_revision": "r" * 16,
        "error_code": None,
        "lineage": lineage(rng),
    }


def fill(engine: Any, rows: int, checkpointer: Checkpointer) -> tuple[float, float]:
    """Append `rows` sealed traces, CHECKPOINT_ROWS per transaction, signing a checkpoint after each
    (as the service does every 100 rows); the seconds spent appending and spent checkpointing."""
    rng = random.Random(7)
    append_s = checkpoint_s = 0.0
    for done in range(0, rows, CHECKPOINT_ROWS):
        started = time.perf_counter()
        with writer(engine).begin() as conn:
            appended = [append(conn, values(rng), checkpointer.seal_key) for _ in range(min(CHECKPOINT_ROWS, rows - done))]
        checkpointer.appended(appended)
        middle = time.perf_counter()
        checkpointer.checkpoint()
        append_s += middle - started
        checkpoint_s += time.perf_counter() - middle
        if (done + CHECKPOINT_ROWS) % 10_000 == 0:
            print(f"  appended {done + CHECKPOINT_ROWS:>7,}/{rows:,} traces", flush=True)
    return append_s, checkpoint_s


def note_costs(signer: Any, repeats: int = 2000) -> tuple[float, float]:
    text = "gateway.audit/acme\n100\n" + "A" * 44 + "\ntime 2026-11-30T00:00:00Z\noldest 1\n"
    started = time.perf_counter()
    for _ in range(repeats):
        note = sign(text, signer)
    signed = time.perf_counter()
    for _ in range(repeats):
        open_note(note, signer.verifier)
    return (signed - started) / repeats * 1e6, (time.perf_counter() - signed) / repeats * 1e6


def proof_costs(
    engine: Any, checkpointer: Checkpointer, signer: Any, traces: int, count: int
) -> tuple[list[float], list[float], list[float], bool]:
    """ms per proof (`proof_of`), per offline check (`verify_proof`) and per plain read of the same
    trace, for `count` traces spread over the chain."""
    from sqlalchemy import select

    from audit.chain import audit_trace
    from audit.integrity import proof_of, verify_proof
    from audit.review import get_trace

    attested = read_checkpoints(checkpointer.log.path, signer.verifier, TENANT)
    with engine.connect() as conn:
        ids = [
            t
            for (t,) in conn.execute(
                select(audit_trace.c.trace_id).where(audit_trace.c.chain == TENANT).order_by(audit_trace.c.seq)
            )
        ]
    rng = random.Random(11)
    sample = [ids[rng.randrange(len(ids))] for _ in range(count)]
    proofs, checks, reads, ok = [], [], [], True
    for trace_id in sample:
        started = time.perf_counter()
        document = proof_of(engine, TENANT, trace_id, attested, checkpointer.log)
        proofs.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        ok = ok and document is not None and verify_proof(document.wire(), signer.verifier)[0]
        checks.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        get_trace(engine, TENANT, trace_id)
        reads.append((time.perf_counter() - started) * 1000)
    return proofs, checks, reads, ok


def timed_verify(engine: Any, attested: Any) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    report = verify(engine, TENANT, attested)
    return time.perf_counter() - started, report.wire()


async def interleaved(urls: dict[str, str], key: str, bodies: list[dict[str, Any]]) -> dict[str, tuple[list[float], list[float]]]:
    """Each body to every server in turn (the order alternating), so that whatever else the machine
    does hits both alike: per server, the client's latencies and the audit write's (Server-Timing)."""
    found: dict[str, tuple[list[float], list[float]]] = {label: ([], []) for label in urls}
    clients = {
        label: httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        for label, url in urls.items()
    }
    try:
        for number, body in enumerate(bodies):
            order = list(urls) if number % 2 == 0 else list(reversed(urls))
            for label in order:
                started = time.perf_counter()
                response = await clients[label].post("/v1/retrieve", json=body)
                elapsed = (time.perf_counter() - started) * 1000
                if response.status_code != 200:
                    raise SystemExit(f"retrieve answered {response.status_code}: {response.text[:200]}")
                if number >= WARMUP:
                    timing = dict(part.strip().split(";dur=") for part in response.headers["server-timing"].split(","))
                    found[label][0].append(elapsed)
                    found[label][1].append(float(timing["audit"]))
    finally:
        for client in clients.values():
            await client.aclose()
    return found


def retrieve_p50s(data_dir: Path, keys: dict[str, Path], calls: int) -> dict[str, tuple[list[float], list[float]]]:
    """Two servers on copies of one store, checkpoints off and on, up at the same time."""
    key, _ = prepare_store(data_dir / "off", ITEMS, reuse=False)
    shutil.copytree(data_dir / "off", data_dir / "on")  # one store each: unsealed rows of the other would be refused
    envs = {
        "off": {"GATEWAY_BACKGROUND_EMBEDDING": "false"},
        "on": {
            "GATEWAY_BACKGROUND_EMBEDDING": "false",
            "GATEWAY_AUDIT_SIGNING_KEY": str(keys["private"]),
            "GATEWAY_AUDIT_CHECKPOINTS": str(data_dir / "serve.checkpoints"),
        },
    }
    servers = {label: Server(data_dir / label, free_port(), env=env, label=f"checkpoints-{label}") for label, env in envs.items()}
    try:
        for server in servers.values():
            server.start()
        for server in servers.values():
            server.wait_ready()
        bodies = retrieve_bodies(calls + WARMUP, QUERY_SEED, "fast")
        return asyncio.run(interleaved({label: server.url for label, server in servers.items()}, key, bodies))
    finally:
        for server in servers.values():
            server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="10,000 traces and 300 calls")
    parser.add_argument("--traces", type=int, help="chain length for the verify figure (default 100,000)")
    parser.add_argument("--skip-retrieve", action="store_true", help="only signing and verify")
    parser.add_argument("--proofs", type=int, default=50, help="traces to prove (default 50)")
    args = parser.parse_args(argv)
    traces = args.traces or (10_000 if args.quick else 100_000)
    calls = 300 if args.quick else 2000
    work = Path(tempfile.mkdtemp(prefix="gateway-audit-integrity-"))
    try:
        keys = generate(work / "keys")
        signer = load_signer(keys["private"])
        sign_us, open_us = note_costs(signer)
        engine = open_store(f"sqlite:///{work / 'trail.db'}")
        checkpointer = Checkpointer(engine, signer, CheckpointLog(work / "trail.checkpoints"), rows=CHECKPOINT_ROWS)
        print(
            f"code {code_revision()}; filling a chain of {traces:,} traces, a checkpoint every {CHECKPOINT_ROWS} rows", flush=True
        )
        append_s, checkpoint_s = fill(engine, traces, checkpointer)
        plain_engine = open_store(f"sqlite:///{work / 'chain-only.db'}")
        chain_only = Checkpointer(plain_engine, signer, CheckpointLog(work / "chain-only.checkpoints"), rows=CHECKPOINT_ROWS)
        chain_only.trees = False
        print(f"filling a second chain of {traces:,} traces, checkpoints without a Merkle root (the baseline)", flush=True)
        plain_append_s, plain_checkpoint_s = fill(plain_engine, traces, chain_only)
        close_store(plain_engine)
        attested = read_checkpoints(checkpointer.log.path, signer.verifier, TENANT)
        proof_ms, verify_proof_ms, read_ms, proofs_ok = proof_costs(engine, checkpointer, signer, traces, args.proofs)
        timed_verify(engine, None)  # once unmeasured, so that both measured walks read a warm page cache
        plain_s, plain = timed_verify(engine, None)
        signed_s, signed = timed_verify(engine, attested)
        close_store(engine)
        ok = plain["ok"] and signed["ok"] and signed["checkpointed"] == traces and proofs_ok
        print()
        print("Signing")
        print(f"  one signed note: {sign_us:.0f} us to sign, {open_us:.0f} us to verify")
        print(
            f"  a checkpoint of {CHECKPOINT_ROWS} rows: {checkpoint_s / (traces / CHECKPOINT_ROWS) * 1000:.2f} ms, "
            f"{checkpoint_s / append_s:.2f}x the time to append those rows ({append_s / traces * 1e6:.0f} us/row)"
        )
        print(
            f"  the same without a Merkle root: {plain_checkpoint_s / (traces / CHECKPOINT_ROWS) * 1000:.2f} ms "
            f"({plain_checkpoint_s / plain_append_s:.2f}x its appends); with the tree {checkpoint_s / plain_checkpoint_s:.2f}x that"
        )
        print(f"Proofs ({args.proofs} traces of the {traces:,}-row chain)")
        print(
            f"  proof p50 {percentile(proof_ms, 50):.1f} ms, p95 {percentile(proof_ms, 95):.1f} ms; reading the trace alone "
            f"p50 {percentile(read_ms, 50):.2f} ms: {percentile(proof_ms, 50) / percentile(read_ms, 50):.0f}x"
        )
        print(f"  verify-proof p50 {percentile(verify_proof_ms, 50):.2f} ms  {'ok' if proofs_ok else 'NOT OK'}")
        print(f"Verify over {traces:,} traces ({attested.notes} checkpoints)")
        print(f"  hash chain alone:     {traces / plain_s:,.0f} rows/s")
        print(
            f"  against checkpoints:  {traces / signed_s:,.0f} rows/s  ({signed_s / plain_s:.2f}x the time)  "
            f"{'ok' if ok else 'NOT OK: ' + str(signed.get('first_broken'))}"
        )
        if args.skip_retrieve:
            return 0 if ok else 1
        print(f"Retrieve p50, checkpoints on vs off ({calls} calls to each, interleaved, {ITEMS:,} items, fast depth)")
        found = retrieve_p50s(work / "serve", keys, calls)
        p50 = {label: percentile(times, 50) for label, (times, _) in found.items()}
        audit = {label: percentile(writes, 50) for label, (_, writes) in found.items()}
        ratio = p50["on"] / p50["off"]
        print(
            f"  p50 off {p50['off']:.2f} ms, on {p50['on']:.2f} ms: on/off {ratio:.3f} "
            f"({'within' if ratio <= P50_TARGET else 'OVER'} the {P50_TARGET:.2f} target)"
        )
        print(
            f"  audit write p50 (Server-Timing): off {audit['off']:.2f} ms, on {audit['on']:.2f} ms ({audit['on'] - audit['off']:+.2f} ms)"
        )
        share = checkpoint_s / traces * 1000 / p50["off"]
        print(f"  checkpointing's own cost per call: {checkpoint_s / traces * 1000:.3f} ms, {share:.2%} of the p50 (from part 1)")
        return 0 if ok and ratio <= P50_TARGET else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
