"""./scripts/check, the checks CI runs before pytest, passes on a copy of the code and fails on the same
copy with one violation of each check planted in it, naming every file at fault: a format error
(ruff format --check), an unused import (ruff check), a type error (mypy), an upward import and an
upward import under `if TYPE_CHECKING:` (lint-imports).

The copy is checked twice, clean then planted, so each tool runs twice; mypy's cache lives in the
copy, so the second run re-checks only what the plants touch."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECKS = ("ruff check", "ruff format --check", "mypy", "lint-imports")

# Each file ends inside a def or class: two blank lines keep the planted statement formatted.
FORMAT = ("audit/record/trace.py", "\n\nPLANTED_FORMAT = ( 1,2 )\n")
LINT = ("connectors/base.py", "\n\nimport colorsys\n")
TYPE = ("core/errors.py", '\n\ndef planted_type_error() -> int:\n    return "not an int"\n')
# The import the issue says passed while gateway.client was missing from the layers.
UPWARD = ("gateway/settings.py", "\n\nimport gateway.client  # noqa: F401\n")
UPWARD_TYPE_CHECKING = (
    "gateway/admission/quota.py",
    "\n\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from gateway.policy.base import PolicyEngine  # noqa: F401\n",
)
PLANTS = (FORMAT, LINT, TYPE, UPWARD, UPWARD_TYPE_CHECKING)


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str

    def section(self, check: str) -> str:
        """What one check printed: from its header to the next one."""
        headers = [f"== {name}\n" for name in CHECKS]
        start = self.stdout.index(headers[CHECKS.index(check)])
        ends = [self.stdout.find(h, start + 1) for h in headers]
        end = min([e for e in ends if e > start] + [len(self.stdout)])
        return self.stdout[start:end]


def check(root: Path) -> Run:
    result = subprocess.run([str(ROOT / "scripts" / "check"), str(root)], capture_output=True, text=True, timeout=600)
    return Run(result.returncode, result.stdout, result.stderr)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Run, dict[str, int]]:
    """The copy checked clean, then with every plant; and the line each plant starts on."""
    root = tmp_path_factory.mktemp("checked")
    for package in ("api", "core", "connectors", "audit", "gateway", "tests", "bench"):  # what [tool.mypy] checks
        shutil.copytree(ROOT / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", ".importlinter"):
        shutil.copy(ROOT / name, root / name)
    clean = check(root)
    lines = {}
    for module, planted in PLANTS:
        target = root / module
        text = target.read_text()
        lines[module] = text.count("\n") + len(planted) - len(planted.lstrip("\n")) + 1  # its first line
        target.write_text(text + planted)
    return clean, check(root), lines


def test_a_clean_copy_passes_every_check(runs: tuple[Run, Run, dict[str, int]]) -> None:
    clean, _, _ = runs
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert all(f"== {name}\n" in clean.stdout for name in CHECKS)
    assert "== all checks passed" in clean.stdout


def test_every_check_runs_and_each_failure_is_named(runs: tuple[Run, Run, dict[str, int]]) -> None:
    _, planted, _ = runs
    assert planted.returncode == 1
    assert all(f"== {name}\n" in planted.stdout for name in CHECKS), planted.stdout
    assert "== FAILED: ruff check, ruff format --check, mypy, lint-imports" in planted.stderr, planted.stderr
    assert "all checks passed" not in planted.stdout


def test_a_format_error_fails_ruff_format_naming_the_file(runs: tuple[Run, Run, dict[str, int]]) -> None:
    _, planted, lines = runs
    out = planted.section("ruff format --check")
    assert f"--> {FORMAT[0]}:{lines[FORMAT[0]]}:" in out and "1 file would be reformatted" in out, out


def test_an_unused_import_fails_ruff_check_naming_the_file_and_line(runs: tuple[Run, Run, dict[str, int]]) -> None:
    _, planted, lines = runs
    out = planted.section("ruff check")
    assert f"{LINT[0]}:{lines[LINT[0]]}:8" in out and "F401" in out, out
    assert "Found 1 error" in out, out  # the plants for the other checks are clean under ruff check


def test_a_type_error_fails_mypy_naming_the_file_and_line(runs: tuple[Run, Run, dict[str, int]]) -> None:
    _, planted, lines = runs
    out = planted.section("mypy")
    assert f"{TYPE[0]}:{lines[TYPE[0]] + 1}: error: Incompatible return value type" in out, out
    assert "Found 1 error in 1 file" in out, out


def test_an_upward_import_fails_the_layers_naming_the_importer(runs: tuple[Run, Run, dict[str, int]]) -> None:
    _, planted, lines = runs
    out = planted.section("lint-imports")
    assert "Inside gateway: adapters, client, http on top, settings at the bottom BROKEN" in out, out
    assert f"gateway.settings -> gateway.client (l.{lines[UPWARD[0]]})" in out, out


def test_an_upward_import_under_type_checking_counts(runs: tuple[Run, Run, dict[str, int]]) -> None:
    _, planted, lines = runs
    out = planted.section("lint-imports")
    assert f"gateway.admission.quota -> gateway.policy.base (l.{lines[UPWARD_TYPE_CHECKING[0]] + 3})" in out, out
