"""Request bodies and documented answers of the HTTP API (pydantic models).

Bodies refuse unknown fields (a misspelt ``top-k`` is a 400, not the default)
and text PostgreSQL cannot store (NUL, lone surrogates). The ``...Out`` models
document answers in the OpenAPI schema; the answers themselves are the
``to_dict()`` of the :mod:`metis_pg.results` objects.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Path as PathParam
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from ..api import MAX_QUESTION_CHARS, MAX_TOP_K
from ..config import BaseSpec

#: Bases one search may name at most.
MAX_BASES_PER_SEARCH = 20
#: Paths one indexing job may name at most.
MAX_PATHS_PER_JOB = 100


def _clean_text(value: str) -> str:
    """Refuse text PostgreSQL cannot store (NUL) or that is not valid Unicode (lone surrogates)."""
    if "\x00" in value:
        raise ValueError("text must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text must be valid Unicode (no lone surrogates)") from None
    return value


def _text(min_length: int | None = None, max_length: int | None = None) -> Any:
    """A JSON string field: length bounds (characters), no NUL, valid Unicode."""
    return Annotated[str, Field(strict=True, min_length=min_length, max_length=max_length), AfterValidator(_clean_text)]


BaseName = _text(1, 63)
#: A base name in a route's path.
NameParam = Annotated[str, PathParam(min_length=1, max_length=63), AfterValidator(_clean_text)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


_Names = Annotated[list[_text(None, 200)], Field(max_length=100)]


class FiltersIn(_Body):
    """Filters applied inside both legs before ranking (SPEC F10, issue 21); all given must hold.
    See metis_pg.filters.Filters."""

    path_prefix: _text(None, 1000) | None = None
    exclude_prefixes: Annotated[list[_text(None, 1000)], Field(max_length=100)] | None = Field(
        None, description="drop documents whose path starts with any of these")
    kinds: Annotated[list[_text(None, 10)], Field(max_length=10)] | None = None
    sources: _Names | None = None
    tags_any: _Names | None = Field(None, description="documents with at least one of these tags (case-insensitive)")
    tags_all: _Names | None = Field(None, description="documents with every one of these tags")
    exclude_tags: _Names | None = Field(None, description="drop documents with any of these tags")
    authors: _Names | None = Field(None, description="documents by one of these authors (exact)")
    categories: _Names | None = Field(None, description="documents of one of these categories (exact)")
    since: _text(None, 40) | None = Field(
        None, description="ISO date or date-time: documents dated from then (their date, else the file's mtime)")
    until: _text(None, 40) | None = Field(None, description="ISO date (its whole day) or date-time: dated until then")
    meta: dict[_text(1, 200), StrictStr | StrictInt | StrictFloat | StrictBool] | None = Field(
        None, description="documents whose other metadata has each key = value (front matter, properties)")


#: A base's defaults live in BaseSpec only; the schema shows them.
_SPEC = BaseSpec()

#: A weight of a leg in the fusion: a finite number >= 0 (both 0 is refused by the search, 400).
Weight = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]
#: The RRF constant k of ``weight / (k + rank)``.
RrfK = Annotated[StrictInt, Field(ge=1, le=10_000)]


#: The dense leg's share in a convex combination.
Alpha = Annotated[float, Field(strict=True, ge=0, le=1, allow_inf_nan=False)]


class FusionIn(_Body):
    """Overrides the bases' fusion parameters for one search (any of them; the rest from each base's spec):
    ``rrf``: ``fused = dense_weight / (rrf_k + dense_rank) + keyword_weight / (rrf_k + keyword_rank)``;
    ``convex``: ``alpha * N(cosine) + (1 - alpha) * N(BM25)`` (docs/search.md)."""

    fusion: Literal["rrf", "convex"] | None = Field(
        None, description=f"fusion function; default the base's ({_SPEC.fusion} unless set at creation)")
    normalization: Literal["tmm", "minmax", "z"] | None = Field(
        None, description=f"convex: score normalization; default the base's ({_SPEC.normalization})")
    alpha: Alpha | None = Field(None, description=f"convex: the dense leg's share; default the base's ({_SPEC.alpha:g})")
    routing: StrictBool | None = Field(
        None, description=f"shift the dense share per question from its features; default the base's ({_SPEC.routing})")
    collapse_copies: StrictBool | None = Field(
        None, description="in each leg, the chunks of one text take one place (a copy that still holds); "
                          f"default the base's ({_SPEC.collapse_copies} unless set at creation)")

    rrf_k: RrfK | None = Field(
        None, description=f"RRF constant; default the base's ({_SPEC.rrf_k} unless set at creation)")
    dense_weight: Weight | None = Field(
        None, description=f"weight of the dense leg; default the base's ({_SPEC.dense_weight:g} unless set)")
    keyword_weight: Weight | None = Field(
        None, description=f"weight of the keyword leg; default the base's ({_SPEC.keyword_weight:g} unless set)")


class SearchIn(_Body):
    """A search (SPEC F5-F12)."""

    bases: BaseName | Annotated[list[BaseName], Field(min_length=1, max_length=MAX_BASES_PER_SEARCH)] = Field(
        description="a base name, or several (results merged, each names its base)"
    )
    question: _text(1, MAX_QUESTION_CHARS)
    mode: Literal["hybrid", "dense", "keyword"] = "hybrid"
    top_k: StrictInt = Field(10, ge=1, le=MAX_TOP_K)
    rerank: StrictBool | None = Field(None, description="false skips the reranker; null/true use it if the base has one")
    filters: FiltersIn | None = None
    fusion: FusionIn | None = Field(None, description="overrides the bases' rrf_k and leg weights for this search")
    consistent: StrictBool = Field(False, description="read-your-writes: with read replicas, search one that has "
                                                      "replayed every write committed so far (else the primary)")
    per_document: StrictBool = Field(False, description="each document once, at its best passage, with how many of "
                                                        "its passages matched (`passages`)")


class CompareIn(_Body):
    """One question asked three ways (SPEC F15)."""

    bases: BaseName | Annotated[list[BaseName], Field(min_length=1, max_length=MAX_BASES_PER_SEARCH)]
    question: _text(1, MAX_QUESTION_CHARS)
    top_k: StrictInt = Field(10, ge=1, le=MAX_TOP_K)
    rerank: StrictBool | None = None
    filters: FiltersIn | None = None
    fusion: FusionIn | None = Field(None, description="overrides the bases' rrf_k and leg weights, as in a search")


class CreateBaseIn(_Body):
    """A new base (SPEC F1). A model URL must be on ``METIS_MODEL_URL_ALLOW_HOSTS``, an API key
    variable on ``METIS_MODEL_KEY_ENVS`` (the key itself is never sent or stored).

    An option left out (or null) takes the default of :class:`~metis_pg.config.BaseSpec`.
    """

    name: BaseName
    kind: Literal["documents", "memory"] = "documents"
    embedding_model: _text(None, 200) | None = None
    embedding_url: _text(None, 2000) | None = None
    embedding_dim: Annotated[StrictInt, Field(ge=1, le=16000)] | None = None
    embedding_protocol: Literal["openai", "tei"] | None = Field(None, description=f"default {_SPEC.embedding_protocol}")
    query_prefix: _text(None, 2000) | None = None
    embedding_api_key_env: _text(None, 200) | None = Field(
        None, description="the environment variable holding the embedding service's API key (METIS_MODEL_KEY_ENVS)")
    reranker_model: _text(None, 200) | None = None
    reranker_url: _text(None, 2000) | None = None
    reranker_api_key_env: _text(None, 200) | None = Field(
        None, description="the environment variable holding the reranker's API key (METIS_MODEL_KEY_ENVS)")
    reranker_protocol: Literal["cohere", "tei", "infinity"] | None = Field(
        None, description=f"default {_SPEC.reranker_protocol}")
    model_timeout_s: Annotated[float, Field(gt=0, le=600)] | None = Field(
        None, description=f"seconds; default {_SPEC.model_timeout_s:g}")
    chunk_size: Annotated[StrictInt, Field(ge=200, le=20000)] | None = Field(
        None, description=f"characters; default {_SPEC.chunk_size}")
    rrf_k: RrfK | None = Field(
        None, description=f"RRF constant of the fusion; default {_SPEC.rrf_k}")
    dense_weight: Weight | None = Field(
        None, description=f"weight of the dense leg in the fusion (not both 0); default {_SPEC.dense_weight:g}")
    keyword_weight: Weight | None = Field(
        None, description=f"weight of the keyword leg in the fusion; default {_SPEC.keyword_weight:g}")
    fusion: Literal["rrf", "convex"] | None = Field(None, description=f"fusion function; default {_SPEC.fusion}")
    normalization: Literal["tmm", "minmax", "z"] | None = Field(
        None, description=f"convex: score normalization; default {_SPEC.normalization}")
    alpha: Alpha | None = Field(None, description=f"convex: the dense leg's share; default {_SPEC.alpha:g}")
    routing: StrictBool | None = Field(None, description=f"per-question routing; default {_SPEC.routing}")
    collapse_copies: StrictBool | None = Field(
        None, description=f"in each leg, copies of one text take one place; default {_SPEC.collapse_copies}")
    field_weight: Annotated[StrictInt, Field(ge=0, le=10)] | None = Field(
        None, description="times a word of the title and heading path counts in BM25 against 1 for the text "
                          f"(BM25F-style); default {_SPEC.field_weight}")


class IndexIn(_Body):
    """Folders or files to index, absolute or relative to a source root (``METIS_SOURCE_ROOTS``)."""

    paths: Annotated[list[_text(1, 4096)], Field(min_length=1, max_length=MAX_PATHS_PER_JOB)]
    source: _text(1, 200) | None = None
    #: Groups that may read the documents of these sources (``[]``: every caller); None keeps the
    #: sources' (docs/security.md).
    readers: Annotated[list[_text(1, 63)], Field(max_length=100)] | None = None
    #: Whether a document's own ``readers:`` front matter may narrow its source's; None keeps it.
    front_matter_readers: bool | None = None


class NoteIn(_Body):
    """A note: a document of the base's own source ``metis-<base>`` (SPEC F2)."""

    title: _text(1, 500)
    text: _text(1, 200_000)


class FactIn(_Body):
    """A fact of a memory base (SPEC F11); it may replace an older one (same key, or named)."""

    text: _text(1, 20_000)
    key: _text(1, 500) | None = Field(None, description="what the fact is about; a newer fact with this key replaces it")
    supersedes: StrictInt | None = Field(None, description="id of the fact this one replaces")
    observed_at: _text(1, 64) | None = Field(None, description="when it was true, ISO 8601 (default: now)")


class ErrorDetail(BaseModel):
    code: str = Field(description="stable code: INVALID_REQUEST, UNAUTHORIZED, BASE_NOT_FOUND, ...")
    message: str


class ErrorOut(BaseModel):
    """Every error answer."""

    error: ErrorDetail


class CitationOut(BaseModel):
    source: str
    document: str
    title: str
    kind: str
    page: int | None = Field(None, description="PDF page of the snippet's sentence (absent for other kinds)")
    page_start: int | None = Field(None, description="first PDF page of the passage (with page)")
    page_end: int | None = Field(None, description="last PDF page of the passage (with page)")
    page_label: str | None = Field(None, description=(
        "the page's printed label when the PDF has page labels and it differs from the page's number (page 19 "
        "printed \"16\"); absent otherwise"))
    line: int | None = Field(None, description="line where the snippet's sentence starts (absent for PDF, docx)")
    column: int | None = Field(None, description=(
        "column (characters, from 1) of the snippet's sentence in line, when the passage starts inside a line "
        "that an earlier passage also holds (a line longer than a chunk); absent otherwise"))
    line_start: int | None = Field(None, description="first line of the passage (with line)")
    line_end: int | None = Field(None, description="last line of the passage (with line)")
    headings: list[str]
    snippet: str
    marks: list[list[int]] = Field(default_factory=list, description=(
        "spans of the snippet to mark, [start, end) in characters (Unicode code points): the question's words "
        "that weigh in the base (idf; a word in more than a tenth of its chunks does not, unless the question's "
        "rarest)"))
    tags: list[str] = Field(default_factory=list, description="the document's tags, lower case")
    author: str | None = Field(None, description="the document's author")
    date: str | None = Field(None, description="the document's date, else its file's modification time (ISO 8601)")


class ScoresOut(BaseModel):
    """Each key is absent where that step did not find or score the passage."""

    dense: float | None = None
    dense_rank: int | None = None
    keyword: float | None = None
    keyword_rank: int | None = None
    fused: float | None = None
    rerank: float | None = None


class ResultOut(BaseModel):
    score: float
    text: str
    base: str
    citation: CitationOut
    scores: ScoresOut
    chunk_id: int
    holds: bool | None = Field(None, description="memory bases: whether the fact still holds")
    passages: int | None = Field(None, description="per_document: how many passages of its document matched")


class WarningOut(BaseModel):
    code: str
    message: str


class TookOut(BaseModel):
    embed: float
    dense: float
    keyword: float
    fuse: float
    rerank: float
    total: float


class FusionOut(BaseModel):
    """The fusion parameters used: these three when every base searched used the same, else
    ``per_base`` alone (base name → these three)."""

    fusion: str | None = None
    normalization: str | None = None
    alpha: float | None = None
    routing: bool | None = None
    collapse_copies: bool | None = None
    rrf_k: int | None = None
    dense_weight: float | None = None
    keyword_weight: float | None = None
    route: dict[str, Any] | None = Field(None, description="hybrid: dense_share, features fired, absent_share, "
                                                          "bm25_ratio (docs/search.md, Routing)")
    per_base: dict[str, dict[str, Any]] | None = None


class SearchOut(BaseModel):
    """The SPEC F13 answer (documentation only: the body is ``SearchResponse.to_dict()``)."""

    mode: str
    reranked: bool
    bases: list[str]
    fusion: FusionOut
    results: list[ResultOut]
    warnings: list[WarningOut]
    took: TookOut
    per_document: bool | None = Field(None, description="true when asked per document")


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "INVALID_REQUEST (also a body that fails validation)"},
    401: {"model": ErrorOut, "description": "UNAUTHORIZED: no or wrong bearer token"},
    413: {"model": ErrorOut, "description": "REQUEST_TOO_LARGE"},
}

