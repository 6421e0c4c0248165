"""The layers only point down: import-linter keeps the contracts in .importlinter (./scripts/check runs
it on the checkout before pytest), every gateway module is placed in them, and each contract fails a
copy of the code with an upward import or a cycle planted in it, under `if TYPE_CHECKING:` too. The
audit rooms are entered by their doors (their `__init__`), by the packages (a `protected` contract
each) and by the tests and benchmarks (read here with `ast`); no module imports its own package."""

from __future__ import annotations

import ast
import configparser
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("api", "core", "connectors", "audit", "gateway")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [str(Path(sys.executable).parent / "lint-imports"), str(root / ".importlinter"), "--no-cache"]
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def copy_of_the_code(tmp_path: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "models", "templates"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


def children(package: str) -> set[str]:
    """The modules and packages directly inside a package (gateway/models holds data, no code)."""
    found = set()
    for path in (ROOT / package).iterdir():
        if path.suffix == ".py" and path.name != "__init__.py":
            found.add(path.stem)
        elif path.is_dir() and (path / "__init__.py").exists():
            found.add(path.name)
    return found


def contracts() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    return parser


def listed(contract: str, option: str) -> list[str]:
    return contracts()[f"importlinter:contract:{contract}"][option].split()


def layers(contract: str) -> set[str]:
    return {name.strip() for line in listed(contract, "layers") for name in line.replace(":", "|").split("|")} - {""}


def test_every_gateway_module_is_placed_in_the_layers() -> None:
    """A module the layers contract does not name is not checked by it (the client was not, and an
    import of it from settings passed): a new one must be placed."""
    assert layers("gateway") == children("gateway")
    assert layers("connectors") == children("connectors")
    assert layers("audit") == children("audit")


def test_every_service_module_is_kept_from_starlette_and_from_the_client() -> None:
    service = {f"gateway.{name}" for name in children("gateway") - {"client", "adapters"}}
    assert service - {"gateway.http"} <= set(listed("http-only-starlette", "source_modules"))
    assert service <= set(listed("client-stands-alone", "forbidden_modules"))
    assert {"core", "connectors", "audit", "starlette"} <= set(listed("client-stands-alone", "forbidden_modules"))


def test_type_checking_imports_count() -> None:
    assert contracts()["importlinter"]["exclude_type_checking_imports"] == "False"


TYPE_CHECKING_ONLY = "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import {module}  # noqa\n"


@pytest.mark.parametrize(
    ("module", "planted", "broken"),
    [
        ("core/errors.py", "import gateway.settings  # noqa\n", "Packages point down"),
        ("connectors/base.py", "import audit.record.trace  # noqa\n", "Packages point down"),
        ("gateway/settings.py", "import gateway.pipeline.budget  # noqa\n", "Inside gateway"),
        # The audit rooms: the chain knows nothing of integrity (walks, keys, checkpoints) above it.
        ("audit/chain/rows.py", "import audit.integrity.merkle  # noqa\n", "Inside audit"),
        ("audit/review/queries.py", TYPE_CHECKING_ONLY.format(module="audit.integrity"), "Inside audit"),
        # The case that passed while the client was missing from the layers.
        ("gateway/settings.py", "import gateway.client  # noqa\n", "Inside gateway"),
        ("gateway/policy/reload.py", "import gateway.http.errors  # noqa\n", "Inside gateway"),
        # The contract is at the bottom: it imports nothing else of the project.
        ("api/wire.py", "import core.errors  # noqa\n", "Packages point down"),
        ("api/retrieve.py", "import starlette.responses  # noqa\n", "Only the HTTP layer knows Starlette"),
        ("gateway/settings.py", TYPE_CHECKING_ONLY.format(module="gateway.context"), "Inside gateway"),
        # The loop expand.py had with pipeline.py, through an annotation.
        ("gateway/pipeline/expand.py", TYPE_CHECKING_ONLY.format(module="gateway.pipeline.pipeline"), "No cycles"),
        ("core/errors.py", TYPE_CHECKING_ONLY.format(module="audit.record.trace"), "Packages point down"),
        ("gateway/pipeline/budget.py", "import starlette.responses  # noqa\n", "Only the HTTP layer knows Starlette"),
        ("gateway/pipeline/ranking.py", "import gateway.pipeline.budget  # noqa\n", "No cycles"),
        ("gateway/client/calls.py", "import core.errors  # noqa\n", "The client and the adapters know nothing of the service"),
        (
            "gateway/client/calls.py",
            "import gateway.policy_tools.explain  # noqa\n",
            "The client and the adapters know nothing of the service",
        ),
        (
            "gateway/adapters/langchain.py",
            "import gateway.http.errors  # noqa\n",
            "The client and the adapters know nothing of the service",
        ),
    ],
)
def test_an_upward_import_or_a_cycle_is_caught(tmp_path: Path, module: str, planted: str, broken: str) -> None:
    root = copy_of_the_code(tmp_path)
    target = root / module
    target.write_text(target.read_text() + planted)
    result = lint_imports(root)
    assert result.returncode != 0
    assert f"{broken}" in result.stdout and "BROKEN" in result.stdout, result.stdout
    importer = module.removesuffix(".py").replace("/", ".")
    assert importer in result.stdout or importer.rsplit(".", 1)[-1] in result.stdout, result.stdout


ROOMS = ("record", "chain", "integrity", "review", "evidence")


def test_each_audit_room_has_its_door_contract() -> None:
    """One `protected` contract per room: only the room imports the modules inside it."""
    rooms = {f"audit.{room}" for room in ROOMS}
    assert rooms == {name for name in (f"audit.{c}" for c in children("audit")) if (ROOT / name.replace(".", "/")).is_dir()}
    for room in ROOMS:
        contract = contracts()[f"importlinter:contract:room-{room}"]
        assert contract["type"] == "protected"
        assert listed(f"room-{room}", "protected_modules") == [f"audit.{room}.*"]
        assert listed(f"room-{room}", "allowed_importers") == [f"audit.{room}"]


def test_a_module_reaching_inside_an_audit_room_is_caught(tmp_path: Path) -> None:
    """One copy of the code with a reach inside every room, from the service and from a sibling room
    (under `if TYPE_CHECKING:` too): every door contract fails, naming its importer."""
    root = copy_of_the_code(tmp_path)
    planted = {  # a module reaching inside each room, in the order of ROOMS
        "gateway/pipeline/budget.py": "import audit.record.trace  # noqa\n",
        "audit/review/queries.py": "from audit.chain import rows  # noqa\n",
        "audit/evidence/readme.py": TYPE_CHECKING_ONLY.format(module="audit.integrity.merkle"),
        "gateway/writes/envelope.py": "import audit.review.queries  # noqa\n",
        "gateway/cli/audit.py": "import audit.evidence.layout  # noqa\n",
    }
    for module, text in planted.items():
        (root / module).write_text((root / module).read_text() + text)
    result = lint_imports(root)
    out = " ".join(result.stdout.split())  # the report wraps long names
    assert result.returncode != 0
    for room, module in zip(ROOMS, planted):
        assert f"The {room} room is entered through audit.{room} BROKEN" in out, result.stdout
        assert module.removesuffix(".py").replace("/", ".") in out, result.stdout


def imports_of(path: Path, package: str) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """(line, module, names) of each import in a module of `package`, relative ones resolved."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            yield node.lineno, module, tuple(alias.name for alias in node.names)


def sources(*folders: str) -> Iterator[tuple[Path, str]]:
    """Each module under the folders, with the package it is in."""
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield path, ".".join(parts[:-1])


def test_no_module_imports_its_own_package() -> None:
    """A module inside package P that imports P (`import P`, `from P import x`, `from . import x`)
    runs P's `__init__`, which imports the module: an import cycle through the package, however the
    names resolve. A sibling is imported as itself (`import P.x as x`, `from P.x import y`)."""
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path, package in sources(*PACKAGES)
        if path.name != "__init__.py"
        for line, module, _ in imports_of(path, package)
        if module == package
    ]
    assert found == [], "import the sibling module itself, not its package:\n" + "\n".join(found)


def test_tests_and_benches_enter_the_audit_rooms_by_their_doors() -> None:
    """What the room contracts say of the packages, for tests/ and bench/ (no root packages of
    import-linter): `from audit.record import Trace`, never `audit.record.trace`, nor a module of a
    room as a name (`from audit.chain import writes`)."""
    inside = {f"audit.{room}": {p.stem for p in (ROOT / "audit" / room).glob("*.py")} - {"__init__"} for room in ROOMS}
    found = []
    for path, package in sources("tests", "bench"):
        for line, module, names in imports_of(path, package):
            room = ".".join(module.split(".")[:2])
            if room in inside and (module != room or set(names) & inside[room]):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {module} {', '.join(names)}".rstrip())
    assert found == [], "import from the room's __init__ (add the name there if it lacks it):\n" + "\n".join(found)
