"""One settings table (metis_pg.config.Settings) and the schema check every command makes."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

import metis_pg
from metis_pg import migrate
from metis_pg.config import BaseSpec, Settings, settings_table

from cli_runner import run_cli
from pg_servers import new_database

DOCS = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
UNITS = ("_s", "_ms", "_bytes", "_pct")


def test_docs_settings_md_holds_the_generated_table():
    text = DOCS.read_text(encoding="utf-8")
    between = text.split("<!-- settings-table:start -->\n")[1].split("<!-- settings-table:end -->")[0]
    assert between == settings_table(), "docs/settings.md is out of date: paste metis_pg.config.settings_table()"


def test_every_setting_has_help_and_a_number_names_its_unit():
    for name, info in Settings.model_fields.items():
        assert info.description and len(info.description) > 20, name
        kind = typing.get_args(info.annotation) or (info.annotation,)
        if float in kind:
            assert name.endswith(UNITS), f"{name}: a number's name ends with its unit ({', '.join(UNITS)})"
        elif int in kind:  # a unit, or the things it counts (failures, attempts, connections)
            assert name.endswith(UNITS) or name.endswith("s"), f"{name}: say what the number counts"


def test_settings_come_from_the_environment_and_a_bad_value_names_its_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("METIS_HOME", str(tmp_path))
    monkeypatch.setenv("METIS_DATABASE_URL", "")  # empty = unset
    monkeypatch.setenv("METIS_MAX_BODY_BYTES", "2048")
    settings = Settings.from_env()
    assert (settings.home, settings.database_url, settings.max_body_bytes) == (tmp_path, None, 2048)
    monkeypatch.setenv("METIS_MAX_BODY_BYTES", "a lot")
    with pytest.raises(metis_pg.ConfigError, match="METIS_MAX_BODY_BYTES"):
        Settings.from_env()


def test_a_base_created_without_options_takes_the_spec_defaults(metis, base_name):
    info = metis.create_base(base_name)
    assert BaseSpec.from_json(info.spec) == BaseSpec()


def test_cli_base_create_help_shows_the_spec_defaults():
    result = run_cli("base", "create", "--help")
    assert result.code == 0
    flat = " ".join(result.stdout.replace("│", " ").split())  # rich draws boxes around wrapped help
    assert f"Default {BaseSpec().chunk_size}" in flat and f"Default {BaseSpec().model_timeout_s:g}" in flat


def test_the_code_expects_alembics_head():
    assert migrate.SCHEMA_REVISION == migrate.head_revision()


@pytest.fixture()
def other_database(dsn):
    """A new empty database on the test server; its DSN."""
    with new_database(dsn, "t") as url:
        yield url


def test_connect_creates_a_new_databases_schema_and_refuses_an_old_one(other_database):
    with metis_pg.connect(other_database) as m:  # empty: created
        assert m.list_bases() == []
        m.create_base("made")
    migrate.downgrade(other_database, "0006", settings=Settings.from_env())
    with pytest.raises(metis_pg.SchemaOutOfDate, match=r"metis db upgrade"):
        metis_pg.connect(other_database)
    result = run_cli("base", "list", "--dsn", other_database)
    assert result.code == 5 and "SCHEMA_OUT_OF_DATE" in result.stderr and "metis db upgrade" in result.stderr
    assert run_cli("db", "upgrade", "--dsn", other_database).code == 0
    with metis_pg.connect(other_database) as m:
        assert [b.name for b in m.list_bases()] == ["made"]
