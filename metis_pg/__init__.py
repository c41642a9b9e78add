"""metis_pg: hybrid search over documents in PostgreSQL.

Dense (exact cosine, pgvector) and keyword (BM25 over our own term tables)
retrieval fused by reciprocal rank in one SQL statement, with cited passages,
the score of every step and the time each step took. See README.md.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from .errors import (
    BaseBusy,
    BaseExists,
    BaseNotFound,
    ConfigError,
    DatabaseUnavailable,
    DatabaseUnsupported,
    EmbeddingDimensionMismatch,
    EmbeddingModelUnavailable,
    InvalidInput,
    MetisError,
    ModelUnavailable,
    NotFound,
    RerankerUnavailable,
    SchemaOutOfDate,
    UnreadableDocument,
)
from .results import (
    BaseInfo,
    Citation,
    Fact,
    FailedDocument,
    IndexReport,
    Note,
    ReembedReport,
    Scores,
    SearchResponse,
    SearchResult,
    SearchWarning,
    Took,
)

__version__ = "0.1.0"

__all__ = [
    "connect",
    "Metis",
    "BaseSpec",
    "Settings",
    "BaseInfo",
    "Citation",
    "Fact",
    "FailedDocument",
    "IndexReport",
    "Note",
    "ReembedReport",
    "Scores",
    "SearchResponse",
    "SearchResult",
    "SearchWarning",
    "Took",
    "MetisError",
    "ConfigError",
    "InvalidInput",
    "BaseExists",
    "BaseNotFound",
    "BaseBusy",
    "NotFound",
    "DatabaseUnavailable",
    "DatabaseUnsupported",
    "SchemaOutOfDate",
    "UnreadableDocument",
    "ModelUnavailable",
    "EmbeddingModelUnavailable",
    "EmbeddingDimensionMismatch",
    "RerankerUnavailable",
]

# The API (psycopg, numpy, the readers, the models) is imported on first use, so that
# `metis --help` and the commands that do not need all of it start fast.
_LAZY = {"Metis": "api", "connect": "api", "BaseSpec": "config", "Settings": "config"}

if _TYPE_CHECKING:  # pragma: no cover
    from .api import Metis, connect
    from .config import BaseSpec, Settings


def __getattr__(name: str) -> _Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
