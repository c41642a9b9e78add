"""Converters of the shared evaluation sets that are not BEIR into our evaluation format.

Benchmark code, not part of the package: the sets live in ``../shared/data``.

Each reads a folder of ``../shared/data`` in place (nothing is copied) and
returns an :class:`~metis_pg.evaluation.EvalSet` whose ``corpus`` is the set's
own folder of Markdown documents; document ids become paths relative to it.

==========================  ====================================================================
folder                      read from
==========================  ====================================================================
gno-fastapi-multilingual    ``queries.json`` (``judgments`` inline, 0-3); group = query language
gno-cjk-lexical             ``queries.json`` + ``qrels.json`` (all grade 3); group = zh / ja / ko
gno-evals-multilingual      ``queries.json`` (29) + ``hybrid-adversarial.json`` (8); group =
                            language, or ``adversarial``
qmd-eval-docs               ``eval-deep-research.jsonl`` (25, default) or ``eval-queries.json``
                            (24); the one expected document (a part of its file name), grade 1;
                            group = difficulty
==========================  ====================================================================

BEIR folders (cranfield, agentset-*) need no converter: :func:`metis_pg.evaluation.load_beir`.

Command line: ``python benchmarks/shared_sets.py <folder> [--variant queries] -o set.json``
writes the set in our JSON format (``docs/evaluation.md``), for ``metis eval set.json``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from metis_pg.errors import InvalidInput
from metis_pg.evaluation import EvalQuery, EvalSet, Judgment

__all__ = ["CONVERTERS", "convert", "to_json", "gno_fastapi", "gno_cjk", "gno_evals", "qmd_eval"]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidInput(f"missing {path}") from None


def _gno_query(entry: dict[str, Any], *, group: str | None) -> EvalQuery:
    judged = {j["docid"]: int(j["relevance"]) for j in entry.get("judgments", [])}
    for doc in entry.get("relevantDocs", []):
        judged.setdefault(doc, 1)
    return EvalQuery(
        query_id=str(entry["id"]), question=entry["query"],
        judgments=tuple(Judgment(doc, grade) for doc, grade in judged.items()), group=group,
    )


def _finish(name: str, corpus: Path, queries: Iterable[EvalQuery]) -> EvalSet:
    kept, skipped = [], 0
    for q in queries:
        if q.relevant:
            kept.append(q)
        else:
            skipped += 1
    missing = sorted({j.document for q in kept for j in q.judgments if not (corpus / j.document).is_file()})
    if missing:
        raise InvalidInput(f"{name}: judged documents missing from {corpus}: {', '.join(missing[:5])}")
    return EvalSet(name=name, queries=tuple(kept), corpus=corpus, skipped=skipped)


def gno_fastapi(folder: Path, variant: str | None = None) -> EvalSet:
    """gno's general embedding benchmark: 15 FastAPI docs in 5 languages, 13 questions."""
    entries = _read_json(folder / "queries.json")
    return _finish("gno-fastapi-multilingual", folder / "corpus",
                   (_gno_query(e, group=e.get("queryLanguage")) for e in entries))


def gno_cjk(folder: Path, variant: str | None = None) -> EvalSet:
    """gno's CJK lexical benchmark: 21 short docs (zh, ja, ko), 25 questions, qrels apart."""
    entries = _read_json(folder / "queries.json")
    qrels: dict[str, dict[str, int]] = {}
    for j in _read_json(folder / "qrels.json")["judgments"]:
        qrels.setdefault(j["queryId"], {})[j["docid"]] = int(j["relevance"])
    return _finish("gno-cjk-lexical", folder / "corpus", (
        EvalQuery(query_id=e["id"], question=e["query"], group=e.get("language"),
                  judgments=tuple(Judgment(d, g) for d, g in qrels.get(e["id"], {}).items()))
        for e in entries
    ))


def gno_evals(folder: Path, variant: str | None = None) -> EvalSet:
    """gno's multilingual fixtures: 9 docs (en de fr it); queries.json plus the 8 adversarial cases.

    ``variant``: None = both files, ``queries`` or ``adversarial`` = one of them.
    """
    entries: list[EvalQuery] = []
    if variant in (None, "queries"):
        entries += [_gno_query(e, group=e.get("language")) for e in _read_json(folder / "queries.json")]
    if variant in (None, "adversarial"):
        entries += [_gno_query(e, group="adversarial") for e in _read_json(folder / "hybrid-adversarial.json")]
    if not entries:
        raise InvalidInput(f"unknown variant {variant!r}: use queries or adversarial")
    name = "gno-evals-multilingual" + (f"-{variant}" if variant else "")
    return _finish(name, folder / "corpus", entries)


def qmd_eval(folder: Path, variant: str | None = None) -> EvalSet:
    """qmd's eval docs: 6 English docs; ``deep-research`` (default, 25) or ``queries`` (24) questions.

    Each question expects one document, named by a part of its file name (``fundraising``).
    """
    corpus = folder / "corpus"
    files = sorted(p.name for p in corpus.glob("*.md"))

    def document(key: str) -> str:
        found = [f for f in files if key in f]
        if len(found) != 1:
            raise InvalidInput(f"qmd-eval-docs: {key!r} is in the name of {len(found)} documents, not 1")
        return found[0]

    if variant in (None, "deep-research"):
        lines = (folder / "eval-deep-research.jsonl").read_text(encoding="utf-8").splitlines()
        entries = [json.loads(line) for line in lines if line.strip()]
        name = "qmd-eval-docs"
    elif variant == "queries":
        entries = _read_json(folder / "eval-queries.json")
        name = "qmd-eval-docs-queries"
    else:
        raise InvalidInput(f"unknown variant {variant!r}: use deep-research or queries")
    return _finish(name, corpus, (
        EvalQuery(query_id=f"q{i}", question=e["query"], judgments=(Judgment(document(e["expected_doc"]), 1),),
                  group=e.get("difficulty"))
        for i, e in enumerate(entries, start=1)
    ))


CONVERTERS = {
    "gno-fastapi-multilingual": gno_fastapi,
    "gno-cjk-lexical": gno_cjk,
    "gno-evals-multilingual": gno_evals,
    "qmd-eval-docs": qmd_eval,
}


def convert(folder: str | Path, variant: str | None = None) -> EvalSet:
    """Return the evaluation set of a shared folder, by its name (see the module table).

    Raises:
        InvalidInput: no converter for this folder, or a file is missing.
    """
    folder = Path(folder).resolve()
    try:
        converter = CONVERTERS[folder.name]
    except KeyError:
        raise InvalidInput(f"no converter for {folder.name!r}: known {', '.join(CONVERTERS)}") from None
    return converter(folder, variant)


def to_json(eval_set: EvalSet) -> dict[str, Any]:
    """Return a set in our JSON format (``docs/evaluation.md``); ``corpus`` as an absolute path."""
    queries = []
    for q in eval_set.queries:
        item: dict[str, Any] = {"id": q.query_id, "question": q.question}
        if q.group is not None:
            item["group"] = q.group
        if q.query_type is not None:
            item["type"] = q.query_type
        item["relevant"] = [
            {"document": j.document, "grade": j.grade,
             **({"line": j.line} if j.line is not None else {}), **({"page": j.page} if j.page is not None else {})}
            for j in q.judgments
        ]
        queries.append(item)
    data: dict[str, Any] = {"name": eval_set.name}
    if eval_set.corpus is not None:
        data["corpus"] = str(Path(eval_set.corpus).resolve())
    data["queries"] = queries
    return data


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python benchmarks/shared_sets.py", description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="a folder of ../shared/data with a converter")
    parser.add_argument("--variant", default=None, help="queries / adversarial (gno-evals), queries (qmd)")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the JSON file to write")
    args = parser.parse_args(argv)
    eval_set = convert(args.folder, args.variant)
    args.output.write_text(json.dumps(to_json(eval_set), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{eval_set.name}: {len(eval_set.queries)} questions → {args.output}")


if __name__ == "__main__":
    main()
