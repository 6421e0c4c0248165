"""Where the embedded engine (regorus, as the gateway calls it) and OPA evaluate Rego differently,
as OPA's own conformance cases show them: the one list (the table differences.toml, package data beside this module) that

- `gateway policy check` reads, to warn where a module uses one of these constructs
  (gateway/policy_tools/check.py, code `engine-divergence/<code>`);
- bench/opa_conformance.py reads, to file each case the embedded engine fails under one;
- tests/policies/test_opa_conformance.py holds the embedded engine to: it fails exactly the cases
  listed here, the check warns on each of them (but the few in `unseen`), and each construct is
  written up in docs/writing-policies.md ("Engine differences") with its example.

Each entry names the construct as a policy writes it, what the embedded engine does where OPA does
otherwise, one line of Rego that shows it, and how the check finds it: a regular expression over the
module with its comments blanked, and its string contents too unless `strings` (a match whose `ok`
group took part is not one: the context that makes it safe; nor one whose `name` group is a rule,
function or import of the module itself). `cases` are the conformance cases of
OPA's pinned version (scripts/engines) that fail on the embedded engine because of it, as fnmatch
patterns over the case names bench/opa_conformance.py gives (OPA's note, with " #N" where notes
repeat).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from importlib import resources
from typing import Any

GROUPS = (
    "Syntax the embedded engine does not read",
    "Built-ins the embedded engine does not have",
    "Built-ins that answer differently",
    "Evaluation",
)
CALL = r"(?<![\w.])(?:{names})\s*\("


def calls(*names: str) -> re.Pattern[str]:
    """A call of any of these functions (not a rule or a reference that merely ends in the name)."""
    return re.compile(CALL.format(names="|".join(re.escape(n) for n in names)))


@dataclass(frozen=True)
class Difference:
    code: str  # the finding's code is "engine-divergence/<code>"
    group: str  # one of GROUPS: how docs/writing-policies.md orders them
    construct: str  # as a policy writes it
    embedded: str  # what the embedded engine does, against OPA (one line)
    example: str  # one line of Rego that shows it
    pattern: re.Pattern[str]  # where a module uses it (see the module's docstring)
    cases: tuple[str, ...]  # OPA's conformance cases failing on the embedded engine because of it
    strings: bool = False  # the pattern reads string contents (a format, a glob, a number in a JSON text)
    unseen: tuple[str, ...] = field(default=())  # of `cases`, those the pattern cannot find (listed, with why, in the docs)

    def finds(self, name: str) -> bool:
        return any(fnmatchcase(name, pattern) for pattern in self.cases)

    def warning(self, used: str) -> str:
        """The check's message: the construct, what the embedded engine does, and what was found."""
        found = " ".join(used.split()).rstrip("( ")
        return f"{self.construct}: {self.embedded} (found `{found[:60]}`)"


GROUP_KEYS = dict(zip(("syntax", "missing", "different", "evaluation"), GROUPS, strict=True))  # the table's `group`
TABLE = "differences.toml"  # package data beside this module


def pattern_of(entry: Mapping[str, Any]) -> re.Pattern[str]:
    """An entry's `pattern` (one string, or a list of parts joined), or its `calls`."""
    if "calls" in entry:
        return calls(*entry["calls"])
    pattern = entry["pattern"]
    return re.compile(pattern if isinstance(pattern, str) else "".join(pattern))


def load(text: str) -> tuple[Difference, ...]:
    """The table (differences.toml) as Differences, in its order."""
    return tuple(
        Difference(
            code=entry["code"],
            group=GROUP_KEYS[entry["group"]],
            construct=entry["construct"],
            embedded=entry["embedded"],
            example=entry["example"],
            pattern=pattern_of(entry),
            cases=tuple(entry["cases"]),
            strings=entry.get("strings", False),
            unseen=tuple(entry.get("unseen", ())),
        )
        for entry in tomllib.loads(text)["difference"]
    )


DIFFERENCES: tuple[Difference, ...] = load(resources.files(__package__).joinpath(TABLE).read_text(encoding="utf-8"))


def difference_of(name: str) -> Difference | None:
    """The known difference a conformance case is filed under, if any."""
    return next((d for d in DIFFERENCES if d.finds(name)), None)


@dataclass(frozen=True)
class CompiledDifference:
    """Cases that pass on the embedded engine's interpreter and not on its compiled path (where the
    gateway evaluates data.gateway.items), by what they show (compiled_differences.toml)."""

    key: str
    what: str
    meaning: str
    cases: frozenset[str]


COMPILED_TABLE = "compiled_differences.toml"  # package data beside this module
COMPILED: tuple[CompiledDifference, ...] = tuple(
    CompiledDifference(key, entry["what"], entry["meaning"], frozenset(entry["cases"]))
    for key, entry in tomllib.loads(resources.files(__package__).joinpath(COMPILED_TABLE).read_text(encoding="utf-8")).items()
)
