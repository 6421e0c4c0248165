"""The embedded engine's policy process: `python -m gateway.policy.worker`.

regorus holds the interpreter lock for the whole of an evaluation, so evaluated inside the service a
20 ms verify of one call stopped every other call in the process for 20 ms. Here it runs in a
process of its own, on a core of its own, while the service's threads go on.

The protocol, on stdin and stdout, one line each way:
- first the bundle, as one JSON line `{"root", "modules": [[path, source]...], "data", "compiled"}`
  (`compiled`: verify on regorus's compiled path, gateway/policy/compiled.py); the answer
  is `+` when it compiled, `-<error>` (file:line) when it did not;
- then any number of `<query> <input as JSON>` lines; each answer is `+<the query's first value as
  JSON>`, `!` when the document is undefined, or `-<what failed>`.
JSON never holds a raw newline, so a line is a message. Anything else written to stdout (by a
library) goes to stderr instead, never into an answer.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any, BinaryIO

from core.errors import ConfigurationError, PolicyUnavailable
from gateway.policy.bundle import PolicyBundle, read_bundle
from gateway.policy.compiled import CompiledItems
from gateway.policy.envelopes import evaluate_by_envelope
from gateway.policy.id_reads import id_read
from gateway.settings import PROJECT_POLICIES

log = logging.getLogger("gateway.policy.worker")

ITEMS_QUERY = b"data.gateway.items"  # verify's document: on the compiled path when the bundle compiles


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    from gateway.policy.embedded import build_engine, first_value

    message = json.loads(requests.readline() or b"{}")
    bundle = PolicyBundle(
        Path(message.get("root", ".")), tuple((p, s) for p, s in message.get("modules", ())), (), message.get("data", {}), ""
    )
    try:
        engine = build_engine(bundle)
    except ConfigurationError as exc:
        answers.write(b"-" + exc.message.replace("\n", " ").encode() + b"\n")
        answers.flush()
        return
    compiled = CompiledItems.compile(bundle) if message.get("compiled", True) else None
    # Items that differ only in their id are decided once, when the policy cannot read ids.
    reads_ids = id_read(bundle, read_bundle(PROJECT_POLICIES))
    if reads_ids is not None:
        log.info("the items policy is evaluated for every item: %s", reads_ids)
    answers.write(b"+\n")
    answers.flush()

    def interpret(query: str, policy_input: str) -> Any:
        engine.set_input_json(policy_input)
        return first_value(engine.eval_query_as_json(query))

    def decide_items(policy_input: dict[str, Any]) -> Any:
        if compiled is not None:
            return compiled.evaluate(policy_input, lambda chunk: interpret(ITEMS_QUERY.decode(), json.dumps(chunk)))
        return interpret(ITEMS_QUERY.decode(), json.dumps(policy_input))

    def items(policy_input: dict[str, Any]) -> Any:
        return decide_items(policy_input) if reads_ids is not None else evaluate_by_envelope(policy_input, decide_items)

    for line in requests:
        query, _, policy_input = line.rstrip(b"\n").partition(b" ")
        try:
            if query == ITEMS_QUERY and (compiled is not None or reads_ids is None):
                value = items(json.loads(policy_input))
            else:
                value = interpret(query.decode(), policy_input.decode())
        except PolicyUnavailable:
            answers.write(b"!\n")
        except Exception as exc:  # the engine's own failure: the service answers 503, never a decision
            answers.write(b"-" + type(exc).__name__.encode() + b"\n")
        else:
            answers.write(b"+" + json.dumps(value, separators=(",", ":")).encode() + b"\n")
        answers.flush()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the service stops its policy processes itself
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray writes to stdout land on stderr
    serve(sys.stdin.buffer, answers)


if __name__ == "__main__":
    main()
