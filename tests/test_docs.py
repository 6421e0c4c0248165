"""The manual is README.md plus the pages in docs/, and bench/README.md with bench/history/.

Where each kind of thing is documented, and so where these tests look for it:

- every setting (`GATEWAY_*`): docs/settings.md;
- every `gateway ...` command: docs/operations.md;
- every route: docs/http-api.md, except the audit trail's (`/v1/audit/...`, `/v1/traces/...`,
  `/audit...`: docs/audit.md) and the MCP server's (`/mcp`, `/.well-known/...`: docs/agents.md);
- every package and module under core/, connectors/, audit/ and gateway/: docs/code-layout.md.

The README is the front door (at most 250 lines, the two quick-start commands); every relative
link in the manual and the benchmark pages resolves, anchors included; every page is reachable
from docs/index.md and leads back to it; every repository path the manual names exists.
The Python client's example is run from docs/agents.md by tests/client/test_client.py.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import click
import pytest

from gateway.cli import main
from gateway.http.app import create_app
from gateway.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"


def page(name: str) -> str:
    return (DOCS / name).read_text()


def manual() -> list[Path]:
    """Every Markdown file of the manual and the benchmarks (links and paths are checked in these)."""
    return [README, *sorted(DOCS.glob("*.md")), *sorted((ROOT / "bench").rglob("*.md"))]


# ---------------------------------------------------------------- settings, commands, routes


def test_every_setting_is_documented_in_the_settings_page() -> None:
    settings = page("settings.md")
    missing = [f"GATEWAY_{f.name.upper()}" for f in fields(Settings) if f"`GATEWAY_{f.name.upper()}`" not in settings]
    assert missing == []


def command_names() -> list[str]:
    names = []
    for name, command in main.commands.items():
        if isinstance(command, click.Group):
            names += [f"gateway {name} {sub}" for sub in command.commands]
        else:
            names.append(f"gateway {name}")
    return names


def test_every_command_is_documented_in_the_operations_page() -> None:
    operations = page("operations.md")
    names = command_names()
    # Each as written in a bullet or a code span: `gateway audit verify [--tenant T]`, `gateway demo`.
    assert names and [n for n in names if not re.search(rf"`{re.escape(n)}[ `]", operations)] == []


def route_page(path: str) -> str:
    """The page that documents a route."""
    if path.startswith(("/v1/audit", "/v1/traces", "/audit")):
        return "audit.md"
    if path.startswith(("/mcp", "/.well-known/")):
        return "agents.md"
    return "http-api.md"


def test_every_route_is_documented_on_its_page() -> None:
    app = create_app(load_settings(environ={}))
    paths = [route.path for route in app.routes]  # type: ignore[attr-defined]
    assert paths
    assert [p for p in paths if p not in page(route_page(p))] == []


# ---------------------------------------------------------------- the README is the front door


def test_the_readme_is_the_front_door() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    # The two quick-start commands, word for word.
    assert "python3.11 -m venv .venv && . .venv/bin/activate && pip install -e . && gateway demo && gateway serve" in text
    assert "\n./scripts/test\n" in text
    # A map of the docs: the README links the index, from which every page is reachable (tested below).
    assert "(docs/index.md)" in text


# ---------------------------------------------------------------- links

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^#{1,6} (.*)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code, where a link is a link."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(lines)


def anchors(text: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (lower case, punctuation dropped, dashes for spaces)."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        heading = None if fenced else HEADING.match(line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(path: Path) -> list[tuple[str, Path, str]]:
    """(link as written, the file it names, its anchor) for every relative link of one file."""
    out = []
    for target in LINK.findall(prose(path.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        out.append((target, (path.parent / file).resolve() if file else path, anchor))
    return out


def broken_links(paths: list[Path], root: Path = ROOT) -> list[str]:
    broken = []
    for path in paths:
        for target, file, anchor in relative_links(path):
            where = f"{path.relative_to(root)}: ({target})"
            if not file.exists():
                broken.append(f"{where}: no such file")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
                broken.append(f"{where}: no such heading")
    return broken


def test_every_relative_link_points_at_a_file_and_heading_that_exist() -> None:
    assert broken_links(manual()) == []


def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\n[b](b.md), [A](#a), [b's c](b.md#c), `[x](y.md)`\n\n```\n[z](z.md)\n```\n")
    (tmp_path / "b.md").write_text("# B\n")
    assert broken_links([tmp_path / "a.md"], tmp_path) == ["a.md: (b.md#c): no such heading"]


def test_every_page_is_reachable_from_the_index_and_leads_back() -> None:
    pages = sorted(DOCS.glob("*.md"))
    reached, todo = set(), [DOCS / "index.md"]
    while todo:
        current = todo.pop()
        if current in reached:
            continue
        reached.add(current)
        todo += [file for _, file, _ in relative_links(current) if file.parent == DOCS and file.suffix == ".md"]
    assert [p.name for p in pages if p not in reached] == []
    # Every page's first line is its place in the manual, starting with a link to the index.
    assert [p.name for p in pages if not p.read_text().startswith("[Manual](index.md)")] == []


# ---------------------------------------------------------------- the code layout

LAYERS = ("core", "connectors", "audit", "gateway", "api")  # api/: the wire models, when present


def modules() -> list[str]:
    """Every package (`x/y/`) and module (`x/y.py`) under the layers, read from the tree."""
    found = []
    for layer in LAYERS:
        if not (ROOT / layer / "__init__.py").exists():
            continue
        for init in sorted((ROOT / layer).rglob("__init__.py")):
            if "__pycache__" in init.parts:
                continue
            package = init.parent
            found.append(f"{package.relative_to(ROOT)}/")
            found += [str(m.relative_to(ROOT)) for m in sorted(package.glob("*.py")) if m.name != "__init__.py"]
    return found


def test_the_code_layout_names_every_package_and_module() -> None:
    layout = page("code-layout.md")
    found = modules()
    assert "gateway/" in found and "core/store.py" in found
    assert [m for m in found if f"`{m}`" not in layout] == []


# ---------------------------------------------------------------- paths the manual names

TOP = r"(?:api|audit|bench|connectors|core|docs|gateway|helm|policies|scripts|tests)"
PATH = re.compile(rf"(?<![\w/.~:-]){TOP}/[\w./*-]*[\w*/]")
FILE = re.compile(r"\.(?:py|md|json|rego|toml|ya?ml|html|css|sh|txt|pem|tar\.gz)$")


def named_paths(text: str) -> set[str]:
    """Repository paths a text names: a file with its extension (`bench/x.py`), or a folder written
    with a trailing slash or at least two levels deep (`gateway/http/templates`). A bare `a/b` is
    left out: in this manual it is as often a name (`gateway/request`, `gateway/trace_id`) as a path."""
    found = set()
    for match in PATH.findall(text):
        path = match.rstrip(".")
        if FILE.search(path) or path.endswith("/") or path.count("/") >= 2:
            found.add(path)
    return found


def test_named_paths_are_found() -> None:
    text = "see `bench/retrieve_bench.py` and tests/test_docs.py, (gateway/policy/opa.py); in gateway/templates/audit."
    text += " Not ./x/tests/y.py, https://h/tests/z.py or the decision path gateway/items."
    assert named_paths(text) == {
        "bench/retrieve_bench.py",
        "tests/test_docs.py",
        "gateway/policy/opa.py",
        "gateway/templates/audit",
    }


@pytest.mark.parametrize("source", ["manual", "pyproject.toml"])
def test_every_path_the_manual_names_exists(source: str) -> None:
    if source == "manual":
        texts = {str(p.relative_to(ROOT)): p.read_text() for p in manual()}
    else:  # the comments of pyproject.toml name the modules a dependency is for
        comments = [line.split("#", 1)[1] for line in (ROOT / source).read_text().splitlines() if "#" in line]
        texts = {source: "\n".join(comments)}
    missing = sorted(f"{name}: {path}" for name, text in texts.items() for path in named_paths(text) if not exists(path))
    assert missing == []


def exists(path: str) -> bool:
    """A repository path; a policy module or data file (`gateway/.../x.rego`) is named as in a bundle,
    relative to `policies/` or to one of the examples in `docs/examples/policies/`."""
    if (ROOT / path).exists() or ("*" in path and any(ROOT.glob(path))):
        return True
    bundles = [ROOT / "policies", *(ROOT / "docs" / "examples" / "policies").iterdir()]
    return path.endswith((".rego", ".json")) and any((bundle / path).exists() for bundle in bundles)
