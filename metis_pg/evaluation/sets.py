"""Evaluation sets: questions with graded judgments, read from a BEIR folder or our JSON format.

A BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv`` with or
without a header row) is read by :func:`load_beir`: its corpus is written as one
Markdown file per entry into a cache folder so it can be indexed like any other
folder. Our JSON format (``docs/evaluation.md``) is read by :func:`load_eval_set`.
Each question has a type, identifier-like or natural language (:func:`query_type`).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = ["QUERY_TYPES", "Judgment", "EvalQuery", "EvalSet", "load_beir", "load_eval_set", "load", "beir_document_path", "query_type", "eval_set_from_dict"]


from ..errors import InvalidInput
from ..routing import has_quoted_phrase, identifier_words

QUERY_TYPES = ("identifier", "natural", "phrase")


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

def query_type(question: str) -> str:
    """Return ``"phrase"`` for a question holding a quoted phrase, ``"identifier"`` when it names
    something exactly, else ``"natural"``.

    A question is identifier-like when one of its words (split on spaces, outer
    punctuation stripped) is

    - letters and digits mixed: ``PO-2231``, ``E4021``, ``H100``, ``v2``;
    - letters or digits joined by ``_ . / : \\ # @`` (not by a hyphen alone):
      ``db.max_pool_size``, ``127.0.0.1:5432``, ``config/app.yaml``, ``std::vector``;
    - camelCase: ``getUserById``, ``QinglanPay``;
    - five or more capitals: ``ECONNREFUSED``.

    A quoted phrase (``"Authorization: Bearer" token``) makes it ``phrase`` (issue 20; it was
    counted identifier-like before). Plain words, hyphenated words (``state-of-the-art``),
    short acronyms (``API``, ``CAP``) and numbers alone (``1984``) leave a question natural.
    The word rules are :func:`metis_pg.routing.identifier_words`.
    """
    if has_quoted_phrase(question):
        return "phrase"
    return "identifier" if identifier_words(question) else "natural"
