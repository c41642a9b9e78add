"""metis_pg's own cosine kernel (metis_pg/db/cosine_kernel.c, issue 24) on the embedded server: the same
distances as pgvector's <=>, the same exact top 50 as float64, used by the hybrid statement, and nothing
lost where it cannot be built or its library moved. Its speed is benchmarks/dense_kernel.py's."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import psycopg
import pytest
from pgvector import HalfVector
from pgvector.psycopg import register_vector

from metis_pg import retrieval
from metis_pg.db import embedded, kernel

DIM = 384


@pytest.fixture()
def bin_path(dsn) -> Path:
    with psycopg.connect(dsn) as conn:
        found = embedded.server_bin_path(conn.info.host)
    if found is None:
        pytest.skip("METIS_DATABASE_URL is another server than the embedded one: the kernel is for the embedded server")
    return found


@pytest.fixture()
def vectors(dsn, bin_path):
    """5,000 random unit halfvec(384) rows in a scratch table, and the rows as float64 (what they store)."""
    rng = np.random.default_rng(24)
    rows = rng.standard_normal((5000, DIM), dtype=np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    rows = rows.astype(np.float16)
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("DROP TABLE IF EXISTS kernel_scratch")
        conn.execute(f"CREATE TABLE kernel_scratch (id bigint, embedding halfvec({DIM}))")
        with conn.cursor().copy("COPY kernel_scratch FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "halfvec"])
            for i, v in enumerate(rows):
                copy.write_row((i, HalfVector(v.astype(np.float32))))
        conn.execute("ANALYZE kernel_scratch")
    yield rows.astype(np.float64)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS kernel_scratch")


def test_the_kernel_gives_pgvectors_distances_and_the_exact_top_50(dsn, bin_path, vectors):
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        assert retrieval.uses_kernel(conn)  # built and created on the session's embedded server
        exact = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        rng = np.random.default_rng(7)
        for _ in range(40):
            q = rng.standard_normal(DIM).astype(np.float32)
            q = (q / np.linalg.norm(q)).astype(np.float16)
            query = HalfVector(q.astype(np.float32))
            ours, theirs = zip(*conn.execute(
                "SELECT metis_cosine_distance(embedding, %(q)s), embedding <=> %(q)s FROM kernel_scratch ORDER BY id",
                {"q": query}).fetchall())
            assert np.max(np.abs(np.array(ours) - np.array(theirs))) < 1e-6
            q64 = q.astype(np.float64) / np.linalg.norm(q.astype(np.float64))
            truth = list(np.lexsort((np.arange(len(exact)), -(exact @ q64)))[:50])
            top = [r[0] for r in conn.execute(
                "SELECT id FROM kernel_scratch ORDER BY metis_cosine_distance(embedding, %(q)s), id LIMIT 50",
                {"q": query})]
            assert top == truth
        # pgvector's answers at the edges: a zero vector is NaN, other dimensions an error.
        zero = conn.execute("SELECT metis_cosine_distance(%s, %s)", (HalfVector([0, 0, 0]), HalfVector([1, 2, 3])))
        assert np.isnan(zero.fetchone()[0])
        with pytest.raises(psycopg.errors.DataException, match="different halfvec dimensions 3 and 2"):
            conn.execute("SELECT metis_cosine_distance(%s, %s)", (HalfVector([1, 2, 3]), HalfVector([1, 2])))


def test_the_hybrid_statement_calls_the_kernel_for_every_cosine():
    statement = retrieval.hybrid_statement(False, True)
    code = "\n".join(line.split("--")[0] for line in statement.splitlines())  # not the comments
    assert "<=>" not in code and code.count("metis_cosine_distance(e.embedding,") == 4
    assert retrieval.hybrid_statement(False, False).count("e.embedding <=> %(query_embedding)s::halfvec") == 4


def test_without_a_compiler_searches_keep_pgvector(dsn, bin_path, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setattr(kernel, "_cache_folder", lambda: tmp_path / "cache")
    monkeypatch.setattr(kernel, "_ready", {})
    with caplog.at_level(logging.INFO, logger="metis_pg.db.kernel"):  # info: an optimisation, not a fault
        assert kernel.library(bin_path) is None
    assert "the cosine kernel is not built" in caplog.text
    with psycopg.connect(dsn) as conn:
        # The function the session made stays, but it is not this build's: not used, nothing raised.
        assert kernel.ensure(conn, bin_path) is False


def test_a_function_pointing_at_a_library_that_is_gone_is_pointed_at_this_machines_build(dsn, bin_path, tmp_path,
                                                                                       monkeypatch):
    # A base backup restored in another home or on another machine brings the function with the path of
    # the first machine's build: the first search there points it at its own.
    built = kernel.library(bin_path)
    moved = Path("/var/tmp") / f"metis-kernel-test-{tmp_path.name}.so"
    shutil.copy(built, moved)
    moved.chmod(0o644)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL(
            "CREATE OR REPLACE FUNCTION public.metis_cosine_distance(halfvec, halfvec) RETURNS float8 AS {},"
            " 'metis_halfvec_cosine_distance' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE").format(
                psycopg.sql.Literal(str(moved))))
    moved.unlink()
    monkeypatch.setattr(kernel, "_ready", {})
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert kernel.ensure(conn, bin_path) is True
    with psycopg.connect(dsn, autocommit=True) as conn:  # a new backend loads the library anew
        library = conn.execute("SELECT probin FROM pg_proc WHERE proname = 'metis_cosine_distance'").fetchone()[0]
        assert library == str(built)
        assert conn.execute("SELECT metis_cosine_distance('[1,0]'::halfvec, '[0,1]'::halfvec)").fetchone()[0] == 1.0
