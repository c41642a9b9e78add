"""The metis_pg exception tree: one class per way a request can fail.

Each class carries a stable ``code`` (in JSON errors and logs), the CLI
``exit_code`` and the HTTP ``http_status``; nobody else picks them::

    MetisError                         code                          exit  HTTP
    ├── ConfigError                    CONFIG_INVALID                  2    400
    ├── InvalidInput (ValueError)      INVALID_REQUEST                 2    400
    ├── BaseExists                     BASE_EXISTS                     2    409
    ├── BaseNotFound                   BASE_NOT_FOUND                  4    404
    ├── BaseBusy                       BASE_BUSY                       6    409
    ├── DatabaseUnavailable            DATABASE_UNAVAILABLE            5    503
    ├── DatabaseUnsupported            DATABASE_UNSUPPORTED            5    500
    ├── SchemaOutOfDate                SCHEMA_OUT_OF_DATE              5    503
    ├── UnreadableDocument             DOCUMENT_UNREADABLE             2    422
    ├── Unauthorized                   UNAUTHORIZED                    2    401
    ├── Forbidden                      FORBIDDEN                       2    403
    ├── NotFound                       NOT_FOUND                       4    404
    ├── RequestTooLarge                REQUEST_TOO_LARGE               2    413
    │   ├── BodyTooLarge               BODY_TOO_LARGE                  2    413
    │   ├── TooManyInputs              TOO_MANY_INPUTS                 2    413
    │   └── TextTooLong                TEXT_TOO_LONG                   2    413
    ├── RequestTimeout                 REQUEST_TIMEOUT                 2    408
    ├── ClientGone                     CLIENT_GONE                   130    499
    ├── Overloaded                     OVERLOADED                      8    503
    ├── HostNotAllowed                 HOST_NOT_ALLOWED                2    421
    ├── OriginNotAllowed               ORIGIN_NOT_ALLOWED              2    403
    ├── DiskFull                       DISK_FULL                       9    507
    ├── PortInUse                      PORT_IN_USE                     7    500
    └── ModelUnavailable               MODEL_UNAVAILABLE               3    503
        ├── EmbeddingModelUnavailable  EMBEDDING_MODEL_UNAVAILABLE     3    503
        │   └── EmbeddingDimensionMismatch  EMBEDDING_DIMENSION_MISMATCH 3 503
        └── RerankerUnavailable        RERANKER_UNAVAILABLE            3    503

The HTTP service, the MCP server and the Eos model server (``metis eos serve``) answer every
error in this one shape (:mod:`metis_pg.service.errors`); the subclasses of RequestTooLarge
and ClientGone are the Eos server's. Exit code 1 is kept for a bug (an error not listed here).

Degradations are not errors (SPEC F14): a search that loses a model still
answers and says so in its ``warnings``.
"""

from __future__ import annotations

__all__ = [
    "MetisError",
    "ConfigError",
    "InvalidInput",
    "BaseExists",
    "BaseNotFound",
    "BaseBusy",
    "DatabaseUnavailable",
    "DatabaseUnsupported",
    "SchemaOutOfDate",
    "UnreadableDocument",
    "ModelUnavailable",
    "EmbeddingModelUnavailable",
    "EmbeddingDimensionMismatch",
    "RerankerUnavailable",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "RequestTooLarge",
    "RequestTimeout",
    "Overloaded",
    "HostNotAllowed",
    "OriginNotAllowed",
    "DiskFull",
    "PortInUse",
    "BodyTooLarge",
    "TooManyInputs",
    "TextTooLong",
    "ClientGone",
]


class MetisError(Exception):
    """Base of every error metis_pg raises on purpose."""

    code = "METIS_ERROR"
    exit_code = 1
    http_status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict:
        """Return the one JSON error shape: ``{"error": {"code", "message"}}``."""
        return {"error": {"code": self.code, "message": self.message}}


class ConfigError(MetisError):
    """A setting or base spec is invalid (unknown model, bad URL, ...)."""

    code = "CONFIG_INVALID"
    exit_code = 2
    http_status = 400


class InvalidInput(MetisError, ValueError):
    """A request argument is invalid (empty question, top_k out of range, ...)."""

    code = "INVALID_REQUEST"
    exit_code = 2
    http_status = 400


class BaseExists(MetisError):
    """A base with this name already exists."""

    code = "BASE_EXISTS"
    exit_code = 2
    http_status = 409


class BaseNotFound(MetisError):
    """No base has this name."""

    code = "BASE_NOT_FOUND"
    exit_code = 4
    http_status = 404


class BaseBusy(MetisError):
    """Another process is indexing (or re-embedding) this base; one indexer per base at a time.

    Raised after waiting ``Settings.indexer_wait_s`` for the other one to finish,
    and by a writer that waited ``Settings.lock_timeout_s`` for the base's write lock.
    Try again later.
    """

    code = "BASE_BUSY"
    exit_code = 6
    http_status = 409


class DatabaseUnavailable(MetisError):
    """PostgreSQL could not be reached, started or written, or lacks pgvector.

    Raised by the pool of :mod:`metis_pg.db` within ``Settings.database_wait_s``
    for: the server down or restarting, no free connection, a full disk, a
    read-only server, a statement over ``statement_timeout_s``, a lock not granted
    within ``lock_timeout_s``. The message names the cause.

    Attributes:
        server_gone: the server closed the connection or could not be reached (it stopped, or
            restarts): work that may run again whole can wait for it (:func:`metis_pg.db.while_gone`);
            False for a refusal of the work itself (a full disk, read-only, a timeout, a lock).
    """

    code = "DATABASE_UNAVAILABLE"
    exit_code = 5
    http_status = 503
    server_gone = False


class DatabaseUnsupported(MetisError):
    """The database refused a statement as a feature it does not support (SQLSTATE 0A000).

    Raised by the pool of :mod:`metis_pg.db`, chiefly for what Citus cannot plan or run on
    distributed tables (docs/scaling.md says what metis runs there); the message is the
    server's, with its detail. Not a passing failure: retrying does not help.
    """

    code = "DATABASE_UNSUPPORTED"
    exit_code = 5
    http_status = 500


class SchemaOutOfDate(MetisError):
    """The database schema is not at the Alembic head: run `metis db upgrade`."""

    code = "SCHEMA_OUT_OF_DATE"
    exit_code = 5
    http_status = 503


class UnreadableDocument(MetisError):
    """A file could not be read (broken, encrypted, no text, too large, ...).

    Indexing turns this into a warning naming the file and goes on.
    """

    code = "DOCUMENT_UNREADABLE"
    exit_code = 2
    http_status = 422


class ModelUnavailable(MetisError):
    """A model service did not answer in time, refused, failed or answered nonsense."""

    code = "MODEL_UNAVAILABLE"
    exit_code = 3
    http_status = 503


class EmbeddingModelUnavailable(ModelUnavailable):
    """The embedding model did not give usable vectors (SPEC F14)."""

    code = "EMBEDDING_MODEL_UNAVAILABLE"


class EmbeddingDimensionMismatch(EmbeddingModelUnavailable):
    """The embedding model answered vectors of another dimension than the base's spec."""

    code = "EMBEDDING_DIMENSION_MISMATCH"


class RerankerUnavailable(ModelUnavailable):
    """The reranker did not give usable scores (SPEC F14)."""

    code = "RERANKER_UNAVAILABLE"


class Unauthorized(MetisError):
    """The HTTP service wants a valid bearer token and got none, or another (SPEC F19)."""

    code = "UNAUTHORIZED"
    exit_code = 2
    http_status = 401


class Forbidden(MetisError):
    """A valid bearer token that may not do this: a token with groups reads for them and changes
    nothing (issue 21; a change made with it could publish what its groups may not read)."""

    code = "FORBIDDEN"
    exit_code = 2
    http_status = 403


class NotFound(MetisError):
    """No such thing other than a base: an HTTP route, an indexing job, a note."""

    code = "NOT_FOUND"
    exit_code = 4
    http_status = 404


class RequestTooLarge(MetisError):
    """An HTTP request body is over the service's size limit (SPEC F19)."""

    code = "REQUEST_TOO_LARGE"
    exit_code = 2
    http_status = 413


class BodyTooLarge(RequestTooLarge):
    """A request body over the Eos server's limit (``METIS_EOS_MAX_BODY_BYTES``): its own code, kept for its clients."""

    code = "BODY_TOO_LARGE"


class TooManyInputs(RequestTooLarge):
    """More texts in one Eos request than it takes (``metis_pg.eos_server.MAX_INPUTS``)."""

    code = "TOO_MANY_INPUTS"


class TextTooLong(RequestTooLarge):
    """A text of an Eos request over ``metis_pg.eos_server.MAX_TEXT_CHARS`` characters."""

    code = "TEXT_TOO_LONG"


class ClientGone(MetisError):
    """The client closed the connection: the Eos server stopped the request's work (nginx's 499)."""

    code = "CLIENT_GONE"
    exit_code = 130
    http_status = 499


class RequestTimeout(MetisError):
    """An HTTP client did not send its request's headers or body in time (``METIS_REQUEST_READ_TIMEOUT_S``)."""

    code = "REQUEST_TIMEOUT"
    exit_code = 2
    http_status = 408


class Overloaded(MetisError):
    """The HTTP service is computing as many searches as it may (``METIS_MAX_INFLIGHT_SEARCHES``): retry soon."""

    code = "OVERLOADED"
    exit_code = 8
    http_status = 503


class HostNotAllowed(MetisError):
    """A request to the token-less HTTP service names a ``Host`` that is neither loopback nor in
    ``METIS_ALLOWED_HOSTS``: a page of another site reaching it through DNS rebinding."""

    code = "HOST_NOT_ALLOWED"
    exit_code = 2
    http_status = 421


class OriginNotAllowed(MetisError):
    """A state-changing request to the token-less HTTP service sent by a page of another origin (CSRF)."""

    code = "ORIGIN_NOT_ALLOWED"
    exit_code = 2
    http_status = 403


class DiskFull(MetisError):
    """The database's disk has less free space than indexing needs plus the margin kept for searches
    and the WAL (``METIS_DISK_FREE_MARGIN``): indexing stops before PostgreSQL runs out of space."""

    code = "DISK_FULL"
    exit_code = 9
    http_status = 507


class PortInUse(MetisError):
    """``metis serve`` / ``metis eos serve``: another process listens on the address and port asked for."""

    code = "PORT_IN_USE"
    exit_code = 7
    http_status = 500
