"""Settings: grouped by concern, each group a frozen value, every variable read as its field's own type."""

from __future__ import annotations

import dataclasses
from dataclasses import fields
from pathlib import Path

import pytest

from core.errors import ConfigurationError
from gateway.context import lexical_engine
from gateway.settings import GROUPS, TYPES, AdmissionSettings, Settings, _convert, load_settings


def test_every_setting_is_in_exactly_one_group() -> None:
    grouped = [f.name for group in GROUPS for f in fields(group)]
    assert len(grouped) == len(set(grouped)), "a setting in two groups"
    assert sorted(grouped) == sorted(f.name for f in fields(Settings))
    settings = Settings()
    assert all(isinstance(settings, group) for group in GROUPS)


def test_lexical_search_is_ranked_by_tantivy_on_either_store_by_default() -> None:
    """`auto` (the default) is Tantivy on SQLite and on PostgreSQL; `store` keeps the store's own engine."""
    assert load_settings(environ={}).lexical_engine == "auto"
    assert [lexical_engine("auto", dialect) for dialect in ("sqlite", "postgresql")] == ["tantivy", "tantivy"]
    assert lexical_engine("store", "postgresql") == "store" and lexical_engine("fts5", "sqlite") == "fts5"


def test_groups_are_frozen_values() -> None:
    settings = load_settings({"admission_actor_rate": 7}, environ={})
    admission: AdmissionSettings = settings
    assert admission.admission_actor_rate == 7
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.admission_actor_rate = 8  # type: ignore[misc]


def test_each_variable_is_read_as_its_fields_real_type() -> None:
    environ = {
        "GATEWAY_PORT": "9000",
        "GATEWAY_EMBEDDINGS_DIMS": "384",  # int | None
        "GATEWAY_MCP": "off",
        "GATEWAY_SEMANTIC_FLOOR": "0.4",
        "GATEWAY_DECISION_LOG": "/tmp/decisions.jsonl",  # Path | None
        "GATEWAY_OPA_URL": "http://127.0.0.1:8181",
    }
    settings = load_settings(environ=environ)
    assert (settings.port, settings.embeddings_dims, settings.mcp, settings.semantic_floor) == (9000, 384, False, 0.4)
    assert settings.decision_log == Path("/tmp/decisions.jsonl") and settings.opa_url == "http://127.0.0.1:8181"
    assert TYPES["embeddings_dims"] == int | None and TYPES["policies_dir"] is Path


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("GATEWAY_PORT", "x", "expected int"),
        ("GATEWAY_PORT", "0", "expected int"),
        ("GATEWAY_MCP", "maybe", "expected bool"),
        ("GATEWAY_LEXICAL_ENGINE", "lucene", "expected auto, tantivy or store"),
    ],
)
def test_a_bad_value_names_its_variable_and_type(name: str, raw: str, expected: str) -> None:
    with pytest.raises(ConfigurationError, match=f"{name}: {expected}"):
        load_settings(environ={name: raw})


def test_a_field_of_a_type_nobody_reads_is_refused_not_guessed() -> None:
    with pytest.raises(TypeError, match="no reader"):  # a list[str] field would need a reader of its own
        _convert("policy_tags", "a,b", list[str])
