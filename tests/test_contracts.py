"""Contracts that hold the project together: public names, the error table, the SQL files,
the migrations, and README's commands being what CI runs.
"""

from __future__ import annotations

import inspect
import re
import shlex
import tomllib
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from metis_pg.config import Settings
import metis_pg
from metis_pg import errors, migrate, sqlfiles
from metis_pg.cli import app
from pg_servers import new_database

ROOT = Path(__file__).resolve().parents[1]


# -- the public surface ------------------------------------------------------------


def test_all_is_exactly_the_public_names():
    public = {
        name for name, value in vars(metis_pg).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    } | set(metis_pg._LAZY)  # imported on first use
    assert len(metis_pg.__all__) == len(set(metis_pg.__all__)), "a name is listed twice in __all__"
    assert sorted(metis_pg.__all__) == sorted(public)


@pytest.mark.parametrize("name", metis_pg.__all__)
def test_each_public_name_is_importable(name):
    namespace: dict = {}
    exec(f"from metis_pg import {name}", namespace)
    assert namespace[name] is getattr(metis_pg, name)


def test_the_typed_search_errors_are_public():
    for name in ("MetisError", "InvalidInput", "BaseNotFound", "EmbeddingModelUnavailable", "RerankerUnavailable"):
        assert name in metis_pg.__all__


# -- the error table of errors.py ---------------------------------------------------

_ROW = re.compile(r"^[\s│├└─]*([A-Z]\w+)(?: \(\w+\))?\s+([A-Z][A-Z_]+)\s+(\d+)\s+(\d{3})\s*$", re.MULTILINE)


def error_table() -> dict[str, tuple[str, int, int]]:
    """Rows of the tree drawn in errors.py's docstring: class -> (code, exit code, HTTP status)."""
    rows = {m[1]: (m[2], int(m[3]), int(m[4])) for m in _ROW.finditer(errors.__doc__)}
    assert rows, "no table found in errors.py's docstring"
    return rows


ERROR_CLASSES = sorted(
    (c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.MetisError)
     and c is not errors.MetisError),
    key=lambda c: c.__name__,
)


@pytest.mark.parametrize("error", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_each_error_has_the_code_exit_code_and_http_status_of_the_table(error):
    table = error_table()
    assert error.__name__ in table, f"{error.__name__} is missing from the table in errors.py"
    assert (error.code, error.exit_code, error.http_status) == table[error.__name__]
    instance = error("something went wrong")
    assert instance.to_dict() == {"error": {"code": error.code, "message": "something went wrong"}}


def test_the_error_table_names_only_existing_classes_with_unique_codes():
    table = error_table()
    assert set(table) == {c.__name__ for c in ERROR_CLASSES}
    codes = [code for code, _, _ in table.values()]
    assert len(codes) == len(set(codes))


def test_the_spec_codes_of_f14():
    assert (errors.EmbeddingModelUnavailable.code, errors.EmbeddingModelUnavailable.exit_code,
            errors.EmbeddingModelUnavailable.http_status) == ("EMBEDDING_MODEL_UNAVAILABLE", 3, 503)
    assert issubclass(errors.InvalidInput, ValueError)
    assert issubclass(errors.EmbeddingModelUnavailable, errors.ModelUnavailable)
    assert issubclass(errors.RerankerUnavailable, errors.ModelUnavailable)


# -- every SQL file is loadable and valid against the schema ----------------------------

# sql/citus/ holds scripts of several statements for a Citus deployment (run by docker/compose.citus.yaml,
# keys.sql also by tests/test_citus_schema.py), not statements the product binds, and complete_scores.sql,
# a part of the hybrid statement on Citus (it reads that statement's CTEs): not EXPLAINed here.
# Files that define a function (CREATE OR REPLACE FUNCTION) are run by a migration, not bound:
# test_function_files_are_what_the_database_runs checks them instead.
FUNCTION_FILES = sorted(p.relative_to(sqlfiles.sql_root()).with_suffix("").as_posix()
                        for p in sqlfiles.sql_root().rglob("*.sql")
                        if p.read_text(encoding="utf-8").lstrip("-").find("CREATE OR REPLACE FUNCTION") >= 0)
# Files of row-level security policies (CREATE POLICY) are run by a migration too:
# test_policy_files_are_what_the_database_enforces checks them.
POLICY_FILES = sorted(p.relative_to(sqlfiles.sql_root()).with_suffix("").as_posix()
                      for p in sqlfiles.sql_root().rglob("*.sql")
                      if "\nCREATE POLICY " in p.read_text(encoding="utf-8"))
SQL_FILES = sorted(p.relative_to(sqlfiles.sql_root()).with_suffix("").as_posix()
                   for p in sqlfiles.sql_root().rglob("*.sql") if p.parent.name != "citus"
                   and p.relative_to(sqlfiles.sql_root()).with_suffix("").as_posix() not in FUNCTION_FILES
                   and p.relative_to(sqlfiles.sql_root()).with_suffix("").as_posix() not in POLICY_FILES)
_PARAM = re.compile(r"%\((\w+)\)[sbt]")  # psycopg placeholders: auto, binary, text format


def _newest_versions(names: list[str]) -> list[str]:
    """Of ``foo.v1``, ``foo.v2``, ...: the highest version of each (an older one is what an older
    migration loaded, replaced since; tests/test_released_sql.py checks those)."""
    newest: dict[str, tuple[int, str]] = {}
    for name in names:
        stem, _, version = name.rpartition(".v")
        key, number = (stem, int(version)) if version.isdigit() else (name, 0)
        newest[key] = max(newest.get(key, (number, name)), (number, name))
    return sorted(name for _, name in newest.values())


def test_function_files_are_what_the_database_runs(metis):
    assert "search/bm25_top_k.v5" in _newest_versions(FUNCTION_FILES)
    with metis.pool.connection() as conn:
        for name in _newest_versions(FUNCTION_FILES):
            text = sqlfiles.load(name)
            # A file may define several functions (bm25_top_k.v4: bm25_top_k, bm25_chunk_scores), and a
            # name may have several overloads (bm25_top_k of v3, 7 arguments, and of v4, 9): each body must be one stored.
            for function, body in re.findall(r"CREATE OR REPLACE FUNCTION (\w+)\(.*?\$function\$(.*?)\$function\$",
                                             text, re.S):
                stored = [r[0] for r in conn.execute("SELECT prosrc FROM pg_proc WHERE proname = %s", (function,))]
                assert body in stored, f"{name}: the database's {function} is not the file's (a new version needs a migration)"


def test_policy_files_are_what_the_database_enforces(metis):
    assert "access/policies.v2" in _newest_versions(POLICY_FILES)
    with metis.pool.connection() as conn:
        stored = {(r[0], r[1]) for r in conn.execute("SELECT tablename, policyname FROM pg_policies"
                                                     " WHERE schemaname = 'public'")}
        enabled = {r[0] for r in conn.execute("SELECT relname FROM pg_class WHERE relrowsecurity"
                                              " AND relnamespace = 'public'::regnamespace")}
    for name in _newest_versions(POLICY_FILES):
        text = sqlfiles.load(name)
        policies = {(table, policy) for policy, table in re.findall(r"^CREATE POLICY (\w+) ON (\w+)", text, re.M)}
        assert policies and policies <= stored, f"{name}: policies missing from the database: {policies - stored}"
        tables = set(re.findall(r"^ALTER TABLE (\w+) ENABLE ROW LEVEL SECURITY", text, re.M))
        assert tables <= enabled, f"{name}: row-level security is off on {tables - enabled}"


def test_sql_files_exist():
    assert "search/hybrid" in SQL_FILES and len(SQL_FILES) >= 10


@pytest.mark.parametrize("name", SQL_FILES)
def test_each_sql_file_loads_and_explains(metis, name):
    text = sqlfiles.load(name)
    assert text == (sqlfiles.sql_root() / f"{name}.sql").read_text(encoding="utf-8")
    assert text.lstrip().startswith("--"), f"{name}.sql has no header comment"
    params = set(_PARAM.findall(text))
    for param in params:  # the header names every parameter the statement binds
        assert f"%({param})" in text.split("\n\n")[0] or re.search(rf"^--.*\b{param}\b", text, re.MULTILINE), (
            f"{name}.sql does not describe its parameter {param!r} in its header"
        )
    # NULL for every parameter: each statement casts what the context does not type.
    statement = sql.SQL("EXPLAIN {}").format(sql.SQL(text.rstrip().rstrip(";")))
    with metis.pool.connection() as conn, conn.transaction(force_rollback=True):
        plan = conn.execute(statement, {p: None for p in params}).fetchall()
    assert plan, f"EXPLAIN of {name}.sql returned no plan"


# -- migrations: up, down to nothing, up again, at head ------------------------------


@pytest.fixture()
def fresh_database(dsn):
    """The URL of a new, empty database on the test server; dropped after the test."""
    with new_database(dsn, "metis_migrations") as url:
        yield url


def schema_of(url: str) -> dict[str, list]:
    """Tables and views with their columns, indexes and constraints of the metis schemas."""
    with psycopg.connect(url) as conn:
        columns = conn.execute(
            "SELECT table_schema, table_name, column_name, data_type, is_nullable FROM information_schema.columns"
            " WHERE table_schema IN ('public', 'metis') AND table_name <> 'alembic_version'"
            " ORDER BY 1, 2, ordinal_position"
        ).fetchall()
        indexes = conn.execute(
            "SELECT schemaname, indexname, indexdef FROM pg_indexes WHERE schemaname IN ('public', 'metis')"
            " AND tablename <> 'alembic_version' ORDER BY 1, 2"
        ).fetchall()
        constraints = conn.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE connamespace = 'public'::regnamespace"
            " AND conrelid NOT IN (SELECT oid FROM pg_class WHERE relname = 'alembic_version') ORDER BY 1"
        ).fetchall()
    return {"columns": columns, "indexes": indexes, "constraints": constraints}


def test_migrations_go_up_down_to_nothing_and_up_again_to_head(fresh_database):
    assert migrate.current_revision(fresh_database, settings=Settings.from_env()) is None
    migrate.upgrade(fresh_database, settings=Settings.from_env())
    assert migrate.is_at_head(fresh_database, settings=Settings.from_env())
    first = schema_of(fresh_database)
    assert {"bases", "chunks", "embeddings", "posting_blocks", "block_lengths"} <= {c[1] for c in first["columns"]}

    migrate.downgrade(fresh_database, "base", settings=Settings.from_env())
    assert migrate.current_revision(fresh_database, settings=Settings.from_env()) is None
    empty = schema_of(fresh_database)
    assert empty == {"columns": [], "indexes": [], "constraints": []}

    migrate.upgrade(fresh_database, settings=Settings.from_env())
    assert migrate.current_revision(fresh_database, settings=Settings.from_env()) == migrate.head_revision()
    assert schema_of(fresh_database) == first


def test_every_revision_steps_down_and_up_one_at_a_time(fresh_database):
    migrate.upgrade(fresh_database, settings=Settings.from_env())
    head = migrate.head_revision()
    seen = [head]
    while migrate.current_revision(fresh_database, settings=Settings.from_env()) is not None:
        migrate.downgrade(fresh_database, "-1", settings=Settings.from_env())
        seen.append(migrate.current_revision(fresh_database, settings=Settings.from_env()))
    assert seen[-1] is None and len(seen) >= 3
    for revision in reversed(seen[:-1]):
        migrate.upgrade(fresh_database, revision, settings=Settings.from_env())
        assert migrate.current_revision(fresh_database, settings=Settings.from_env()) == revision
    assert migrate.is_at_head(fresh_database, settings=Settings.from_env())


def test_the_test_database_is_at_head(dsn):
    assert migrate.is_at_head(dsn, settings=Settings.from_env())


# -- README's commands are what CI runs ----------------------------------------------


def readme_commands() -> list[str]:
    """The one-line ``sh`` blocks of README.md's "Start here", in order."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.split("## Start here", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)\n```", start, re.DOTALL)
    assert len(blocks) >= 2, "README's Start here lost its two commands"
    return [b.strip() for b in blocks]


def ci_lines() -> list[str]:
    text = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_readme_test_command_is_run_verbatim_by_ci():
    demo, tests = readme_commands()[:2]
    assert tests.endswith(".venv/bin/python -m pytest -q") and "'.[test]'" in tests
    assert tests in ci_lines(), f"{tests!r} is not a command line of .ci/run"
    # Its first two commands (the install) and the test command, each as README gives them.
    for command in tests.split(" && "):
        assert any(command in line for line in ci_lines()), command


def test_readme_failure_table_names_every_warning_code_and_ending():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## When a model does not answer", 1)[1].split("\n## ", 1)[0]
    codes = re.findall(r"``([A-Z_]+)``", metis_pg.SearchWarning.__doc__)
    assert {"KEYWORD_ONLY", "FUSED_ORDER", "NO_VECTOR_YET"} <= set(codes)
    for code in codes:
        assert f"`{code}`" in section, code
    for ending in (": results by keywords only", ": results in the fused order", "EMBEDDING_MODEL_UNAVAILABLE"):
        assert ending in section, ending


def test_readme_first_command_installs_and_runs_the_demo():
    demo = readme_commands()[0]
    steps = demo.split(" && ")
    assert steps[:2] == ["python3 -m venv .venv", ".venv/bin/pip install -e ."]
    program, command = shlex.split(steps[2])
    assert program == ".venv/bin/metis"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts["metis"] == "metis_pg.cli:script"
    assert command in {c.name or c.callback.__name__ for c in app.registered_commands}


def test_an_unreachable_database_is_named_as_such_not_as_a_failed_migration():
    with pytest.raises(metis_pg.DatabaseUnavailable, match="could not connect to PostgreSQL") as raised:
        migrate.upgrade("postgresql://nobody@127.0.0.1:1/nothing", settings=Settings.from_env())
    assert "sqlalche.me" not in str(raised.value)


def test_readme_says_what_the_demo_time_depends_on():
    """Issue 25, item 10: one figure of seconds was 76 s here and 485 s at load 2-8 there."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.split("## Start here", 1)[1].split("\n## ", 1)[0]
    assert "chunks/s" in start and "cores" in start and "load" in start
    assert "again" in start and "interrupted" in start  # the demo is run twice in a row
