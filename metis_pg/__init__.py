"""metis_pg: hybrid search over documents in PostgreSQL.

Dense (exact cosine, pgvector) and keyword (BM25 over our own term tables)
retrieval fused by reciprocal rank in one SQL statement, with cited passages,
the score of every step and the time each step took. See README.md.

The public interface is what this package exports (``__all__``): :func:`connect`,
:class:`Metis`, the types its methods return, the errors, :class:`BaseSpec` and
:class:`Settings`. Besides it, the ``metis`` command (``metis_pg.cli``), the HTTP service
(``metis_pg.service``), the MCP server (``metis_pg.mcp_server``) and the Eos model server
(``metis_pg.eos_server``) are front doors. Every other module (``indexing``, ``storage``,
``db``, ``models``, ``search``, ``retrieval``, ``readers``, ...) is internal: its names may
change between versions. docs/architecture.md draws them.
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
    Citation,
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
    "CompareResult",
    "EvalReport",
    "SourceInfo",
    "DocumentInfo",
    "DocumentText",
    "ReplicaStatus",
]

# The API (psycopg, numpy, the readers, the models) is imported on first use, so that
# `metis --help` and the commands that do not need all of it start fast.
_LAZY = {
    "Metis": "api", "connect": "api", "BaseSpec": "config", "Settings": "config",
    # What Metis's methods return, besides metis_pg.results (a search's).
    "BaseInfo": "reports", "Fact": "reports", "FailedDocument": "reports", "IndexReport": "reports",
    "Note": "reports", "ReembedReport": "reports",
    "CompareResult": "compare", "EvalReport": "evaluation", "SourceInfo": "documents",
    "DocumentInfo": "documents", "DocumentText": "documents", "ReplicaStatus": "replicas",
}

if _TYPE_CHECKING:  # pragma: no cover
    from .api import Metis, connect
    from .compare import CompareResult
    from .config import BaseSpec, Settings
    from .documents import DocumentInfo, DocumentText, SourceInfo
    from .evaluation import EvalReport
    from .replicas import ReplicaStatus
    from .reports import BaseInfo, Fact, FailedDocument, IndexReport, Note, ReembedReport


def __getattr__(name: str) -> _Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
