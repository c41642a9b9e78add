"""The warnings of a search about what its bases hold (SPEC F14), beside its results.

``NOTHING_INDEXED``, ``NO_READABLE_DOCUMENT`` and ``NO_VECTOR_YET`` (:func:`health_warnings`),
``TOKENIZER_CHANGED`` (:func:`tokenizer_warnings`) and ``UNKNOWN_SOURCE``
(:func:`unknown_source_warnings`); :class:`~metis_pg.search.SearchPipeline` adds them to its answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from .config import BaseSpec
from .filters import Filters
from .results import SearchWarning
from .tokenizer import TOKENIZER_VERSION

__all__ = ["health_warnings", "tokenizer_warnings", "unknown_source_warnings"]


def health_warnings(names: Sequence[str], health: dict[str, dict], mode: str) -> list[SearchWarning]:
    """Warnings of SPEC F14 about what is indexed: nothing yet, or chunks without vectors."""
    warnings = []
    for name in names:
        h = health[name]
        if h["chunks"] == 0:
            if h["sources"] and h["last_indexed_at"] is not None:
                warnings.append(SearchWarning(
                    "NO_READABLE_DOCUMENT",
                    f"nothing is indexed in {name!r}: the sources hold no document it reads (md, txt, html, pdf, docx)",
                ))
            else:
                warnings.append(SearchWarning(
                    "NOTHING_INDEXED", f"nothing is indexed yet in {name!r}: index a folder with `metis index`"
                ))
        elif h["status"] in ("waiting", "indexing") and h["chunks_without_vector"] and mode != "keyword":
            warnings.append(SearchWarning("NO_VECTOR_YET", _no_vector_text(name, h, mode)))
    return warnings


def _no_vector_text(name: str, h: dict, mode: str) -> str:
    """What ``NO_VECTOR_YET`` says: how many chunks lack a vector, why (the cause), what `mode` did with them."""
    missing, chunks = h["chunks_without_vector"], h["chunks"]
    if h["status"] == "indexing":
        why = "being embedded now"
    elif h.get("interrupted"):
        why = f"the last indexing stopped before embedding them: `metis index --base {name}` embeds them"
    else:
        why = "indexed while the embedding model did not answer"
    if missing >= chunks:
        done = "a dense search finds nothing in it until they are" if mode == "dense" else "results by keywords"
        return f"no chunk of {name!r} has a vector yet ({why}): {done}"
    done = ("a dense search cannot find those until they are embedded" if mode == "dense"
            else "those are found by keywords only")
    return f"{missing} chunks of {name!r} have no vector yet ({why}): {done}"


def tokenizer_warnings(specs: dict[str, BaseSpec], mode: str) -> list[SearchWarning]:
    """``TOKENIZER_CHANGED`` for each base whose postings an older tokenizer made (none in mode dense).

    The question's terms are this tokenizer's, so some may not match the stored ones
    (``won't`` gives ``wont`` since version 2) until ``metis index`` re-tokenizes the base.
    """
    if mode == "dense":
        return []
    return [
        SearchWarning(
            "TOKENIZER_CHANGED",
            f"{name!r} was indexed by tokenizer version {spec.tokenizer_version}, searches use version"
            f" {TOKENIZER_VERSION}: some keyword matches may be missed until `metis index` re-tokenizes it"
            " (its vectors are kept)",
        )
        for name, spec in specs.items() if spec.tokenizer_version != TOKENIZER_VERSION
    ]


def unknown_source_warnings(names: Sequence[str], health: dict[str, dict],
                            filters: Filters) -> list[SearchWarning]:
    """A `sources` filter naming a source no base searched has: say so rather than find nothing silently."""
    if not filters.sources:
        return []
    known = {s for name in names for s in health[name]["source_names"]}
    unknown = [s for s in filters.sources if s not in known]
    if not unknown:
        return []
    listed = ", ".join(sorted(known)) or "none"
    return [SearchWarning(
        "UNKNOWN_SOURCE",
        f"no base searched has a source named {', '.join(map(repr, unknown))} (sources: {listed})",
    )]
