"""The search statement may run its dense scan in parallel (issue 24), for the operator and for principals.

One parallel-unsafe function anywhere in a statement makes PostgreSQL plan all of it in one process.
Migration 0020 created ``metis_hidden_chunks`` (called by sql/search/hybrid.sql's ``hidden`` CTE)
without a parallel label, i.e. PARALLEL UNSAFE, and every search scanned its vectors alone from then
on; migration 0021 labels it PARALLEL RESTRICTED. These tests plan the very statement and parameters
``retrieval.run_search`` sends, with parallel costs set to zero so that a small table qualifies, and
check the dense leg's scan is a parallel one; then run it so, on behalf of a group, and check the
dense leg is still the exact cosine top 50 over the chunks that group may read. Last, that on behalf
of a group no SubPlan of the statement reads the documents (the policies of migration 0024).

Then what the dense leg does besides its distances: with copies collapsed it gives a text to its best
leg_limit rows only when they hold no copy, and its scan compares no model name while the bases hold
vectors of one model; a base midway through a switch of model still ranks each model's vectors only.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest

import metis_pg
from metis_pg import access, retrieval, storage
from metis_pg.chunking import Chunk

MODEL = "parallel-test:384"
DIM = 384
DOCS = 300  # one chunk each; every 10th in the source readable by hr only

#: A plan in which a parallel scan costs nothing more than a plain one: the planner then chooses it
#: whenever the statement allows parallel workers at all.
PARALLEL_FREE = {"parallel_setup_cost": "0", "parallel_tuple_cost": "0", "min_parallel_table_scan_size": "0",
                 "max_parallel_workers_per_gather": "2"}


def _one_chunk_document(conn, base_id: int, source_id: int, path: str, text: str,
                        vector: np.ndarray) -> tuple[int, int]:
    """Write a document of one chunk, `text`, with its MODEL `vector`; return (document id, chunk id)."""
    chunk = Chunk(ordinal=0, text=text, title="", headings=(), page=None, line=1, char_start=0, char_end=len(text))
    doc_id = storage.write_document(conn, base_id=base_id, source_id=source_id,
                                    meta=storage.DocumentMeta(path, "", "txt", path, len(text)),
                                    chunks=[chunk], vectors=[vector], model=MODEL)
    chunk_id = conn.execute("SELECT chunk_id FROM chunks WHERE document_id = %s", (doc_id,)).fetchone()[0]
    return doc_id, chunk_id


@pytest.fixture(scope="module")
def base(metis: metis_pg.Metis):
    """A base of DOCS one-chunk documents with random unit vectors; yields (base_id, {chunk_id: vector}, hr chunk ids)."""
    name = f"t-par-{uuid.uuid4().hex[:8]}"
    rng = np.random.default_rng(24)
    metis.create_base(name)
    vectors: dict[int, np.ndarray] = {}
    hr_only: set[int] = set()
    with metis.pool.connection() as conn:
        row = storage.get_base(conn, name)
        open_source = storage.ensure_source(conn, row.base_id, "open", "/open")
        hr_source = storage.ensure_source(conn, row.base_id, "hr", "/hr")
        conn.execute("UPDATE sources SET readers = '{hr}' WHERE source_id = %s", (hr_source,))
        for d in range(DOCS):
            v = rng.standard_normal(DIM).astype(np.float32)
            v /= np.linalg.norm(v)
            source = hr_source if d % 10 == 0 else open_source
            _, chunk_id = _one_chunk_document(conn, row.base_id, source, f"d{d}.txt", f"document {d} words", v)
            vectors[chunk_id] = v.astype(np.float16).astype(np.float64)  # what halfvec stores
            if source == hr_source:
                hr_only.add(chunk_id)
        conn.execute("ANALYZE embeddings")
    yield row.base_id, vectors, hr_only
    metis.drop_base(name)


class _Cursor:
    """A cursor that records every (statement, parameters) it runs, then runs them."""

    def __init__(self, cursor, seen: list) -> None:
        self._cursor, self._seen = cursor, seen

    def __enter__(self):
        self._cursor.__enter__()
        return self

    def __exit__(self, *exc):
        return self._cursor.__exit__(*exc)

    def execute(self, query, params=None, **kwargs):
        self._seen.append((query, params))
        self._cursor.execute(query, params, **kwargs)
        return self

    def __getattr__(self, name):
        return getattr(self._cursor, name)


class _Capturing:
    """A connection whose cursors record what they run (:class:`_Cursor`)."""

    def __init__(self, conn, seen: list) -> None:
        self._conn, self._seen = conn, seen

    def cursor(self, *args, **kwargs):
        return _Cursor(self._conn.cursor(*args, **kwargs), self._seen)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def _dense_cte(plan: str) -> str:
    # The leg's scan is in dense_read; dense then drops copies of one text from its rows (issue 20).
    return plan.split("CTE dense_read\n", 1)[1].split("CTE dense\n", 1)[0]


@pytest.mark.parametrize("principals", [None, ["eng"]], ids=["operator", "on behalf of eng"])
@pytest.mark.parametrize("terms", [[], ["document", "words"]], ids=["dense", "hybrid"])
def test_the_dense_leg_is_planned_parallel_and_stays_exact(metis, base, principals, terms):
    base_id, vectors, hr_only = base
    query = np.random.default_rng(5).standard_normal(DIM).astype(np.float32)
    query /= np.linalg.norm(query)
    seen: list = []
    with metis.pool.connection() as conn:
        for setting, value in PARALLEL_FREE.items():
            conn.execute("SELECT set_config(%s, %s, true)", (setting, value))
        if principals:
            access.begin_on_behalf(conn, principals)
        found, _ = retrieval.run_search(_Capturing(conn, seen), base_ids=[base_id], model=MODEL,
                                        query_embedding=query, terms=terms, top_k=50,
                                        filters=retrieval.Filters())
        statement, params = next((q, p) for q, p in seen if isinstance(q, str) and "dense AS MATERIALIZED" in q)
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN (COSTS OFF) " + statement, params))

    dense = _dense_cte(plan)
    # Any parallel node at all needs every function of the statement to be parallel safe or
    # restricted. On behalf of principals, the policy on embeddings adds a hashed sub-plan over
    # documents; with every parallel cost at zero the planner may run that sub-plan in parallel
    # rather than the scan (on 100,000 rows at the server's costs it runs the scan in parallel:
    # docs/performance.md), so only a parallel node in the leg is asked for there.
    assert "Gather" in dense, plan
    if not principals:
        assert "Parallel Seq Scan on embeddings" in dense, plan
    # The leg's ranks are numpy's exact cosine order over the chunks the caller may read.
    readable = {c: v for c, v in vectors.items() if not (principals and c in hr_only)}
    ids = np.array(sorted(readable))
    matrix = np.array([readable[c] for c in ids])
    q = query.astype(np.float16).astype(np.float64)  # the statement casts the question to halfvec too
    cosine = matrix @ q / np.linalg.norm(matrix, axis=1) / np.linalg.norm(q)
    exact = ids[np.lexsort((ids, -cosine))].tolist()
    ranked = {c.dense_rank: c.chunk_id for c in found if c.dense_rank is not None}
    if not terms:
        assert sorted(ranked) == list(range(1, 51))
    assert ranked and all(exact[rank - 1] == chunk_id for rank, chunk_id in ranked.items())
    assert not (principals and {c.chunk_id for c in found} & hr_only)


def _subplans_reading(node: dict, relation: str, under_subplan: bool = False) -> list[str]:
    """The scans of `relation` in `node`'s tree that run inside a SubPlan (a plan node PostgreSQL
    runs for the rows of another, hashed or per row), as "SubPlan name: node type"."""
    found = []
    inside = under_subplan or node.get("Parent Relationship") == "SubPlan"
    if inside and node.get("Relation Name") == relation:
        found.append(node["Node Type"])
    for child in node.get("Plans", []):
        found += _subplans_reading(child, relation, inside)
    return found


@pytest.mark.parametrize("terms", [[], ["document", "words"]], ids=["dense", "hybrid"])
def test_the_policies_read_no_documents_per_reference_on_behalf_of_a_group(metis, base, terms):
    # Migration 0024 (docs/security.md): the policies on chunks, embeddings and facts compare the
    # row's own readers with the principals. Version 1's `document_id IN (SELECT ... FROM documents)`
    # added, to every reference to these tables in the search statement, a SubPlan reading every
    # readable document (six in the hybrid statement: the dense scan, the complete scores' vector
    # lookups, the final fetch ...). Only the statement's own reads of documents are left: the
    # final join's lookups of the rows fetched, and allowed_documents (a CTE, not a SubPlan).
    base_id, _, _ = base
    query = np.random.default_rng(6).standard_normal(DIM).astype(np.float32)
    query /= np.linalg.norm(query)
    seen: list = []
    with metis.pool.connection() as conn:
        access.begin_on_behalf(conn, ["eng"])
        retrieval.run_search(_Capturing(conn, seen), base_ids=[base_id], model=MODEL, query_embedding=query,
                             terms=terms, top_k=10, filters=retrieval.Filters())
        statement, params = next((q, p) for q, p in seen if isinstance(q, str) and "dense AS MATERIALIZED" in q)
        plan = conn.execute("EXPLAIN (COSTS OFF, FORMAT JSON) " + statement, params).fetchone()[0][0]["Plan"]
    assert _subplans_reading(plan, "documents") == []
    # The policies are still there: the rows read are filtered by their own readers.
    assert "(readers && (InitPlan" in str(plan)


# -- What the dense leg does besides its distances (issue 24) ------------------------------------------

OTHER_MODEL = "parallel-other:384"


def _explained(conn, statement: str, params: dict) -> dict:
    return conn.execute("EXPLAIN (ANALYZE, COSTS OFF, FORMAT JSON) " + statement, params).fetchone()[0][0]["Plan"]


def _nodes(node: dict):
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def _statement_of(metis, base_id: int, query: np.ndarray, model: str = MODEL, **kwargs) -> tuple[str, dict, list]:
    """run_search's own statement and parameters for a dense search of `base_id`, and what it found."""
    seen: list = []
    with metis.pool.connection() as conn:
        found, _ = retrieval.run_search(_Capturing(conn, seen), base_ids=[base_id], model=model, query_embedding=query,
                                        terms=[], top_k=10, filters=retrieval.Filters(), **kwargs)
    statement, params = next((q, p) for q, p in seen if isinstance(q, str) and "dense AS MATERIALIZED" in q)
    return statement, params, found


def _exact(vectors: dict[int, np.ndarray], query: np.ndarray) -> list[int]:
    ids = np.array(sorted(vectors))
    matrix = np.array([vectors[c] for c in ids])
    q = query.astype(np.float16).astype(np.float64)
    cosine = matrix @ q / np.linalg.norm(matrix, axis=1) / np.linalg.norm(q)
    return ids[np.lexsort((ids, -cosine))].tolist()


def test_the_texts_of_the_dense_leg_are_looked_up_for_its_best_rows_only_when_they_hold_no_copy(metis, base):
    # With copies collapsed the leg reads COPIES_READ x leg_limit rows (200); it used to look up the
    # text of all 200 (a primary-key lookup each). Its best leg_limit rows hold no copy here (every
    # text differs), so they are the leg as it is: only their 50 texts are read. test_copies checks
    # the leg when the best rows do hold copies.
    base_id, vectors, _ = base
    query = np.random.default_rng(8).standard_normal(DIM).astype(np.float32)
    query /= np.linalg.norm(query)
    statement, params, found = _statement_of(metis, base_id, query)
    assert params["collapse_copies"] and params["leg_read"] == retrieval.COPIES_READ * params["leg_limit"]
    with metis.pool.connection() as conn:
        plan = _explained(conn, statement, params)
    # The rows of the scan the leg joins with their chunks' texts (in dense_head, and in dense).
    legs = [n for n in plan.get("Plans", []) if n.get("Subplan Name") in ("CTE dense_head", "CTE dense")]
    assert legs
    with_text = sum(n["Actual Rows"] * n["Actual Loops"] for leg in legs for n in _nodes(leg)
                    if n["Node Type"] == "CTE Scan" and n.get("CTE Name") == "dense_read")
    assert with_text == params["leg_limit"], with_text
    ranked = sorted((c.dense_rank, c.chunk_id) for c in found)
    assert [c for _, c in ranked] == _exact(vectors, query)[:10]


def test_the_dense_scan_compares_no_model_name_while_the_bases_hold_vectors_of_one_model(metis, base):
    # Every row's model was compared with the question's (a text comparison, about a tenth of the scan);
    # it is now compared only when the bases hold vectors of another model too (an InitPlan first).
    base_id, _, _ = base
    query = np.random.default_rng(9).standard_normal(DIM).astype(np.float32)
    statement, params, _ = _statement_of(metis, base_id, query)
    with metis.pool.connection() as conn:
        plan = _explained(conn, statement, params)
    scans = [n for n in _nodes(plan) if n.get("Relation Name") == "embeddings" and "Seq Scan" in n["Node Type"]]
    assert len(scans) == 1
    assert f"(base_id = {base_id})" in scans[0]["Filter"] and "(InitPlan" in scans[0]["Filter"], scans[0]["Filter"]
    assert ".col1 OR (model = " in scans[0]["Filter"], scans[0]["Filter"]


def test_the_dense_scan_compares_one_base_by_equality(metis, base):
    # base_id = ANY('{7}') was evaluated on every row of the scan: about twice the cost of base_id = 7
    # (2.5-3 of ~5 ms of backend CPU per 100k rows, docs/performance.md). With one base the planner now
    # folds the filter to an equality; with several it stays = ANY (and on Citus, which prunes by it).
    base_id, _, _ = base
    query = np.random.default_rng(10).standard_normal(DIM).astype(np.float32)
    statement, params, _ = _statement_of(metis, base_id, query)
    with metis.pool.connection() as conn:
        for base_ids, expected in (([base_id], f"(base_id = {base_id})"), ([base_id, -1], "(base_id = ANY (")):
            plan = _explained(conn, statement, {**params, "base_ids": base_ids})
            scans = [n for n in _nodes(plan) if n.get("Relation Name") == "embeddings" and "Seq Scan" in n["Node Type"]]
            assert len(scans) == 1 and expected in scans[0]["Filter"], (base_ids, scans[0]["Filter"])
            assert ("ANY" in scans[0]["Filter"]) == (len(base_ids) > 1), scans[0]["Filter"]
    assert "CASE WHEN cardinality" not in retrieval.hybrid_statement(True)
    assert retrieval.hybrid_statement(True).count("AND e.base_id = ANY(%(base_ids)s::int[])") >= 2


@pytest.fixture(scope="module")
def two_models(metis: metis_pg.Metis):
    """A base midway through a switch of model: every chunk has a MODEL vector, half of them an
    OTHER_MODEL one too; yields (base_id, {chunk_id: MODEL vector}, {chunk_id: OTHER_MODEL vector})."""
    name = f"t-two-{uuid.uuid4().hex[:8]}"
    rng = np.random.default_rng(25)
    metis.create_base(name)
    first: dict[int, np.ndarray] = {}
    other: dict[int, np.ndarray] = {}
    with metis.pool.connection() as conn:
        row = storage.get_base(conn, name)
        source = storage.ensure_source(conn, row.base_id, "open", "/open")
        for d in range(120):
            v = rng.standard_normal(DIM).astype(np.float32)
            v /= np.linalg.norm(v)
            doc_id, chunk_id = _one_chunk_document(conn, row.base_id, source, f"p{d}.txt", f"page {d}", v)
            first[chunk_id] = v.astype(np.float16).astype(np.float64)
            if d % 2:
                w = rng.standard_normal(DIM).astype(np.float32)
                w /= np.linalg.norm(w)
                with conn.cursor() as cur:
                    storage.vectors.copy_vectors(cur, row.base_id, OTHER_MODEL, [(chunk_id, doc_id, w, None)])
                other[chunk_id] = w.astype(np.float16).astype(np.float64)
    yield row.base_id, first, other
    metis.drop_base(name)


@pytest.mark.parametrize("which", ["first", "other"])
def test_a_base_holding_two_models_ranks_each_models_vectors_only(metis, two_models, which):
    base_id, first, other = two_models
    vectors, model = (first, MODEL) if which == "first" else (other, OTHER_MODEL)
    query = np.random.default_rng(10).standard_normal(DIM).astype(np.float32)
    query /= np.linalg.norm(query)
    seen: list = []
    with metis.pool.connection() as conn:
        for setting, value in PARALLEL_FREE.items():
            conn.execute("SELECT set_config(%s, %s, true)", (setting, value))
        found, _ = retrieval.run_search(_Capturing(conn, seen), base_ids=[base_id], model=model,
                                        query_embedding=query, terms=[], top_k=50, filters=retrieval.Filters())
    ranked = sorted((c.dense_rank, c.chunk_id) for c in found)
    assert [c for _, c in ranked] == _exact(vectors, query)[:50]
    assert all(abs(c.dense - float(vectors[c.chunk_id] @ query.astype(np.float16).astype(np.float64)
                                   / np.linalg.norm(vectors[c.chunk_id])
                                   / np.linalg.norm(query.astype(np.float16).astype(np.float64)))) < 1e-3
               for c in found)


def test_a_replaced_fact_in_the_best_rows_gives_its_place_to_a_holding_copy_past_them(metis):
    # The best leg_limit rows hold no two copies of one text, but one of them is a replaced fact whose
    # text a holding fact repeats far down the list (rank 120 of 120): the holding copy takes the
    # replaced one's place (sql/search/hybrid.sql, SPEC F11), so the rows past the head are read.
    name = f"t-held-{uuid.uuid4().hex[:8]}"
    rng = np.random.default_rng(26)
    query = rng.standard_normal(DIM).astype(np.float32)
    query /= np.linalg.norm(query)
    metis.create_base(name)
    try:
        vectors: dict[int, np.ndarray] = {}
        docs: dict[int, int] = {}  # d -> chunk id
        documents: dict[int, int] = {}  # d -> document id
        with metis.pool.connection() as conn:
            row = storage.get_base(conn, name)
            source = storage.ensure_source(conn, row.base_id, "open", "/open")
            for d in range(120):
                v = rng.standard_normal(DIM).astype(np.float32)
                if d in (0, 1):  # the replaced fact nearest the question, its holding copy farthest
                    v = query.copy() if d == 0 else -query
                v /= np.linalg.norm(v)
                text = "the weekly meeting is on Tuesday" if d in (0, 1) else f"note {d}"
                doc_id, chunk_id = _one_chunk_document(conn, row.base_id, source, f"n{d}.txt", text, v)
                vectors[chunk_id], docs[d], documents[d] = v.astype(np.float16).astype(np.float64), chunk_id, doc_id
            for d, replaced_by in ((0, documents[1]), (1, None)):
                conn.execute("INSERT INTO facts (document_id, base_id, key, superseded_by) VALUES (%s, %s, 'day', %s)",
                             (documents[d], row.base_id, replaced_by))
        with metis.pool.connection() as conn:
            found, _ = retrieval.run_search(conn, base_ids=[row.base_id], model=MODEL, query_embedding=query, terms=[],
                                            top_k=100, legs_top_k=10, filters=retrieval.Filters())
        ranked = [c.chunk_id for c in sorted(found, key=lambda c: c.dense_rank)]
        others = [c for c in _exact(vectors, query) if c not in (docs[0], docs[1])]
        assert ranked == [docs[1]] + others[:49]
        assert next(c.dense for c in found if c.chunk_id == docs[1]) < -0.99  # its own score
    finally:
        metis.drop_base(name)
