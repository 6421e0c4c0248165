"""The README is the manual: every setting, command and endpoint is documented there."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import click

from gateway.cli import main
from gateway.http.app import create_app
from gateway.settings import Settings, load_settings

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_every_setting_is_documented() -> None:
    missing = [f"GATEWAY_{f.name.upper()}" for f in fields(Settings) if f"`GATEWAY_{f.name.upper()}`" not in README]
    assert missing == []


def test_every_command_is_documented() -> None:
    names = []
    for name, command in main.commands.items():
        if isinstance(command, click.Group):
            names += [f"gateway {name} {sub}" for sub in command.commands]
        else:
            names.append(f"gateway {name}")
    assert [n for n in names if n not in README] == []


def test_every_route_is_documented() -> None:
    app = create_app(load_settings(environ={}))
    paths = [route.path for route in app.routes]  # type: ignore[attr-defined]
    assert paths and [p for p in paths if p not in README] == []
