"""Run the hybrid search statement and turn its rows into ranked candidates.

One statement (``sql/search/hybrid.sql``) runs the dense leg, the keyword leg
and their reciprocal-rank fusion with every filter inside both legs (SPEC
F5-F7, F10). This module binds its parameters, reads each leg's end time from
the row stamps, and knows nothing of models, reranking or memories.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row

from . import fusion, sqlfiles
from .db import embedded as embedded_server, kernel
from .filters import Filters
from .snippets import weighing_terms

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

__all__ = ["Candidate", "LegTimes", "leg_limit", "run_search", "compound_terms", "phrase_chunks", "fuse_bases",
           "COMPOUND_MIN_CHARS", "COMPOUND_PER_TERM", "COMPOUND_MIN_REST", "COMPOUND_WEIGHT"]

#: A question word this long (characters, letters only) that no chunk holds is looked for
#: inside the longer words of the bases (compounds: ``passwort`` -> ``passwortrichtlinie``).
COMPOUND_MIN_CHARS = 5
#: Longer words kept per such question word, most frequent first.
COMPOUND_PER_TERM = 8
#: Characters a longer word must have beyond the question word: the rest of a compound is a word
#: (``passwort|richtlinie``), inflections add fewer (``configuration|s``, ``network|ing``).
COMPOUND_MIN_REST = 4
#: Weight of an expanded word in BM25 (an exact term weighs 1).
COMPOUND_WEIGHT = 0.5

@dataclass(frozen=True, slots=True)
class Candidate:
    """A chunk the statement returned, with each leg's score and rank (None: not found by it)."""

    chunk_id: int
    base: str
    source: str
    document: str
    document_id: int
    title: str
    kind: str
    page: int | None
    line: int | None
    headings: tuple[str, ...]
    text: str
    dense: float | None
    dense_rank: int | None
    keyword: float | None
    keyword_rank: int | None
    fused: float
    holds: bool | None = None  # a fact of a memory base: still holds (SPEC F11); None: not a fact
    line_end: int | None = None  # line of the chunk's last character (chunking.Chunk.line_end)
    line_map: tuple[int, ...] = ()  # chunking.Chunk.line_map
    tags: tuple[str, ...] = ()  # the document's (issue 21)
    author: str | None = None
    date: datetime | None = None  # the document's date, else its file's modification time
    share: float | None = None  # the dense share the statement fused with (after routing); same for every row
    absent_share: float | None = None  # share of the question's words no chunk of the bases holds
    bm25_ratio: float | None = None  # best BM25 of the candidates / its bound (sum of idf * (k1 + 1))
    page_label: str | None = None  # the PDF page's printed label (chunking.Chunk.page_label)
    column: int | None = None  # column of its start when it starts inside a line (chunking.Chunk.column)
    #: The question's terms that weigh in its base, which its snippet marks (snippets.weighing_terms, from
    #: the BM25 statistics the statement read); None when run_search was given no mark_terms.
    weighing: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class LegTimes:
    """Milliseconds spent in the dense leg, the keyword leg, and fusing (with fetching)."""

    dense: float = 0.0
    keyword: float = 0.0
    fuse: float = 0.0


def leg_limit(top_k: int) -> int:
    """Rows each leg keeps: 50 or 4 x top_k, whichever is more (SPEC F5, F6)."""
    return max(50, 4 * top_k)


#: With copies collapsed, the dense leg reads this many times its leg_limit rows, to keep leg_limit
#: distinct texts after the copies are dropped (``sql/search/hybrid.sql``, ``leg_read``); the
#: keyword leg drops them from its exact top leg_limit.
COPIES_READ = 4


def _first_copies(ranked: Sequence[Candidate]) -> list[Candidate]:
    """`ranked` (best first) with one chunk per text, at the place of that text's best-ranked copy.

    The copy kept is the first that still holds (``holds`` not False: a fact no newer fact
    replaced, or a chunk that is no fact; SPEC F11), else the first: as the statement keeps them
    (``sql/search/hybrid.sql``, CTEs ``dense`` and ``keyword``).
    """
    kept: dict[str, Candidate] = {}  # text -> its copy kept, in the order of the texts' best places
    for c in ranked:
        if c.text not in kept or (kept[c.text].holds is False and c.holds is not False):
            kept[c.text] = c
    return list(kept.values())


def fuse_bases(per_base: Sequence[Sequence[Candidate]], *, legs_top_k: int, top_k: int, rrf_k: int = 60,
               dense_weight: float = 1.0, keyword_weight: float = 1.0,
               plan: fusion.Plan | None = None) -> list[Candidate]:
    """Fuse the answers of one statement per base as the statement over all of them would.

    Each list holds every passage either leg of its base's statement kept (``2 x
    leg_limit(legs_top_k)`` fused rows asked). The dense leg over all the bases is the
    best ``leg_limit(legs_top_k)`` of them by cosine (ties by chunk_id), the keyword leg the
    best by BM25 (each base's score with its own statistics), ranks from 1. Fused by `plan`
    (:func:`metis_pg.fusion.fuse`: rrf or convex over every candidate's complete scores, the
    dense share the first base's statement routed to), or without a plan by weighted RRF:
    sum of weight / (rrf_k + rank) (Cormack et al. 2009); ties by chunk_id. Returns the best
    `top_k`. With the plan's ``collapse_copies`` (without a plan,
    :data:`metis_pg.fusion.COLLAPSE_COPIES`, as in :func:`run_search`), the copies of a text take one place in a leg,
    whichever base holds them, held by the copy that still holds, as in the statement.
    """
    if plan is None:
        plan = fusion.Plan(fusion="rrf", normalization="tmm", rrf_k=rrf_k, weight_sum=dense_weight + keyword_weight,
                           dense_share=dense_weight / (dense_weight + keyword_weight), route_absent=0.0,
                           route_weak=0.0, weak_ratio=0.0, fired=())
    limit = leg_limit(legs_top_k)
    every = [c for found in per_base for c in found]
    dense = sorted((c for c in every if c.dense_rank is not None), key=lambda c: (-c.dense, c.chunk_id))
    keyword = sorted((c for c in every if c.keyword_rank is not None), key=lambda c: (-c.keyword, c.chunk_id))
    if plan.collapse_copies:
        dense, keyword = _first_copies(dense), _first_copies(keyword)
    dense, keyword = dense[:limit], keyword[:limit]
    dense_rank = {c.chunk_id: r for r, c in enumerate(dense, start=1)}
    keyword_rank = {c.chunk_id: r for r, c in enumerate(keyword, start=1)}
    kept = [c for c in every if c.chunk_id in dense_rank or c.chunk_id in keyword_rank]
    cands = [(c.dense, dense_rank.get(c.chunk_id), c.keyword, keyword_rank.get(c.chunk_id), c.chunk_id) for c in kept]
    share = next((c.share for c in kept if c.share is not None), plan.dense_share)
    scores = fusion.fuse(cands, plan.fusion, share, normalization=plan.normalization, rrf_k=plan.rrf_k,
                         weight_sum=plan.weight_sum)
    fused = [replace(c, dense_rank=d, keyword_rank=k, fused=score)
             for c, (_, d, _, k, _), score in zip(kept, cands, scores)]
    fused.sort(key=lambda c: (-c.fused, c.chunk_id))
    return fused[:top_k]


def _ms(later: datetime, earlier: datetime) -> float:
    return max((later - earlier).total_seconds() * 1000.0, 0.0)


def _leg_times(row: dict[str, Any]) -> LegTimes:
    # The legs are materialized one after the other; each stamped when it ended.
    started, finished = row["started_at"], row["finished_at"]
    ends = sorted(
        (t, name) for name, t in (("dense", row["dense_done_at"]), ("keyword", row["keyword_done_at"])) if t is not None
    )
    times = {"dense": 0.0, "keyword": 0.0}
    previous = started
    for t, name in ends:
        times[name] = _ms(t, previous)
        previous = t
    return LegTimes(dense=times["dense"], keyword=times["keyword"], fuse=_ms(finished, previous))


#: The arguments of bm25_top_k (sql/search/bm25_top_k.v5.sql) as the hybrid statement's parameters.
_KEYWORD_ARGUMENTS = {
    "p_base_ids": "%(base_ids)s::int[]", "p_terms": "%(terms)s::text[]", "p_term_weights": "%(term_weights)s::float8[]",
    "p_k1": "%(k1)s::float8", "p_b": "%(b)s::float8", "p_leg_limit": "%(leg_limit)s::int",
    # The filters' arguments, as the statement computes them for the call (its CTE keyword_filter).
    "p_documents": "(SELECT documents FROM keyword_filter)",
    "p_only_chunks": "%(only_chunks)s::bigint[]",
    "p_drop_chunks": "(SELECT drop_chunks FROM keyword_filter)",
}
_citus_statements: dict[str, bool] = {}


def on_citus(conn: psycopg.Connection) -> bool:
    """Whether `conn` is a Citus coordinator with the chunks distributed (asked once per server and database)."""
    key = f"{conn.info.host}:{conn.info.port}/{conn.info.dbname}"
    if key not in _citus_statements:
        # Two statements: a relation that does not exist is an error when the statement is parsed.
        citus = conn.execute("SELECT to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL").fetchone()[0]
        _citus_statements[key] = bool(citus and conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition"
            "               WHERE logicalrelid = to_regclass('chunks') AND partmethod = 'h')").fetchone()[0])
    return _citus_statements[key]


def _function_body(functions: str, name: str, arguments: dict[str, str]) -> str:
    """The statement that the PL/pgSQL function `name` of the file text `functions` returns
    (its ``RETURN QUERY``), with each argument replaced by the SQL given for it in `arguments`."""
    function = functions.split(f"CREATE OR REPLACE FUNCTION {name}(", 1)[1].split("CREATE OR REPLACE FUNCTION", 1)[0]
    body = function.split("RETURN QUERY", 1)[1].rsplit(";\nEND", 1)[0].replace("%", "%%")
    for argument, parameter in arguments.items():
        body = re.sub(rf"\b{argument}\b", lambda _: parameter, body)
    return body


def _inline_call(statement: str, call: str, alias: str, body: str) -> str:
    """`statement` with ``FROM call(...) AS alias`` replaced by ``FROM (body) AS alias``."""
    start = statement.index(f"    FROM {call}(")
    end = statement.index(f") AS {alias}\n", start) + len(f") AS {alias}\n")
    return statement[:start] + f"    FROM ({body}\n    ) AS {alias}\n" + statement[end:]


#: The dense scan's base filter in sql/search/hybrid.sql (an equality for one base).
_ONE_BASE_FILTER = """AND CASE WHEN cardinality(%(base_ids)s::int[]) = 1 THEN e.base_id = (%(base_ids)s::int[])[1]
                       ELSE e.base_id = ANY(%(base_ids)s::int[]) END"""


#: The cosine of the statement's dense scan and complete scores, by pgvector's operator.
_COSINE = "e.embedding <=> %(query_embedding)s::halfvec"


@lru_cache(maxsize=4)
def hybrid_statement(citus: bool, own_kernel: bool = False) -> str:
    """The hybrid statement: ``sql/search/hybrid.sql``; on Citus, with the statements of the keyword
    leg (the body of ``bm25_top_k``, sql/search/bm25_top_k.v5.sql) and of the complete scores
    (``sql/citus/complete_scores.sql``, bm25_chunk_scores's statement without its LATERAL outer
    join) in place of the functions' calls, and the dense scan's base filter a plain ``= ANY``
    (:data:`_ONE_BASE_FILTER`, which Citus could not prune shards by).

    Citus routes a statement of one base to the worker holding it (a router query) only when it
    can send it whole; a call of either function cannot be sent (the function's own statement would
    run distributed from a shard, which Citus refuses: "could not create distributed plan"), so with
    the calls the statement is planned as one subplan per CTE, a round trip each (docs/scaling.md),
    or refused. Inlined, their arguments are the statement's own parameters
    (:data:`_KEYWORD_ARGUMENTS`) and the whole statement is one task.

    With `own_kernel` (the embedded server, :mod:`metis_pg.db.kernel`), every cosine is
    ``metis_cosine_distance(e.embedding, q)``, metis_pg's own kernel, in place of pgvector's
    ``e.embedding <=> q``: the same values but in the last bits, and the dense scan 1.4-1.9x as fast
    (docs/performance.md).
    """
    hybrid = sqlfiles.load("search/hybrid")
    if own_kernel:
        assert hybrid.count(_COSINE) == 4, "hybrid.sql's cosines changed"
        hybrid = hybrid.replace(_COSINE, f"{kernel.FUNCTION}(e.embedding, %(query_embedding)s::halfvec)")
    if not citus:
        return hybrid
    # The dense scan's base filter as Citus prunes shards by it: a plain = ANY, not the CASE that the
    # planner of one node folds to an equality for one base (cheaper on every row).
    assert hybrid.count(_ONE_BASE_FILTER) == 1, "hybrid.sql's dense base filter changed"
    hybrid = hybrid.replace(_ONE_BASE_FILTER, "AND e.base_id = ANY(%(base_ids)s::int[])")
    functions = sqlfiles.load("search/bm25_top_k.v5")
    keyword = _function_body(functions, "bm25_top_k", _KEYWORD_ARGUMENTS)
    hybrid = _inline_call(hybrid, "bm25_top_k", "k", keyword)
    # bm25_chunk_scores's own statement has a LATERAL outer join, which Citus refuses here: its form
    # for Citus is a file of its own.
    complete = sqlfiles.load("citus/complete_scores").rstrip().rstrip(";")
    return _inline_call(hybrid, "bm25_chunk_scores", "m", complete)


def uses_kernel(conn: psycopg.Connection) -> bool:
    """Whether the dense scan on `conn` calls metis_pg's own cosine kernel: on an embedded server
    this process started or joined, once the kernel is built and created there
    (:func:`metis_pg.db.kernel.ensure`; asked once per process and database)."""
    bin_path = embedded_server.server_bin_path(conn.info.host)
    return bin_path is not None and kernel.ensure(conn, bin_path)


def restricted(conn: psycopg.Connection, base_ids: Sequence[int]) -> bool:
    """Whether `conn` reads on behalf of principals (:mod:`metis_pg.access`) bases where documents may
    have readers: the keyword leg then drops the chunks they may not read (its posting blocks are not
    under row-level security; the dense leg's vectors and every chunk and document read are)."""
    return bool(conn.execute(sqlfiles.load("search/restricted"), {"base_ids": list(base_ids)}).fetchone()[0])


def phrase_chunks(conn: psycopg.Connection, base_ids: Sequence[int], phrases: Sequence[str],
                  limit: int = 100_000) -> list[int]:
    """Return the ids of the chunks of the bases holding every one of `phrases` (folded text, word
    boundaries: :func:`metis_pg.query_syntax.phrase_pattern`), in no order. The text matched is
    what BM25 reads: title, headings and text (:func:`metis_pg.chunking.embedding_text`).

    Candidates are the chunks holding each selective term of a phrase (``sql/search/phrase_chunks.sql``,
    at most `limit` per phrase); their text is then matched here, where :func:`metis_pg.tokenizer.fold`
    is.
    """
    from .chunking import embedding_text  # at first use: a search without a phrase needs no chunker (issue 25)
    from .query_syntax import phrase_pattern
    from .tokenizer import fold, query_terms

    kept: set[int] | None = None
    for phrase in phrases:
        pattern = phrase_pattern(phrase)
        rows = conn.execute(sqlfiles.load("search/phrase_chunks"),
                            {"base_ids": list(base_ids), "terms": query_terms(phrase), "limit": limit}).fetchall()
        holding = {chunk_id for chunk_id, title, headings, text in rows
                   if pattern.search(fold(embedding_text(title, headings or (), text)))}
        kept = holding if kept is None else kept & holding
        if not kept:
            return []
    return sorted(kept or ())


def compound_terms(conn: psycopg.Connection, base_ids: Sequence[int], terms: Sequence[str]) -> list[str]:
    """Return the longer words of the bases that hold a question word found in no chunk.

    Only words of :data:`COMPOUND_MIN_CHARS` letters or more (no digits: identifiers are
    never expanded; not a joined form of the question's own words, such as ``mergedlayer``
    of ``merged-layer``) that are absent from every base searched are looked for, each inside
    the bases' vocabulary, in words at least :data:`COMPOUND_MIN_REST` characters longer (the
    rest of a compound is a word; an inflection is not); at most :data:`COMPOUND_PER_TERM`
    per word, most frequent first.
    A word present anywhere in the bases gives nothing, so its exact matches rank as before.
    Returned distinct, none of them in `terms`, in the order of `terms` (``sql/search/compound_expand.sql``).
    """
    asked = set(terms)
    candidates = [t for t in terms if len(t) >= COMPOUND_MIN_CHARS and t.isalpha() and not _joined(t, asked)]
    if not candidates:
        return []
    rows = conn.execute(sqlfiles.load("search/compound_expand"),
                        {"base_ids": list(base_ids), "candidates": candidates, "per_term": COMPOUND_PER_TERM,
                         "min_rest": COMPOUND_MIN_REST}).fetchall()
    by_term: dict[str, list[str]] = {}
    for term, expansion, _ in rows:
        by_term.setdefault(term, []).append(expansion)
    out = [e for t in candidates for e in by_term.get(t, ()) if e not in asked]
    return list(dict.fromkeys(out))


def _joined(term: str, parts: set[str]) -> bool:
    """Whether `term` is two or more of `parts` end to end: a joined form of the question
    (``merged-layer`` -> ``mergedlayer``), whose words are searched already."""
    ends = {0}
    for end in range(1, len(term) + 1):
        if any(start in ends and term[start:end] in parts and term[start:end] != term for start in range(end)):
            ends.add(end)
    return len(term) in ends


def run_search(
    conn: psycopg.Connection,
    *,
    base_ids: Sequence[int],
    model: str | None,
    query_embedding: np.ndarray | None,
    terms: Sequence[str],
    top_k: int,
    filters: Filters,
    k1: float = 1.2,
    b: float = 0.75,
    rrf_k: int = 60,
    dense_weight: float = 1.0,
    keyword_weight: float = 1.0,
    legs_top_k: int | None = None,
    compounds: bool = True,
    plan: fusion.Plan | None = None,
    only_chunks: Sequence[int] | None = None,
    exclude_terms: Sequence[str] = (),
    statement: str | None = None,
    collapse_copies: bool | None = None,
    mark_terms: Sequence[str] = (),
) -> tuple[list[Candidate], LegTimes]:
    """Return the best `top_k` fused candidates of the bases, best first, and each step's time.

    Dense: exact cosine scan (pgvector ``<=>``, or metis_pg's own kernel on the embedded server:
    :func:`uses_kernel`) over the vectors of `model`; off when
    `query_embedding` is None. Keyword: BM25, k1 and b as given (Robertson & Zaragoza
    2009); off when `terms` is empty. Each leg keeps ``leg_limit(legs_top_k or top_k)``
    rows; every candidate of either gets both exact scores (complete scores). Fusion: as
    `plan` says (:mod:`metis_pg.fusion`: weighted RRF or a convex combination, routed or
    not); without a plan, weighted RRF with `rrf_k`, `dense_weight`, `keyword_weight`
    (Cormack, Clarke & Buettcher, SIGIR 2009). With `compounds`, a question word no chunk
    holds also looks for the longer words containing it (:func:`compound_terms`), each
    weighing :data:`COMPOUND_WEIGHT` of an exact term. `only_chunks` (None: no such filter)
    and `exclude_terms` (chunks holding one are dropped) filter both legs, as the
    filters do (:mod:`metis_pg.query_syntax`). `statement`: another text to run instead of
    ``sql/search/hybrid.sql`` with the same parameters (benchmarks timing an earlier version,
    which may lack the columns of complete scores and routing). `collapse_copies` (None: the
    plan's, without a plan :data:`metis_pg.fusion.COLLAPSE_COPIES`, as a base's default): in each leg, the chunks
    of one text (``chunks.text``) take one place, the best-ranked copy's, held by a copy that still
    holds (a replaced fact of a memory base gives way, SPEC F11), then the best-ranked: the
    dense leg keeps ``leg_limit`` distinct texts (it reads :data:`COPIES_READ` times as many rows
    for that), the keyword leg the distinct texts of its top ``leg_limit``; scores are the kept
    copies' own, ranks count the chunks kept. `mark_terms` (the question's terms): each candidate's
    ``weighing`` is those of them that weigh in its base (:func:`metis_pg.snippets.weighing_terms`,
    from the statistics the statement reads), which its snippet marks.
    """
    if plan is None:
        plan = fusion.Plan(fusion="rrf", normalization="tmm", rrf_k=rrf_k, weight_sum=dense_weight + keyword_weight,
                           dense_share=dense_weight / (dense_weight + keyword_weight), route_absent=0.0,
                           route_weak=0.0, weak_ratio=0.0, fired=())
    if collapse_copies is None:
        collapse_copies = plan.collapse_copies
    terms = list(terms)
    asked = list(terms)
    weights = None
    if compounds and terms:
        expanded = compound_terms(conn, base_ids, terms)
        if expanded:
            weights = [1.0] * len(terms) + [COMPOUND_WEIGHT] * len(expanded)
            terms += expanded
    params = {
        "base_ids": list(base_ids),
        "model": model,
        "query_embedding": query_embedding,
        "terms": terms,
        "term_weights": weights,
        "asked_terms": asked,
        "k1": k1,
        "b": b,
        **plan.params(),
        # The weights as an unrouted rrf fuses with them (what an earlier statement takes).
        "dense_weight": plan.weight_sum * plan.dense_share,
        "keyword_weight": plan.weight_sum * (1 - plan.dense_share),
        "only_chunks": None if only_chunks is None else list(only_chunks),
        "exclude_terms": list(exclude_terms) or None,
        "leg_limit": leg_limit(legs_top_k or top_k),
        "leg_read": leg_limit(legs_top_k or top_k) * (COPIES_READ if collapse_copies else 1),
        "collapse_copies": collapse_copies,
        "top_k": top_k,
        "mark_terms": list(mark_terms) or None,
        **filters.to_params(),
    }
    params["restricted"] = restricted(conn, base_ids)  # the keyword leg drops the chunks they may not read
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(statement or hybrid_statement(on_citus(conn), query_embedding is not None
                                                         and uses_kernel(conn)), params).fetchall()
    if not rows:
        return [], LegTimes()
    weighing: dict[str, frozenset[str]] = {}
    for r in rows:
        if r.get("term_dfs") is not None and r["base"] not in weighing:
            weighing[r["base"]] = weighing_terms(r["term_dfs"], r["base_chunks"])
    candidates = [
        Candidate(
            chunk_id=r["chunk_id"], base=r["base"], source=r["source"], document=r["document"],
            document_id=r["document_id"], title=r["title"], kind=r["kind"], page=r["page"], line=r["line"],
            headings=tuple(r["headings"] or ()), text=r["text"],
            dense=None if r["dense"] is None else float(r["dense"]), dense_rank=r["dense_rank"],
            keyword=None if r["keyword"] is None else float(r["keyword"]), keyword_rank=r["keyword_rank"],
            fused=float(r["fused"]), holds=r["holds"], line_end=r["line_end"], line_map=tuple(r["line_map"] or ()),
            tags=tuple(r["tags"] or ()), author=r["author"], date=r["document_date"],
            share=r.get("share"), absent_share=r.get("absent_share"), bm25_ratio=r.get("bm25_ratio"),
            page_label=r.get("page_label"), column=r.get("col"), weighing=weighing.get(r["base"]),
        )
        for r in rows
    ]
    return candidates, _leg_times(rows[0])
