"""metis_pg: hybrid search over documents in PostgreSQL.

Dense (exact cosine, pgvector) and keyword (BM25 over our own term tables)
retrieval fused by reciprocal rank in one SQL statement, with cited passages,
the score of every step and the time each step took. See README.md.
"""

from .api import Metis, connect
from .config import BaseSpec, Settings
from .errors import (
    BaseBusy,
    BaseExists,
    BaseNotFound,
    ConfigError,
    DatabaseUnavailable,
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
    "SchemaOutOfDate",
    "UnreadableDocument",
    "ModelUnavailable",
    "EmbeddingModelUnavailable",
    "EmbeddingDimensionMismatch",
    "RerankerUnavailable",
]
