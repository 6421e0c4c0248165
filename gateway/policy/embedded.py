"""The embedded engine: Rego evaluated by regorus, in policy processes the service starts.

`build_engine` compiles a bundle (the policy processes, `gateway policy test`); `EmbeddedEngine`
keeps WORKERS policy processes (gateway/policy/worker.py) and hands each evaluation to an idle one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import re
import select
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson
import regorus

from core.errors import ConfigurationError, PolicyUnavailable
from gateway.policy.archive import MAX_ARCHIVE_BYTES
from gateway.policy.base import ENTRYPOINTS
from gateway.policy.bundle import PolicyBundle

log = logging.getLogger("gateway.policy")

# regorus refuses, by default, a module with a line over 1,024 columns, over 20,000 lines or over
# 1 MiB, where OPA takes any: a certificate, a key or a token written into a policy stopped the
# bundle loading on the embedded engine alone (OPA's conformance cases, bench/opa-conformance.md).
# A module is bounded by the bundle's own limit instead (MAX_ARCHIVE_BYTES, all files together).
POLICY_LIMITS = {"max_col": MAX_ARCHIVE_BYTES, "max_file_bytes": MAX_ARCHIVE_BYTES, "max_lines": MAX_ARCHIVE_BYTES}


def new_engine() -> regorus.Engine:
    """A regorus engine as the gateway uses one: every engine that reads a bundle's modules (the
    policy processes, `gateway policy check` and `test`, the id-read analysis) starts here."""
    engine = regorus.Engine()
    engine.set_policy_length_config(**POLICY_LIMITS)
    return engine


def build_engine(bundle: PolicyBundle, *, with_tests: bool = False) -> regorus.Engine:
    """Compile the bundle; a syntax error raises ConfigurationError naming file:line.

    The error is raised after the half-built engine is dropped, so no traceback keeps it alive
    to be freed later on another thread.
    """
    engine = new_engine()
    failure = None
    for path, source in bundle.modules + (bundle.tests if with_tests else ()):
        try:
            engine.add_policy(str(bundle.root / path), source)
        except Exception as exc:  # regorus raises plain exceptions carrying file:line
            failure = f"policy error: {exc}"
            break
    if failure is not None:
        del engine
        raise ConfigurationError(failure)
    engine.add_data_json(json.dumps(bundle.data))
    return engine


def first_value(raw: str) -> Any:
    """The value of a query's first expression, or raise when the document is undefined."""
    result = json.loads(raw).get("result") or []
    if not result or not result[0].get("expressions"):
        raise PolicyUnavailable("policy document is undefined")
    return result[0]["expressions"][0]["value"]


DOCUMENT_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")  # evaluate_path
EVAL_TIMEOUT_S = 5.0  # an evaluation still running after this is a runaway policy: its process is ended
WORKERS = 2  # policy processes: a long verify of one call never queues a short decision behind it


def input_line(policy_input: dict[str, Any]) -> bytes:
    """The input as one line of JSON for the policy process: orjson (~5x faster than `json` on a
    verify's hundred items, and it escapes every newline); what it refuses (a key that is not a
    string) is written by `json` as before."""
    try:
        return orjson.dumps(policy_input)
    except TypeError:
        return json.dumps(policy_input, separators=(",", ":")).encode()


class _Worker:
    """One policy process and its pipes; used by one thread at a time (the pool hands it out)."""

    def __init__(self, bundle: PolicyBundle, timeout_s: float, compiled: bool = True, nice: int = 0) -> None:
        self.bundle = bundle
        self.timeout_s = timeout_s
        self.compiled = compiled  # verify on regorus's compiled path when the bundle compiles (gateway/policy/compiled.py)
        self.nice = nice  # scheduling priority below the service's own (a candidate's replay: policy impact)
        self.process: subprocess.Popen[bytes] | None = None
        self.spent_s = 0.0  # CPU of the processes this worker stopped

    def start(self) -> None:
        """Start the process and load the bundle; ConfigurationError when it does not compile."""
        self.spawn()
        self.load()

    def spawn(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gateway.policy.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        if self.nice:
            try:
                os.setpriority(os.PRIO_PROCESS, self.process.pid, self.nice)
            except OSError as exc:  # a platform or container that refuses: it runs at the service's priority
                log.warning("policy process %d: could not lower its priority (%s)", self.process.pid, exc.strerror)

    def load(self) -> None:
        bundle = {
            "root": str(self.bundle.root),
            "modules": self.bundle.modules,
            "data": self.bundle.data,
            "compiled": self.compiled,
        }
        answer = self._ask(json.dumps(bundle, separators=(",", ":")).encode(), timeout=60.0)
        if not answer.startswith(b"+"):
            self.stop()
            raise ConfigurationError(answer[1:].decode() if answer.startswith(b"-") else "the policy process did not start")

    def evaluate(self, query: str, policy_input: bytes) -> bytes:
        """The process's answer line; a process that died or ran away is replaced for the next call."""
        if self.process is None or self.process.poll() is not None:
            self.stop()  # one that died while idle: its pipes closed, a new one started
            self.start()
        answer = self._ask(query.encode() + b" " + policy_input, self.timeout_s)
        if not answer:
            self.stop()
        return answer

    def _ask(self, line: bytes, timeout: float) -> bytes:
        process = self.process
        assert process is not None and process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(line + b"\n")
            process.stdin.flush()
            ready, _, _ = select.select([process.stdout], [], [], timeout)
            return process.stdout.readline().rstrip(b"\n") if ready else b""
        except (BrokenPipeError, OSError, ValueError):
            return b""

    def cpu_s(self) -> float:
        """CPU seconds its policy processes used so far (Linux /proc; 0 where it cannot be read)."""
        return self.spent_s + (_process_cpu_s(self.process.pid) if self.process is not None else 0.0)

    def stop(self) -> None:
        if self.process is not None:
            self.spent_s += _process_cpu_s(self.process.pid)
        process, self.process = self.process, None
        if process is None:
            return
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()
        process.kill()
        process.wait()


def _process_cpu_s(pid: int) -> float:
    """User and system CPU seconds of a running process, from /proc/<pid>/stat; 0.0 when unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


class EmbeddedEngine:
    """Rego evaluated by regorus in policy processes of the service's own (gateway/policy/worker.py):
    regorus keeps the interpreter lock for a whole evaluation, so in the service's process one
    call's verify stopped every other call for its duration. A process that dies or runs past
    EVAL_TIMEOUT_S fails its call closed (503 policy_unavailable) and is started again for the next."""

    name = "embedded"

    def __init__(
        self,
        bundle: PolicyBundle,
        workers: int = WORKERS,
        timeout_s: float = EVAL_TIMEOUT_S,
        *,
        compiled: bool = True,
        nice: int = 0,
    ) -> None:
        self.revision = bundle.revision
        self.loaded_at = datetime.now(timezone.utc)
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._workers = [_Worker(bundle, timeout_s, compiled, nice) for _ in range(workers)]
        self._threads = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rego")
        try:
            for worker in self._workers:  # started side by side, then loaded
                worker.spawn()
            for worker in self._workers:
                worker.load()
                self._idle.put(worker)
        except BaseException:
            self._close()
            raise

    def evaluate_sync(self, entrypoint: str, policy_input: dict[str, Any]) -> dict[str, Any]:
        """Runs on one of the pool's threads, with one idle policy process."""
        query = "data." + ENTRYPOINTS[entrypoint].replace("/", ".")
        worker = self._idle.get()
        try:
            answer = worker.evaluate(query, input_line(policy_input))
        except ConfigurationError as exc:  # the process could not be started again
            raise PolicyUnavailable(f"embedded policy evaluation failed: {exc.message}") from exc
        finally:
            self._idle.put(worker)
        if answer == b"!":
            raise PolicyUnavailable("policy document is undefined")
        if not answer.startswith(b"+"):  # any engine failure is "no decision", never allow or deny
            failure = answer[1:].decode() if answer else "the policy process exited or ran past its time"
            raise PolicyUnavailable(f"embedded policy evaluation failed: {failure}")
        value = orjson.loads(answer[1:])
        if not isinstance(value, dict):
            raise PolicyUnavailable(f"{query} is not an object")
        return value

    async def evaluate(self, entrypoint: str, policy_input: dict[str, Any]) -> dict[str, Any]:
        try:
            future = self._threads.submit(self.evaluate_sync, entrypoint, policy_input)
        except RuntimeError as exc:  # executor shut down
            raise PolicyUnavailable("the embedded policy engine is closed") from exc
        return await asyncio.wrap_future(future)

    async def evaluate_path(self, path: str, policy_input: dict[str, Any]) -> Any:
        """The document at data.<path> (`gateway.items.failures`, for explain), or None where the
        policy does not define it; any failure is PolicyUnavailable, as for an entry point."""
        if not DOCUMENT_PATH.fullmatch(path):
            raise ValueError("a document path is dotted Rego names")
        try:
            future = self._threads.submit(self._path_sync, path, policy_input)
        except RuntimeError as exc:  # executor shut down
            raise PolicyUnavailable("the embedded policy engine is closed") from exc
        return await asyncio.wrap_future(future)

    def _path_sync(self, path: str, policy_input: dict[str, Any]) -> Any:
        worker = self._idle.get()
        try:
            answer = worker.evaluate("data." + path, input_line(policy_input))
        except ConfigurationError as exc:  # the process could not be started again
            raise PolicyUnavailable(f"embedded policy evaluation failed: {exc.message}") from exc
        finally:
            self._idle.put(worker)
        if answer == b"!":
            return None
        if not answer.startswith(b"+"):
            raise PolicyUnavailable("embedded policy evaluation failed: " + (answer[1:].decode() or "no answer"))
        return json.loads(answer[1:])

    async def ready(self) -> bool:
        try:
            await self.evaluate("items", {"actor": {}, "task": {}, "constraints": {}, "subjects": [], "items": []})
        except PolicyUnavailable:
            return False
        return True

    def cpu_s(self) -> float:
        """CPU seconds its policy processes used so far: what a call that ran them is charged."""
        return sum(worker.cpu_s() for worker in self._workers)

    async def aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._close)

    def _close(self) -> None:
        self._threads.shutdown(wait=True)
        for worker in self._workers:
            worker.stop()
