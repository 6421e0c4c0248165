"""The audit trail's counts of issue 58, read from the source with `ast` and a regex (no import of
the code): how often the trail still moves as a dict, is validated again at HTTP, is filled field by
field, and how many modules import their own package's `__init__`.

Run from the project root (or name another checkout, such as a `git worktree` of an older commit):

    .venv/bin/python bench/trail_counts.py [ROOT]

- dict returns: functions and methods annotated as returning `dict[str, Any]` (or that or None), in
  audit/, in gateway/, and in the whole service (api, core, connectors, audit, gateway);
- model_validate: calls of `.model_validate(` in gateway/http/routes/;
- lineage assignments: lines matching `\\blineage\\.\\w+\\s*=` (not `==`) in audit/ and gateway/;
- decision assignments: lines setting `call.trace.decision =` in gateway/;
- package self-cycles: modules (not an `__init__`) of api, core, connectors, audit and gateway that
  import their own package: `import P`, `from P import x` or `from . import x`
  (tests/test_layers.py keeps this at 0).
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGES = ("api", "core", "connectors", "audit", "gateway")
LINEAGE = re.compile(r"\blineage\.\w+\s*=(?!=)")
DICT = ("dict[str, Any]", "dict[str, Any] | None", "Optional[dict[str, Any]]")
DECISION = re.compile(r"\bcall\.trace\.decision\s*=(?!=)")


def sources(root: Path, *folders: str) -> Iterator[Path]:
    for folder in folders:
        yield from sorted(p for p in (root / folder).rglob("*.py") if "__pycache__" not in p.parts)


def dict_returns(root: Path, *folders: str) -> int:
    count = 0
    for path in sources(root, *folders):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
                count += ast.unparse(node.returns) in DICT
    return count


def calls_of(root: Path, folder: str, name: str) -> int:
    count = 0
    for path in sources(root, folder):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            count += isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name
    return count


def lines_matching(root: Path, pattern: re.Pattern[str], *folders: str) -> int:
    return sum(bool(pattern.search(line)) for path in sources(root, *folders) for line in path.read_text().splitlines())


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def self_imports(root: Path) -> list[str]:
    """`module:line imported` for each import of a module's own package (its `__init__`)."""
    found = []
    for path in sources(root, *PACKAGES):
        if path.name == "__init__.py":
            continue
        package = module_name(root, path).rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    names = [".".join(base + ([node.module] if node.module else []))]
                else:
                    names = [node.module or ""]
            else:
                continue
            found += [f"{module_name(root, path)}:{node.lineno} {name}" for name in names if name == package]
    return found


def counts(root: Path) -> dict[str, int]:
    return {
        "dict[str, Any] returns in audit/": dict_returns(root, "audit"),
        "dict[str, Any] returns in gateway/": dict_returns(root, "gateway"),
        "dict[str, Any] returns in the service (api, core, connectors, audit, gateway)": dict_returns(root, *PACKAGES),
        "model_validate calls in gateway/http/routes/": calls_of(root, "gateway/http/routes", "model_validate"),
        "lineage.X = lines (audit/, gateway/)": lines_matching(root, LINEAGE, "audit", "gateway"),
        "call.trace.decision = lines (gateway/)": lines_matching(root, DECISION, "gateway"),
        "package self-cycles": len(self_imports(root)),
    }


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    for name, value in counts(root).items():
        print(f"{value:5d}  {name}")
    for found in self_imports(root):
        print(f"       self-import: {found}")


if __name__ == "__main__":
    main()
