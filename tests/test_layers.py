"""The layers only point down: import-linter keeps the contracts in .importlinter (./scripts/check runs
it on the checkout before pytest), every gateway module is placed in them, and each contract fails a
copy of the code with an upward import or a cycle planted in it, under `if TYPE_CHECKING:` too."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
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
