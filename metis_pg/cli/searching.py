"""Commands that read a base: ``metis search``, ``metis get``, ``metis ls``, ``metis eval``."""

# No `from __future__ import annotations`: Typer would compile the options' annotation strings at each run
# (search's module: Typer's build 9 -> 3 ms of CPU; issue 25).

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from typer.core import TyperCommand

from ..errors import BaseNotFound, InvalidInput
from .options import (
    AsOption,
    AuthorOption,
    CategoryOption,
    CsvOption,
    DsnOption,
    ExcludeOption,
    ExcludeTagOption,
    FilesOption,
    JsonlOption,
    JsonOption,
    MdOption,
    MetaOption,
    SinceOption,
    TagOption,
    TagsAllOption,
    UntilOption,
    fusion_option,
    metadata_filters,
    open_metis,
    principals_option,
)
from .render import SPEC, renderer
from .root import app

if TYPE_CHECKING:  # pragma: no cover
    from ..api import Metis

__all__ = ["search", "get_command", "ls_command", "eval_command", "QuestionCommand", "question_args"]


def question_args(args: list[str], options: list[Any]) -> list[str]:
    """Return `args` of a command taking a question with its words last, after ``--``, so that Click reads a
    ``-word`` among them as a word of the question, not as an option.

    A word of the question: an argument that is no option, or that starts with one ``-`` then a letter and
    has 3+ characters (``-legacy``, ``-vacuum``), unless it is a short option taking a value with digits
    attached (``-n5``, ``-k10``); every argument after ``--``. Everything else keeps its place and its
    meaning: an option (``-n``, ``--top-k``, ``--as``, ``--top-k=5``), the value after an option that takes
    one (``--prefix -x``: ``-x`` is the prefix), an unknown option (Click refuses it as before). So a value is
    never glued to ``-b`` or ``-m`` (``-b docs``, not ``-bdocs``). The question's words keep their order.

    `options`: the command's Click parameters (their ``opts``, ``secondary_opts``, ``is_flag``, ``count``).
    """
    takes_value: set[str] = set()
    for p in options:
        if getattr(p, "param_type_name", "") == "option" and not p.is_flag and not p.count:
            takes_value.update(p.opts + p.secondary_opts)
    short_valued = {o for o in takes_value if len(o) == 2 and o[1] != "-"}
    kept: list[str] = []
    words: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            words.extend(rest)
            break
        if not arg.startswith("-") or arg == "-":
            words.append(arg)
        elif (len(arg) >= 3 and arg[1].isalpha()
              and not (arg[:2] in short_valued and arg[2:].isdigit())):
            words.append(arg)  # -legacy: a word the question excludes
        else:
            kept.append(arg)
            value = next(rest, None) if arg in takes_value else None
            if value is not None:  # the option's value, whatever it looks like
                kept.append(value)
    return [*kept, "--", *words] if words else kept


class QuestionCommand(TyperCommand):
    """A Typer command whose arguments are a question: ``metis search docs vacuum -legacy`` drops passages
    holding "legacy" (the syntax of HTTP and MCP, :mod:`metis_pg.query_syntax`), where Click alone took
    ``-legacy`` for options (:func:`question_args`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, question_args(args, self.get_params(ctx)))


@app.command(cls=QuestionCommand)
def search(
    ctx: typer.Context,
    words: Annotated[list[str], typer.Argument(
        help="[BASES] QUESTION: the base (several: separated by commas), then the question's words, quoted or "
             "not; a question alone (one quoted argument) is asked of every base.")],
    base: Annotated[Optional[list[str]], typer.Option(
        "--base", "-b", help="Search this base (repeatable, or commas); every word is then the question.")] = None,
    mode: Annotated[Optional[str], typer.Option("--mode", "-m", help="hybrid (default), dense or keyword.")] = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", "-n", help="Number of results (1-100).")] = 10,
    no_rerank: Annotated[bool, typer.Option("--no-rerank", help="Skip the reranker.")] = False,
    prefix: Annotated[Optional[str], typer.Option("--prefix", help="Keep documents whose path starts with it.")] = None,
    kind: Annotated[Optional[list[str]], typer.Option("--kind", help="Keep this kind (repeatable).")] = None,
    source: Annotated[Optional[list[str]], typer.Option("--source", help="Keep this source (repeatable).")] = None,
    tag: TagOption = None,
    tags_all: TagsAllOption = None,
    exclude_tag: ExcludeTagOption = None,
    author: AuthorOption = None,
    category: CategoryOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    exclude: ExcludeOption = None,
    meta: MetaOption = None,
    per_document: Annotated[bool, typer.Option(
        "--per-document", "-d", help="Each document once, at its best passage, with how many of its passages "
                                     "matched (--files implies it).")] = False,
    compare: Annotated[bool, typer.Option("--compare", help="Ask three ways (hybrid, dense, keyword) and say why "
                                                            "each passage came up.")] = False,
    weights: Annotated[Optional[str], typer.Option(
        "--weights", help="DENSE:KEYWORD weights of the legs in the fusion, e.g. 1.5:1 "
                          "(default: the base's, 1.2:0.8 unless set at creation).")] = None,
    rrf_k: Annotated[Optional[int], typer.Option(
        "--rrf-k", help=f"RRF constant, 1-10000 (default: the base's, {SPEC.rrf_k} unless set at creation).")] = None,
    fusion_function: Annotated[Optional[str], typer.Option(
        "--fusion", help="rrf (ranks) or convex (normalized scores); default: the base's.")] = None,
    alpha: Annotated[Optional[float], typer.Option(
        "--alpha", help="convex: the dense leg's share, 0-1; default: the base's.")] = None,
    routing: Annotated[Optional[bool], typer.Option(
        "--routing/--no-routing", help="Shift the dense share per question from its features; default: the base's.")] = None,
    collapse_copies: Annotated[Optional[bool], typer.Option(
        "--collapse-copies/--keep-copies",
        help="In each leg, copies of one text take one place (collapse) or each its own (keep); default: the base's.")
    ] = None,
    min_score: Annotated[Optional[float], typer.Option(
        "--min-score", help="Leave out results scored below it: the reranker's score when reranked, else the fused "
                            "score (hybrid), the cosine (dense) or the BM25 score (keyword).")] = None,
    consistent: Annotated[bool, typer.Option(
        "--consistent", help="Read your writes: search a read replica only once it has replayed every write "
                             "committed so far (else the primary). With the primary down it cannot be "
                             "confirmed: exit 5, saying why.")] = False,
    as_group: AsOption = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
    as_jsonl: JsonlOption = False,
    as_csv: CsvOption = False,
    as_md: MdOption = False,
    as_files: FilesOption = False,
) -> None:
    """Search one or several bases (default: every base); print cited passages with their scores.

    In the question, "a quoted phrase" keeps only passages holding it, and -word drops passages
    holding the word: metis search docs router -legacy, or in one argument metis search docs
    '"reset the router" -legacy'. A -word of 3+ characters is a word of the question, not an
    option: give -b and -m their value apart (-b docs, not -bdocs).

    \b
    Examples:
      metis search docs "how many vacation days" -n 5 --weights 1.5:1
      metis search docs vacuum full                          # the question "vacuum full", unquoted
      metis search "vacuum full"                             # every base
      metis search -b docs,wiki vacuum full                  # every word is the question
      metis search docs "vacation" --md --min-score 0.02     # cited passages to paste
      metis search docs "vacation" --files -n 3              # the 3 best documents' paths
      metis search docs "leave" --tag hr --since 2024-01-01 --meta status=final
      metis search docs '"reset the router" -legacy' --fusion convex --alpha 0.6
      metis search docs vacuum -legacy -n 3                  # passages without "legacy"
      metis search docs "salary bands" --as eng             # what the group eng may read
    """
    from ..formats import cut_below, search_output

    if mode != "keyword":
        from ..models._e5 import preload

        preload()  # the bundled model loads while the command connects (metis search's start-up, issue 25)
    r = renderer(ctx)
    fmt = r.choose(json=as_json, jsonl=as_jsonl, csv=as_csv, md=as_md, files=as_files)
    filters = {"path_prefix": prefix, "kinds": kind or None, "sources": source or None,
               **metadata_filters(tag, tags_all, exclude_tag, author, category, since, until, exclude, meta)}
    fusion = fusion_option(weights, rrf_k)
    principals = principals_option(as_group)
    extra = {"fusion": fusion_function, "alpha": alpha, "routing": routing, "collapse_copies": collapse_copies}
    if any(v is not None for v in extra.values()):
        fusion = {**(fusion or {}), **{k: v for k, v in extra.items() if v is not None}}
    if compare:
        if mode is not None:
            raise InvalidInput(f"--compare asks all three modes (hybrid, dense, keyword): drop --mode {mode}")
        if fmt not in ("text", "json"):
            raise InvalidInput(f"--compare prints a table or --json, not --{fmt}")
        if min_score is not None:
            raise InvalidInput("--compare shows every passage of every mode: drop --min-score")
        if per_document:
            raise InvalidInput("--compare shows every passage of every mode: drop --per-document")
        with open_metis(dsn) as m:
            names, question = bases_and_question(m, words, base)
            result = m.compare(names, question, top_k=top_k, rerank=False if no_rerank else None,
                               filters={k: v for k, v in filters.items() if v}, fusion=fusion,
                               principals=principals)
        if fmt == "json":
            r.json(result.to_dict())
        else:
            r.comparison(result)
        return
    with open_metis(dsn) as m:
        names, question = bases_and_question(m, words, base)
        answer = m.search(names, question, mode=mode or "hybrid", top_k=top_k, rerank=False if no_rerank else None,
                          filters={k: v for k, v in filters.items() if v}, fusion=fusion, consistent=consistent,
                          per_document=per_document or fmt == "files", principals=principals)
    answer, dropped = cut_below(answer, min_score)
    if fmt == "text":
        r.answer(answer)
        if dropped:
            r.dim(f"{dropped} results scored below --min-score {min_score:g} left out")
        return
    if fmt != "json":  # the other formats have no place for them: stderr, stdout stays a clean list
        for w in answer.warnings:
            r.err.print(f"warning: {w.message}")
    if dropped:
        r.err.print(f"{dropped} results scored below --min-score {min_score:g} left out")
    r.write(search_output(answer, fmt))


def _names(text: str) -> list[str]:
    return [b.strip() for b in text.split(",") if b.strip()]


def bases_and_question(m: "Metis", words: list[str], base: list[str] | None) -> tuple[list[str], str]:
    """Return the bases and the question of ``metis search [BASES] WORDS... [--base B]``.

    With `base`, every word is the question. Else one word alone (``metis search "vacuum full"``) is the
    question asked of every base (as the MCP tool's default); with more words the first is the bases,
    the rest the question (``metis search pg vacuum full``).

    Raises:
        InvalidInput: no base exists yet.
        BaseNotFound: the first word names no base (the message says how to ask every base instead).
    """
    if base:
        return [n for b in base for n in _names(b)], " ".join(words)
    known = m.base_names(for_reading=True)
    if len(words) > 1:
        names = _names(words[0])
        unknown = [n for n in names if n not in known]
        if unknown:
            try:
                m.base(unknown[0])  # the library's own error: the closest names, the bases there are
            except BaseNotFound as exc:
                raise BaseNotFound(f"{exc.message}; to ask every base, quote the whole question: metis search "
                                   f"\"{' '.join(words)}\"") from None
        return names, " ".join(words[1:])
    if not known:
        raise InvalidInput("there is no base to search yet: metis index FOLDER --base NAME makes one")
    return known, words[0]


@app.command("get")
def get_command(
    ctx: typer.Context,
    base: Annotated[str, typer.Argument(help="The base.")],
    documents: Annotated[list[str], typer.Argument(
        help="DOCUMENT (its path, as `metis ls` lists it), DOCUMENT:LINE (the chunk a search cites at that line; "
             "DOCUMENT:LINE:COLUMN inside a line longer than a chunk), "
             "'DOCUMENT p.N' (a PDF page), or a glob such as 'guide/*.md'; several.")],
    source: Annotated[Optional[str], typer.Option("--source", help="Only documents of this source.")] = None,
    max_bytes: Annotated[Optional[int], typer.Option(
        "--max-bytes", min=1, help="Print at most this many bytes (UTF-8) of each document's text, and say what "
                                   "was cut.")] = None,
    as_group: AsOption = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print documents of a base as they are indexed (from their chunks), each with its citation.

    \b
    Examples:
      metis get docs guide/leave.md:12     # the passage a search cited at line 12
      metis get docs 'guide/*.md' --max-bytes 2000
    """
    from ..documents import cut_utf8

    r = renderer(ctx)
    r.choose(json=as_json)
    with open_metis(dsn) as m:
        found = m.get(base, *documents, source=source, principals=principals_option(as_group))
    shown = [(d, cut_utf8(d.text, max_bytes), len(d.text.encode("utf-8"))) for d in found]
    if as_json:
        r.json([{**d.to_dict(), "text": cut, "bytes": size, "truncated": len(cut) < len(d.text)}
                for d, cut, size in shown])
    else:
        r.document_texts(shown)


@app.command("ls")
def ls_command(
    ctx: typer.Context,
    base: Annotated[str, typer.Argument(help="The base.")],
    prefix: Annotated[Optional[str], typer.Argument(help="Only paths starting with it, e.g. guide/.")] = None,
    source: Annotated[Optional[str], typer.Option("--source", help="Only documents of this source.")] = None,
    tag: TagOption = None,
    tags_all: TagsAllOption = None,
    exclude_tag: ExcludeTagOption = None,
    author: AuthorOption = None,
    category: CategoryOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    exclude: ExcludeOption = None,
    meta: MetaOption = None,
    as_group: AsOption = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
    as_jsonl: JsonlOption = False,
    as_csv: CsvOption = False,
    as_md: MdOption = False,
    as_files: FilesOption = False,
) -> None:
    """List the documents of a base: path, kind, chunks, when indexed, source, tags, date, author.

    \b
    Examples:
      metis ls docs guide/
      metis ls docs --files | grep -c '[.]pdf$'
      metis ls docs --tag hr --since 2024-01-01
    """
    from ..formats import documents_output

    r = renderer(ctx)
    fmt = r.choose(json=as_json, jsonl=as_jsonl, csv=as_csv, md=as_md, files=as_files)
    with open_metis(dsn) as m:
        found = m.documents(base, prefix, source=source, filters=metadata_filters(
            tag, tags_all, exclude_tag, author, category, since, until, exclude, meta) or None,
            principals=principals_option(as_group))
    if fmt != "text":
        r.write(documents_output(found, fmt))
    else:
        r.documents(found, prefix)


@app.command("eval")
def eval_command(
    ctx: typer.Context,
    eval_set: Annotated[Path, typer.Argument(help="A BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) "
                                                  "or a JSON evaluation set (docs/evaluation.md).")],
    base: Annotated[Optional[str], typer.Option("--base", "-b", help="Base searched (default: the set's name; "
                                                                      "indexed from the set's corpus if missing).")] = None,
    mode: Annotated[Optional[list[str]], typer.Option("--mode", "-m", help="hybrid, dense, keyword or "
                                                      "hybrid_no_rerank (repeatable; default all that apply).")] = None,
    top_k: Annotated[int, typer.Option("--top-k", "-k", help="Passages asked per search (1-100).")] = 50,
    per_query: Annotated[bool, typer.Option("--per-query", help="With --json: each question's scores too.")] = False,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Evaluate search on a set: nDCG@10, Recall@10/@50, MRR@10, zero results, p50/p95 per mode and query type.

    Example: metis eval ../shared/data/cranfield
    """
    from .progress import count_bar  # rich

    r = renderer(ctx)
    r.choose(json=as_json)
    with open_metis(dsn) as m, count_bar(r, None, quiet=as_json) as bar:
        indexing_task = bar.add_task("indexing", total=None, visible=False)
        task = bar.add_task("searching", total=None)

        def on_index(done: int, total: int, chunks: int) -> None:
            bar.update(indexing_task, completed=done, total=total, visible=True)

        report = m.evaluate(base, eval_set, modes=mode or None, top_k=top_k,
                            on_progress=lambda done, total: bar.update(task, completed=done, total=total),
                            on_index_progress=on_index)
    if as_json:
        r.json(report.to_dict(per_query=per_query))
    else:
        r.evaluation(report)
