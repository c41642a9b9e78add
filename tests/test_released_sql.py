"""Released SQL is never edited (issue 23): a function or view file a migration loaded stays as released.

A database migrated at revision N runs the SQL its migrations loaded at the time; an edit of
such a file afterwards changes nothing there, while the code and a freshly migrated database
(tests/test_contracts.py) assume the edit. A change is a new versioned file and a migration.

- :data:`RELEASED` is the checksum of every file a migration loads, with that migration: a
  new one gets its row when its migration is written, and a row never changes.
- With the git history at hand, each file is also compared with its text in the first commit
  of this branch's first-parent history that holds its migration (its release).
- A database upgraded from 0010 (before the posting blocks) runs the newest keyword function.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import subprocess
from pathlib import Path

import psycopg
import pytest

from metis_pg.config import Settings
from metis_pg import migrate, sqlfiles
from pg_servers import new_database

ROOT = Path(__file__).resolve().parent.parent
MIGRATIONS = ROOT / "migrations" / "versions"

#: sql/<name>.sql -> (revision of the migration that loads it, sha256 of its released text).
RELEASED: dict[str, tuple[str, str]] = {
    "views/base_health.v1": ("0003", "7deaaebb4ea10dc8177b02ee89b89ae68f8dd28421092017a322b9358b0be39e"),
    "views/chunk_citations.v1": ("0003", "52c0d0b6434362226beb03c71c52874c1dc4530d42ce4ebbc2c86ab18b6964bb"),
    "views/searches_per_day.v1": ("0003", "94b9e631b3a612a6ae7a3832fe52dfa035618d3e5725a3d39260508c59c41876"),
    "views/base_health.v2": ("0008", "a2249350251ca86b16ad98fa3542dcb117f88838d476ef1f7cf68dc8143d89d4"),
    "views/chunk_citations.v2": ("0009", "0fd58c86248fb320873b0175c6b3a48d06f653cdc09829bdc19806e1080e2ae4"),
    "search/bm25_top_k.v1": ("0011", "2dcc8a56a3e85c583cb1e3ead11e2a9460e6288458628a7880c95ad68366164f"),
    "views/postings.v1": ("0011", "482473498cbdf8bb327f9dd7d2b4f33e79f7a978f60db860a1cf0713eec569ec"),
    "search/bm25_top_k.v2": ("0012", "4417812e68b5ba498bdbe3864b1ea79ae531cc2d9b39cfa4b756b7bcebb60ad4"),
    "search/bm25_top_k.v3": ("0013", "20c8aa02584b8abc2a1afd68836dcb306917da0258274aa6d74c3946cfed6ffb"),
    "views/chunk_citations.v3": ("0013", "2da60921d05fa0132c81943aed7e53d9436b0bf36d69b3cee2e5fe2cc484d70a"),
    "views/base_health.v3": ("0013", "f9be5c8bb7e596c400cf6b9063cd46b186900cd8d33434cd338ba14c9fa83e69"),
    "views/postings.v2": ("0013", "a23c88c5745a9c6e5bfdd754e194103c487c7e9506ab26332347f491f576db04"),
    "analyst/login_limits.v1": ("0014", "d4fbbb1878ae5790f135a776ef7502649c2c01f197b7a67c85031f6da31ecfcf"),
    "analyst/set_limits": ("0014", "3fe2208c9696badd527a4e9f519bbf23ac0c01b1a33e6c4e538f47d8e168f590"),
    "views/documents.v1": ("0015", "5d2f4b74cb4da69a70858c3894426c8e75796744d3619712fea83c106d06ad2d"),
    "views/chunk_citations.v4": ("0015", "cc1814d3abf27c00234da0d85cb7137667ce421fbc7c764b1c871d6d77a468c2"),
    "search/bm25_top_k.v4": ("0016", "8486b7750e346d718ae20c4eccceb089d8e791c00e715cbfb054bc81b63eeaf4"),
    "views/chunk_citations.v5": ("0019", "587b947c57f5139db35625cd40f78aa566b1f0bb62ac7e5a2ba6bcac86aa6432"),
    "access/functions.v1": ("0020", "c29745181bbee4460dc30ae9fad1d9988bb11643339595b0b3bb33b56395ff4b"),
    "access/policies.v1": ("0020", "0f2221e2f080c0d8f8098f8f854355ed5b5549a9982bd5ea025c07485a57794f"),
    "search/bm25_top_k.v5": ("0023", "c70cee9201f2944abad8321570e1129a5a6dd8bd4a53686db42a448e5d109a62"),
    "views/postings.v3": ("0023", "6a5d5334f0f1ce7cb8f3719485eeeffaf227f0d5617100606020db7720b9219e"),
    "access/row_readers.v1": ("0024", "b2a46fd7c428a5e8233c61d66c57dad248cc93a60bc08041f9508f4d5f8dabd9"),
    "access/policies.v2": ("0024", "3a33f8595b7af82217c8c4e6282caaf9ebec32177811ca6df2a76c290ef4f041"),
}

_LOAD = re.compile(r"""sqlfiles\.load\((f?)["']([^"']+)["']\)""")


def _migration_files() -> dict[str, Path]:
    """revision -> its migration file."""
    found = {}
    for path in sorted(MIGRATIONS.glob("*.py")):
        match = re.search(r'^revision: str = "(\w+)"', path.read_text(encoding="utf-8"), re.MULTILINE)
        if match:
            found[match[1]] = path
    return found


def loaded_by_migrations() -> dict[str, str]:
    """sql/<name> -> revision of the migration that loads it (an f-string over VIEWS expanded)."""
    loads: dict[str, str] = {}
    for revision, path in _migration_files().items():
        for is_f, name in _LOAD.findall(path.read_text(encoding="utf-8")):
            if not is_f:
                loads.setdefault(name, revision)
                continue
            spec = importlib.util.spec_from_file_location(f"_migration_{revision}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            for view in module.VIEWS:  # the only f-string: views/{view}.v1 (migration 0003)
                loads.setdefault(name.format(view=view), revision)
    return loads


def test_the_table_names_every_file_a_migration_loads_and_no_other():
    assert {name: revision for name, (revision, _) in RELEASED.items()} == loaded_by_migrations()


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_a_released_file_keeps_its_released_text(name):
    text = (sqlfiles.sql_root() / f"{name}.sql").read_bytes()
    assert hashlib.sha256(text).hexdigest() == RELEASED[name][1], (
        f"sql/{name}.sql was edited after migration {RELEASED[name][0]} loaded it: restore it, and put the"
        " change in a new version file loaded by a new migration"
    )


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True).stdout


def _history() -> str | None:
    """Why the git check cannot run here, or None."""
    try:
        if _git("rev-parse", "--is-shallow-repository").strip() == "true":
            return "a shallow clone has no release history"
    except (OSError, subprocess.CalledProcessError):
        return "no git history here (an installed package or an exported tree)"
    return None


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_a_released_file_is_its_text_at_the_release_of_its_migration(name):
    why = _history()
    if why is not None:
        pytest.skip(f"{why}: the checksums of RELEASED are checked instead")
    migration = _migration_files()[RELEASED[name][0]].relative_to(ROOT).as_posix()
    # The first commit of the first-parent history that holds the migration: on main, the merge
    # (or commit) that released it; commits of a helper's branch before its merge do not count.
    added = _git("log", "--first-parent", "--diff-filter=A", "--format=%H", "HEAD", "--", migration).split()
    if not added:
        pytest.skip(f"{migration} is not committed yet")
    released = _git("show", f"{added[-1]}:sql/{name}.sql")
    assert (sqlfiles.sql_root() / f"{name}.sql").read_text(encoding="utf-8") == released, (
        f"sql/{name}.sql differs from its text at {added[-1][:10]}, which released migration {RELEASED[name][0]}"
    )


@pytest.fixture()
def fresh_database(dsn):
    """The URL of a new, empty database on the test server; dropped after the test."""
    with new_database(dsn, "metis_released") as url:
        yield url


def _body(name: str) -> str:
    return sqlfiles.load(name).split("$function$")[1]


def _running(url: str, function: str) -> list[tuple[str]]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT prosrc FROM pg_proc WHERE proname = %s", (function,)).fetchall()


def test_a_database_upgraded_from_0010_runs_the_newest_keyword_function(fresh_database):
    migrate.upgrade(fresh_database, "0010", settings=Settings.from_env())
    assert _running(fresh_database, "bm25_top_k") == []
    migrate.upgrade(fresh_database, "0011", settings=Settings.from_env())
    assert _running(fresh_database, "bm25_top_k") == [(_body("search/bm25_top_k.v1"),)]  # what 0011 released
    migrate.upgrade(fresh_database, "0014", settings=Settings.from_env())
    assert _running(fresh_database, "bm25_top_k") == [(_body("search/bm25_top_k.v3"),)]  # migration 0013
    migrate.upgrade(fresh_database, "0022", settings=Settings.from_env())
    # 0016 (issue 20) adds v4's overload with the phrase and exclusion filters (9 arguments); v3's stays.
    assert sorted(_running(fresh_database, "bm25_top_k")) == sorted(
        [(_body("search/bm25_top_k.v3"),), (_body("search/bm25_top_k.v4"),)])
    migrate.upgrade(fresh_database, settings=Settings.from_env())
    # 0023 (issue 24): v5 reads the narrower posting rows; v3's 7 arguments call it with no filters.
    v5 = sqlfiles.load("search/bm25_top_k.v5").split("$function$")
    assert sorted(_running(fresh_database, "bm25_top_k")) == sorted([(v5[1],), (v5[5],)])
    migrate.downgrade(fresh_database, "0022", settings=Settings.from_env())
    assert sorted(_running(fresh_database, "bm25_top_k")) == sorted(
        [(_body("search/bm25_top_k.v3"),), (_body("search/bm25_top_k.v4"),)])
    migrate.downgrade(fresh_database, "0012", settings=Settings.from_env())
    assert _running(fresh_database, "bm25_top_k") == [(_body("search/bm25_top_k.v2"),)]
    migrate.downgrade(fresh_database, "0011", settings=Settings.from_env())
    assert _running(fresh_database, "bm25_top_k") == [(_body("search/bm25_top_k.v1"),)]
