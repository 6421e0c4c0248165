"""The layers only point down: import-linter keeps the contracts in .importlinter, and fails a copy of
the code with an upward import or a cycle planted in it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "connectors", "audit", "gateway")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [str(Path(sys.executable).parent / "lint-imports"), str(root / ".importlinter"), "--no-cache"]
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def copy_of_the_code(tmp_path: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "models", "templates"))
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    return tmp_path


def test_every_layer_contract_is_kept() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout and "6 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "planted", "broken"),
    [
        ("core/errors.py", "import gateway.settings  # noqa\n", "Packages point down"),
        ("connectors/base.py", "import audit.trace  # noqa\n", "Packages point down"),
        ("gateway/settings.py", "import gateway.pipeline.budget  # noqa\n", "Inside gateway"),
        ("gateway/pipeline/budget.py", "import starlette.responses  # noqa\n", "Only the HTTP layer knows Starlette"),
        ("gateway/pipeline/ranking.py", "import gateway.pipeline.budget  # noqa\n", "No cycles"),
        ("gateway/client/calls.py", "import core.errors  # noqa\n", "The client and the adapters know nothing of the service"),
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
