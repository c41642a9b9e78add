"""Evaluation (SPEC F16): evaluation sets, the metrics, and the runner.

An evaluation set is questions with graded judgments of relevant documents
(or of passages: a line or a page of a document). Two layouts are read:

- a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv`` with or
  without a header row): :func:`load_beir`. Its corpus is written as one Markdown
  file per entry (``<id>.md``: ``# title`` then the text) into a cache folder so it
  can be indexed like any other folder;
- our JSON format (``docs/evaluation.md``): :func:`load_eval_set`.

Metrics, on the ranked list of *units* a search returned (a unit is a document
for document-level judgments, a judged passage for located ones; a unit counts
once, at its first rank):

- nDCG@10: linear gain (the grade), discount log2(rank + 1), ideal DCG from the
  judged grades, as trec_eval's ``ndcg_cut`` (``m_ndcg_cut.c``; Järvelin &
  Kekäläinen 2002);
- Recall@k: relevant units (grade > 0) in the first k over all relevant units
  (trec_eval ``recall``);
- MRR@10: 1 / rank of the first relevant unit within the first 10, else 0;
- zero-result rate: share of questions the mode answered with no result;
- latency: p50 / p95 of the search's own ``took.total`` (ms), linear
  interpolation between order statistics (numpy's default).

Only questions with at least one relevant judgment (grade > 0) are scored;
the others are counted in ``skipped``.
"""

from __future__ import annotations

import csv
import json
import math
import re
import time
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from .errors import InvalidInput
from .results import SearchResponse

__all__ = [
    "Judgment",
    "EvalQuery",
    "EvalSet",
    "Metrics",
    "QueryScore",
    "ModeReport",
    "EvalReport",
    "MODE_LABELS",
    "load_beir",
    "load_eval_set",
    "load",
    "beir_document_path",
    "query_type",
    "ndcg_at_k",
    "recall_at_k",
    "mrr_at_k",
    "ranked_units",
    "summarize",
    "run",
    "CachedQueries",
    "eval_set_from_dict",
    "score_query",
]

#: Modes an evaluation can run, with their label on screen.
MODE_LABELS = {
    "hybrid": "hybrid",
    "dense": "dense",
    "keyword": "keyword",
    "hybrid_no_rerank": "hybrid, no rerank",
}
QUERY_TYPES = ("identifier", "natural")


# -- evaluation sets -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Judgment:
    """A judged document or passage of one question.

    Attributes:
        document: path relative to its source folder (``en/index.md``).
        grade: 0 (not relevant) to 3 (a direct answer); BEIR sets keep their own scale.
        line: a 1-based line inside the document: the passage holding it is judged.
        page: a 1-based PDF page: any passage of that page is the judged unit.
    """

    document: str
    grade: int = 1
    line: int | None = None
    page: int | None = None

    @property
    def unit(self) -> str:
        """The unit this judgment names: ``doc``, ``doc#L12`` or ``doc#p3``."""
        if self.line is not None:
            return f"{self.document}#L{self.line}"
        if self.page is not None:
            return f"{self.document}#p{self.page}"
        return self.document

    @property
    def located(self) -> bool:
        return self.line is not None or self.page is not None


@dataclass(frozen=True, slots=True)
class EvalQuery:
    """One question of a set, with its judgments.

    ``query_type`` overrides the heuristic of :func:`query_type`; ``group`` is a
    free label (a language, a category) reported separately when present.
    """

    query_id: str
    question: str
    judgments: tuple[Judgment, ...]
    query_type: str | None = None
    group: str | None = None

    @property
    def type(self) -> str:
        return self.query_type or query_type(self.question)

    @property
    def relevant(self) -> int:
        return len({j.unit for j in self.judgments if j.grade > 0})


@dataclass(frozen=True, slots=True)
class EvalSet:
    """Questions with judgments, and the folder of documents they judge (if known)."""

    name: str
    queries: tuple[EvalQuery, ...]
    corpus: Path | None = None
    skipped: int = 0

    @property
    def located(self) -> bool:
        """True when some judgment names a line or a page (passage-level scoring)."""
        return any(j.located for q in self.queries for j in q.judgments)


def beir_document_path(doc_id: str) -> str:
    """Return the file name a BEIR corpus id is written to: ``<id>.md``, the id percent-encoded.

    Ids made only of ``A-Z a-z 0-9 . _ -`` are kept as they are (``arcd-doc0.md``);
    any other character is percent-encoded (``<dbpedia:X>`` → ``%3Cdbpedia%3AX%3E.md``).
    """
    return quote(doc_id, safe="._-") + ".md"


def _read_jsonl(path: Path) -> Iterable[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InvalidInput(f"{path}:{number}: not JSON ({exc.msg})") from exc


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Read a BEIR qrels TSV (``query-id corpus-id score``), with or without its header row."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open(encoding="utf-8", newline="") as fh:
        for number, row in enumerate(csv.reader(fh, delimiter="\t"), start=1):
            if not row or not "".join(row).strip():
                continue
            if len(row) == 4:  # TREC layout: query-id 0 corpus-id score
                row = [row[0], row[2], row[3]]
            if len(row) != 3:
                raise InvalidInput(f"{path}:{number}: expected 3 tab-separated columns, not {len(row)}")
            try:
                grade = int(float(row[2]))
            except ValueError:
                if number == 1:
                    continue  # the header row
                raise InvalidInput(f"{path}:{number}: the score {row[2]!r} is not a number") from None
            qrels.setdefault(row[0], {})[row[1]] = grade
    return qrels


def load_beir(folder: str | Path, *, cache_dir: str | Path, split: str = "test", name: str | None = None) -> EvalSet:
    """Read a BEIR folder and write its corpus as Markdown files; return the set.

    Each corpus entry becomes ``<cache_dir>/<beir_document_path(id)>`` holding
    ``# title`` (when it has one, else front matter ``title: ""``: no title), a
    blank line and the text; files already there
    with the same content are left alone, so re-running does not re-index.

    Args:
        folder: holds ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/<split>.tsv``.
        cache_dir: where the Markdown corpus is written (keep it outside any checkout).
        split: the qrels file to read.
        name: the set's name (default: the folder's name).

    Raises:
        InvalidInput: a file is missing or malformed.
    """
    folder = Path(folder)
    paths = {"corpus": folder / "corpus.jsonl", "queries": folder / "queries.jsonl",
             "qrels": folder / "qrels" / f"{split}.tsv"}
    for what, path in paths.items():
        if not path.is_file():
            raise InvalidInput(f"not a BEIR folder: {path} ({what}) is missing")
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    doc_ids: set[str] = set()
    for entry in _read_jsonl(paths["corpus"]):
        doc_id = str(entry["_id"])
        doc_ids.add(doc_id)
        title = (entry.get("title") or "").strip()
        text = (entry.get("text") or "").strip()
        # Untitled passages say so in front matter: otherwise the file name (the BEIR id)
        # would stand in as their title and be embedded with the text.
        body = f"# {title}\n\n{text}\n" if title else f'---\ntitle: ""\n---\n{text}\n'
        target = cache / beir_document_path(doc_id)
        if not target.is_file() or target.read_text(encoding="utf-8") != body:
            target.write_text(body, encoding="utf-8")
    questions = {str(e["_id"]): str(e.get("text") or "") for e in _read_jsonl(paths["queries"])}
    qrels = _read_qrels(paths["qrels"])
    queries: list[EvalQuery] = []
    skipped = 0
    for query_id, question in questions.items():
        judged = qrels.get(query_id, {})
        if not question.strip() or not any(g > 0 for g in judged.values()):
            skipped += 1
            continue
        queries.append(EvalQuery(
            query_id=query_id, question=question,
            judgments=tuple(Judgment(beir_document_path(d), g) for d, g in judged.items()),
        ))
    return EvalSet(name=name or folder.resolve().name, queries=tuple(queries), corpus=cache, skipped=skipped)


def _judgment(data: Any, where: str) -> Judgment:
    if isinstance(data, str):
        return Judgment(data)
    if not isinstance(data, Mapping) or not isinstance(data.get("document"), str):
        raise InvalidInput(f"{where}: a judgment is a path or an object with \"document\"")
    grade = data.get("grade", 1)
    if not isinstance(grade, int) or isinstance(grade, bool) or not 0 <= grade <= 3:
        raise InvalidInput(f"{where}: grade must be an integer from 0 to 3, not {grade!r}")
    located = {}
    for key in ("line", "page"):
        value = data.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise InvalidInput(f"{where}: {key} must be a positive integer, not {value!r}")
        located[key] = value
    if located["line"] is not None and located["page"] is not None:
        raise InvalidInput(f"{where}: give line or page, not both")
    return Judgment(data["document"], grade, located["line"], located["page"])


def eval_set_from_dict(data: Mapping[str, Any], *, name: str, root: Path | None = None) -> EvalSet:
    """Build a set from our JSON format (see ``docs/evaluation.md``).

    Raises:
        InvalidInput: a field is missing or of the wrong type.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("queries"), list):
        raise InvalidInput("an evaluation set is an object with a \"queries\" list")
    corpus = data.get("corpus")
    corpus_path = None
    if corpus is not None:
        corpus_path = Path(corpus)
        if root is not None and not corpus_path.is_absolute():
            corpus_path = root / corpus_path
    queries: list[EvalQuery] = []
    skipped = 0
    seen: set[str] = set()
    for number, q in enumerate(data["queries"], start=1):
        where = f"queries[{number - 1}]"
        if not isinstance(q, Mapping) or not isinstance(q.get("question"), str) or not q["question"].strip():
            raise InvalidInput(f"{where}: needs a non-empty \"question\"")
        query_id = str(q.get("id", number))
        if query_id in seen:
            raise InvalidInput(f"{where}: the id {query_id!r} is used twice")
        seen.add(query_id)
        relevant = q.get("relevant")
        if not isinstance(relevant, list):
            raise InvalidInput(f"{where}: needs a \"relevant\" list")
        qtype = q.get("type")
        if qtype is not None and qtype not in QUERY_TYPES:
            raise InvalidInput(f"{where}: type must be one of {', '.join(QUERY_TYPES)}, not {qtype!r}")
        query = EvalQuery(
            query_id=query_id, question=q["question"],
            judgments=tuple(_judgment(j, f"{where}.relevant") for j in relevant),
            query_type=qtype, group=None if q.get("group") is None else str(q["group"]),
        )
        if query.relevant == 0:
            skipped += 1
            continue
        queries.append(query)
    return EvalSet(name=str(data.get("name") or name), queries=tuple(queries), corpus=corpus_path, skipped=skipped)


def load_eval_set(path: str | Path) -> EvalSet:
    """Read our JSON evaluation set; a relative ``corpus`` is relative to the file.

    Raises:
        InvalidInput: the file is missing, not JSON, or not in the format.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInput(f"no evaluation set at {path}") from None
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from exc
    return eval_set_from_dict(data, name=path.stem, root=path.parent)


def load(source: str | Path, *, cache_root: str | Path) -> EvalSet:
    """Read a BEIR folder (corpus cached under ``cache_root/<folder name>``) or a JSON set.

    Raises:
        InvalidInput: neither a BEIR folder nor a JSON file.
    """
    path = Path(source)
    if path.is_dir():
        name = path.resolve().name
        return load_beir(path, cache_dir=Path(cache_root) / name, name=name)
    return load_eval_set(path)


# -- query types ---------------------------------------------------------------

_QUOTED = re.compile(r"[\"“”«»„].+?[\"“”«»]")
_JOINED = re.compile(r"[^\W_][_./:\\#@]+[^\W_]|[^\W_]_|_[^\W_]|::")
_CAMEL = re.compile(r"[a-z][A-Z]")
_CAPS = re.compile(r"^[A-Z]{5,}$")


def query_type(question: str) -> str:
    """Return ``"identifier"`` when the question names something exactly, else ``"natural"``.

    A question is identifier-like when one of its words (split on spaces, outer
    punctuation stripped) is

    - letters and digits mixed: ``PO-2231``, ``E4021``, ``H100``, ``v2``;
    - letters or digits joined by ``_ . / : \\ # @`` (not by a hyphen alone):
      ``db.max_pool_size``, ``127.0.0.1:5432``, ``config/app.yaml``, ``std::vector``;
    - camelCase: ``getUserById``, ``QinglanPay``;
    - five or more capitals: ``ECONNREFUSED``;

    or when it holds a quoted phrase (``"Authorization: Bearer"``). Plain words,
    hyphenated words (``state-of-the-art``), short acronyms (``API``, ``CAP``) and
    numbers alone (``1984``) leave a question natural.
    """
    text = unicodedata.normalize("NFKC", question)
    if _QUOTED.search(text):
        return "identifier"
    for word in text.split():
        word = word.strip("\"'“”‘’«»„()[]{}<>,;!?¿¡。、，？！")
        word = word.rstrip(".:")
        if not word:
            continue
        has_letter = any(ch.isalpha() for ch in word)
        has_digit = any(ch.isdigit() for ch in word)
        ascii_word = word.isascii()
        if has_letter and has_digit and ascii_word:
            return "identifier"
        if _JOINED.search(word) or _CAMEL.search(word) or _CAPS.match(word):
            return "identifier"
    return "natural"


# -- metrics -------------------------------------------------------------------


def ndcg_at_k(ranking: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """Return nDCG@k: sum of grade / log2(rank + 1) over the first k, over the ideal.

    Linear gain and log2 discount, the ideal from all judged grades > 0, as in
    trec_eval's ``ndcg_cut`` (Järvelin & Kekäläinen 2002). 0.0 when nothing is relevant.
    """
    dcg = sum(max(grades.get(u, 0), 0) / math.log2(rank + 1) for rank, u in enumerate(ranking[:k], start=1))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, start=1))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranking: Sequence[str], grades: Mapping[str, int], k: int) -> float:
    """Return the share of relevant units (grade > 0) found in the first k (trec_eval ``recall``)."""
    relevant = {u for u, g in grades.items() if g > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def mrr_at_k(ranking: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """Return 1 / rank of the first relevant unit (grade > 0) within the first k, else 0."""
    for rank, u in enumerate(ranking[:k], start=1):
        if grades.get(u, 0) > 0:
            return 1.0 / rank
    return 0.0


#: (document, chunk_id, first line, page) of one result.
ResultKey = tuple[str, int, int | None, int | None]


def ranked_units(
    results: Sequence[ResultKey],
    judgments: Sequence[Judgment],
    chunk_lines: Mapping[str, Sequence[tuple[int, int]]] | None = None,
) -> list[str]:
    """Turn results into the ranked units they stand for, each unit once (first rank kept).

    A result is the unit of the first judgment it satisfies: a document-level
    judgment by any passage of the document; a page judgment by a passage on that
    page; a line judgment by the passage holding the line (the document's chunk
    with the last first-line at or before it, from `chunk_lines`: document →
    ``[(first line, chunk_id), ...]``). Other results are units of their own:
    their document when no judgment of the question is located, else their passage.
    """
    located = any(j.located for j in judgments)
    holding: dict[Judgment, int | None] = {}
    for j in judgments:
        if j.line is not None:
            spans = sorted((chunk_lines or {}).get(j.document, ()))
            before = [cid for first, cid in spans if first <= j.line]
            holding[j] = before[-1] if before else None
    units: list[str] = []
    seen: set[str] = set()
    for document, chunk_id, _line, page in results:
        unit = None
        for j in judgments:
            if j.document != document:
                continue
            if j.line is not None:
                hit = holding.get(j) == chunk_id
            elif j.page is not None:
                hit = page == j.page
            else:
                hit = True
            if hit:
                unit = j.unit
                break
        if unit is None:
            unit = f"{document}#chunk{chunk_id}" if located else document
        if unit not in seen:
            seen.add(unit)
            units.append(unit)
    return units


def _grades(judgments: Sequence[Judgment]) -> dict[str, int]:
    grades: dict[str, int] = {}
    for j in judgments:
        grades[j.unit] = max(grades.get(j.unit, j.grade), j.grade)
    return grades


# -- reports -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Metrics:
    """Averages over the questions of one mode (and one query type).

    Latencies are ms (``took.total`` of each search); rates are 0..1.
    """

    queries: int
    ndcg_at_10: float
    recall_at_10: float
    recall_at_50: float
    mrr_at_10: float
    zero_result_rate: float
    p50_ms: float
    p95_ms: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "queries": self.queries,
            "ndcg_at_10": round(self.ndcg_at_10, 4),
            "recall_at_10": round(self.recall_at_10, 4),
            "recall_at_50": round(self.recall_at_50, 4),
            "mrr_at_10": round(self.mrr_at_10, 4),
            "zero_result_rate": round(self.zero_result_rate, 4),
            "p50_ms": round(self.p50_ms, 2),
            "p95_ms": round(self.p95_ms, 2),
        }


@dataclass(frozen=True, slots=True)
class QueryScore:
    """One question in one mode: its scores, result count and latency (ms)."""

    query_id: str
    query_type: str
    group: str | None
    mode: str
    ndcg_at_10: float
    recall_at_10: float
    recall_at_50: float
    mrr_at_10: float
    results: int
    took_ms: float
    units: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "query_id": self.query_id, "query_type": self.query_type, "group": self.group, "mode": self.mode,
            "ndcg_at_10": round(self.ndcg_at_10, 4), "recall_at_10": round(self.recall_at_10, 4),
            "recall_at_50": round(self.recall_at_50, 4), "mrr_at_10": round(self.mrr_at_10, 4),
            "results": self.results, "took_ms": round(self.took_ms, 2), "units": list(self.units[:10]),
        }


@dataclass(frozen=True, slots=True)
class ModeReport:
    """One mode: overall metrics, by query type, and by group when the set has groups."""

    mode: str
    overall: Metrics
    by_type: dict[str, Metrics] = field(default_factory=dict)
    by_group: dict[str, Metrics] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return MODE_LABELS.get(self.mode, self.mode)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "mode": self.mode, **self.overall.to_dict(),
            "by_type": {t: m.to_dict() for t, m in self.by_type.items()},
        }
        if self.by_group:
            data["by_group"] = {g: m.to_dict() for g, m in self.by_group.items()}
        return data


@dataclass(frozen=True, slots=True)
class EvalReport:
    """An evaluation: the set, the base, the depth searched, and each mode's report.

    ``level`` is ``document`` (document-level judgments, each document counted once)
    or ``passage`` (some judgment names a line or a page).
    """

    eval_set: str
    base: str
    top_k: int
    level: str
    queries: int
    skipped: int
    modes: tuple[ModeReport, ...]
    per_query: tuple[QueryScore, ...] = ()
    seconds: float = 0.0

    def mode(self, name: str) -> ModeReport:
        """Return the report of one mode.

        Raises:
            KeyError: the mode was not run.
        """
        for m in self.modes:
            if m.mode == name:
                return m
        raise KeyError(name)

    def to_dict(self, *, per_query: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "eval_set": self.eval_set, "base": self.base, "top_k": self.top_k, "level": self.level,
            "queries": self.queries, "skipped": self.skipped, "seconds": round(self.seconds, 2),
            "modes": [m.to_dict() for m in self.modes],
        }
        if per_query:
            data["per_query"] = [q.to_dict() for q in self.per_query]
        return data


def _percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else 0.0


def summarize(scores: Sequence[QueryScore]) -> Metrics:
    """Average the questions' scores; p50/p95 of their latencies."""
    n = len(scores)
    if n == 0:
        return Metrics(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    return Metrics(
        queries=n,
        ndcg_at_10=sum(s.ndcg_at_10 for s in scores) / n,
        recall_at_10=sum(s.recall_at_10 for s in scores) / n,
        recall_at_50=sum(s.recall_at_50 for s in scores) / n,
        mrr_at_10=sum(s.mrr_at_10 for s in scores) / n,
        zero_result_rate=sum(1 for s in scores if s.results == 0) / n,
        p50_ms=_percentile([s.took_ms for s in scores], 50),
        p95_ms=_percentile([s.took_ms for s in scores], 95),
    )


def score_query(query: EvalQuery, mode: str, answer: SearchResponse, took_ms: float,
                chunk_lines: Mapping[str, Sequence[tuple[int, int]]] | None = None) -> QueryScore:
    """Score one answer to one question."""
    keys = [(r.citation.document, r.chunk_id, r.citation.line, r.citation.page) for r in answer.results]
    units = ranked_units(keys, query.judgments, chunk_lines)
    grades = _grades(query.judgments)
    return QueryScore(
        query_id=query.query_id, query_type=query.type, group=query.group, mode=mode,
        ndcg_at_10=ndcg_at_k(units, grades, 10), recall_at_10=recall_at_k(units, grades, 10),
        recall_at_50=recall_at_k(units, grades, 50), mrr_at_10=mrr_at_k(units, grades, 10),
        results=len(answer.results), took_ms=took_ms, units=tuple(units),
    )


#: Runs one search: (question, mode, top_k, rerank) → answer.
Search = Callable[[str, str, int, bool | None], SearchResponse]
#: Called after each search: (searches done, searches in all).
Progress = Callable[[int, int], None]


def run(
    search: Search,
    eval_set: EvalSet,
    *,
    base: str,
    modes: Sequence[str],
    top_k: int = 50,
    chunk_lines: Mapping[str, Sequence[tuple[int, int]]] | None = None,
    on_progress: Progress | None = None,
) -> EvalReport:
    """Ask every question of `eval_set` in every mode; return the report.

    Each question is asked once per mode with `top_k` passages (at least 50 are
    needed for Recall@50 to see 50 units); the units are ranked as in
    :func:`ranked_units` and scored. Mode ``hybrid_no_rerank`` is hybrid with the
    reranker off.

    Raises:
        InvalidInput: an unknown mode, or a set without questions.
    """
    unknown = [m for m in modes if m not in MODE_LABELS]
    if unknown:
        raise InvalidInput(f"unknown mode {unknown[0]!r}: use {', '.join(MODE_LABELS)}")
    if not eval_set.queries:
        raise InvalidInput(f"the evaluation set {eval_set.name!r} has no question with a relevant judgment")
    started = time.perf_counter()
    total = len(modes) * len(eval_set.queries)
    done = 0
    scores: list[QueryScore] = []
    for query in eval_set.queries:
        for mode in modes:
            search_mode, rerank = ("hybrid", False) if mode == "hybrid_no_rerank" else (mode, None)
            answer = search(query.question, search_mode, top_k, rerank)
            scores.append(score_query(query, mode, answer, answer.took.total, chunk_lines))
            done += 1
            if on_progress is not None:
                on_progress(done, total)
    reports = []
    for mode in modes:
        mine = [s for s in scores if s.mode == mode]
        by_type = {t: summarize([s for s in mine if s.query_type == t]) for t in QUERY_TYPES}
        groups = sorted({s.group for s in mine if s.group is not None})
        by_group = {g: summarize([s for s in mine if s.group == g]) for g in groups}
        reports.append(ModeReport(mode=mode, overall=summarize(mine), by_type=by_type, by_group=by_group))
    return EvalReport(
        eval_set=eval_set.name, base=base, top_k=top_k, level="passage" if eval_set.located else "document",
        queries=len(eval_set.queries), skipped=eval_set.skipped, modes=tuple(reports), per_query=tuple(scores),
        seconds=time.perf_counter() - started,
    )


class CachedQueries:
    """An embedder whose query vectors are computed once, in batches, before an evaluation.

    Questions given to :meth:`prefill` are embedded ``batch_size`` at a time (about
    3x the throughput of one at a time on CPU); later :meth:`embed_queries` calls
    for them return the stored rows. Passages and unknown questions go to the model.
    """

    def __init__(self, inner: Any, *, batch_size: int = 32) -> None:
        self.inner = inner
        self.batch_size = batch_size
        self._rows: dict[str, np.ndarray] = {}

    def prefill(self, questions: Sequence[str], on_progress: Callable[[int, int], None] | None = None) -> None:
        todo = list(dict.fromkeys(q for q in questions if q not in self._rows))
        for start in range(0, len(todo), self.batch_size):
            batch = todo[start : start + self.batch_size]
            for q, row in zip(batch, self.inner.embed_queries(batch)):
                self._rows[q] = np.asarray(row, dtype=np.float32)
            if on_progress is not None:
                on_progress(min(start + self.batch_size, len(todo)), len(todo))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in texts if t not in self._rows]
        if missing:
            for q, row in zip(missing, self.inner.embed_queries(missing)):
                self._rows[q] = np.asarray(row, dtype=np.float32)
        return np.stack([self._rows[t] for t in texts])

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_passages(texts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
