"""data.gateway.items on regorus's compiled path: the policy compiled once to an RVM program, then
run over a call's items in chunks.

regorus's interpreter walks the policy's syntax tree for every evaluation; its `Program`/`Rvm`
runs the same policy compiled to instructions, two to six times faster on the verify of a call.
The VM stops any one execution after a fixed number of instructions (25,000), and the shipped
policy spends about 200 per item (more for items with long ACLs or many scopes), so a call's items
go in chunks. The chunk size is measured, not guessed: it starts at START_CHUNK, halves whenever a
chunk trips the limit (down to MIN_CHUNK), and grows again by a quarter after GROW_AFTER chunks that
ran clean. A chunk that still trips the limit at MIN_CHUNK items is evaluated by the interpreter.

Chunking is sound because the items policy decides each item on its own (docs/writing-policies.md,
"Items are decided one by one"): the verdicts of a chunk are the verdicts those items get in the
whole call. The answer has the two documents the service reads, `allowed` and `denied`, from one
execution of a module of the gateway's own (`BOTH`) beside the bundle's; a policy that defines no
`denied` rule, or whose `denied` is undefined for the input, answers `denied: []`, as the
interpreter's document then does for the service (it drops whatever is not allowed).
When the bundle does not compile to a program (a construct the compiler does not take), every call
is evaluated by the interpreter, as before.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable

import regorus

from gateway.policy.bundle import PolicyBundle

log = logging.getLogger("gateway.policy.compiled")

# One entry point answers both documents in one execution (they share the policy's per-item work),
# from a module of the gateway's own beside the bundle's, under a package no bundle uses.
ENTRY_POINT = "data.gateway_internal_compiled.items"
MODULE_PATH = "<gateway>/compiled_items.rego"
BOTH = """package gateway_internal_compiled

default denied := []

denied := data.gateway.items.denied

items := {"allowed": data.gateway.items.allowed, "denied": denied}
"""
ALLOWED_ONLY = """package gateway_internal_compiled

items := {"allowed": data.gateway.items.allowed, "denied": []}
"""
START_CHUNK = 50
MIN_CHUNK = 5
GROW_AFTER = 20
LIMIT_MESSAGE = "instruction limit"


class CompiledItems:
    """One process's compiled items policy; `evaluate` answers like the interpreter's document."""

    def __init__(self, program: Any, data_json: str) -> None:
        self.vm = regorus.Rvm()
        self.vm.load_program(program)
        self.vm.set_data_json(data_json)
        self.chunk = START_CHUNK
        self._clean = 0
        self.fallbacks = 0  # chunks the interpreter evaluated (for the tests and the log)

    @classmethod
    def compile(cls, bundle: PolicyBundle) -> CompiledItems | None:
        """The compiled items policy, or None when the bundle has no program form."""
        data_json = json.dumps(bundle.data)
        modules = [(str(bundle.root / path), source) for path, source in bundle.modules]
        for module in (BOTH, ALLOWED_ONLY):
            try:
                program = regorus.Program.compile_from_modules(data_json, [*modules, (MODULE_PATH, module)], [ENTRY_POINT])
            except Exception as exc:  # regorus raises plain exceptions: the interpreter serves instead
                log.debug("items policy not compiled: %s", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                continue
            return cls(program, data_json)
        log.info("the items policy does not compile to an RVM program; the interpreter evaluates it")
        return None

    def evaluate(self, policy_input: dict[str, Any], interpreter: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        """`allowed` and `denied` for every item of `policy_input`, chunk by chunk; `interpreter`
        answers a chunk the VM cannot (the whole document of data.gateway.items for that chunk)."""
        items = policy_input.get("items")
        if not isinstance(items, list):
            return self._documents(policy_input, interpreter)
        allowed: list[Any] = []
        denied: list[Any] = []
        start = 0
        while start < len(items) or (start == 0 and not items):
            chunk = items[start : start + self.chunk]
            answer = self._run({**policy_input, "items": chunk}, interpreter)
            if answer is None:  # tripped the limit: smaller chunks, and the same items again
                continue
            if not isinstance(answer["allowed"], list) or not isinstance(answer["denied"], list):
                # Not the documents the contract asks for: the interpreter answers the whole call, so
                # it fails exactly as before (undefined, an engine error, a malformed document).
                self.fallbacks += 1
                return interpreter(policy_input)
            allowed.extend(answer["allowed"])
            denied.extend(answer["denied"])
            start += max(len(chunk), 1)
        return {"allowed": allowed, "denied": denied}

    def _run(self, chunk_input: dict[str, Any], interpreter: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any] | None:
        try:
            answer = self._documents(chunk_input, None)
        except LimitTripped:
            if self.chunk > MIN_CHUNK:
                self.chunk = max(MIN_CHUNK, self.chunk // 2)
                self._clean = 0
                return None
            self.fallbacks += 1
            return self._documents(chunk_input, interpreter)
        except Exception as exc:  # the VM failed where the interpreter may not: the interpreter decides
            log.warning("compiled items policy failed (%s); the interpreter evaluates this chunk", type(exc).__name__)
            self.fallbacks += 1
            return self._documents(chunk_input, interpreter)
        self._clean += 1
        if self._clean >= GROW_AFTER and len(chunk_input["items"]) == self.chunk:
            self.chunk += max(1, self.chunk // 4)
            self._clean = 0
        return answer

    def _documents(
        self, policy_input: dict[str, Any], interpreter: Callable[[dict[str, Any]], dict[str, Any]] | None
    ) -> dict[str, Any]:
        if interpreter is not None:
            document = interpreter(policy_input)
            return {"allowed": document.get("allowed"), "denied": document.get("denied") or []}
        self.vm.set_input_json(json.dumps(policy_input, separators=(",", ":")))
        try:
            raw = self.vm.execute_entry_point(ENTRY_POINT)
        except Exception as exc:
            if LIMIT_MESSAGE in str(exc):
                raise LimitTripped from None
            raise
        document = json.loads(raw)
        if not isinstance(document, dict):  # `allowed` undefined: the service fails closed on it, as on the interpreter's
            return {"allowed": None, "denied": []}
        return {"allowed": document.get("allowed"), "denied": document.get("denied") or []}


class LimitTripped(Exception):
    """An execution ran past the VM's instruction limit."""
