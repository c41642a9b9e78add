"""The database and the servers: ``metis db ...``, ``metis db replica ...``, ``metis eos serve``, ``metis serve``,
``metis mcp``."""

# No `from __future__ import annotations`: Typer would compile the options' annotation strings at each run
# (search's module: Typer's build 9 -> 3 ms of CPU; issue 25).

from pathlib import Path
from typing import Annotated, Optional

import typer

from .options import AsOption, DsnOption, principals_option
from .render import renderer
from .root import app, db_app, eos_app, replica_app

__all__ = ["db_upgrade", "db_current", "db_stop", "replica_create", "replica_start", "replica_stop", "eos_serve",
           "serve_http", "mcp_command", "check_port"]


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context, dsn: DsnOption = None) -> None:
    """Run the Alembic migrations up to head.

    Example: metis db upgrade --dsn postgresql://metis@db/metis
    """
    from .. import db, migrate
    from ..config import Settings

    settings = Settings.from_env()
    resolved = db.resolve_dsn(dsn, settings)
    migrate.upgrade(resolved, settings=settings)
    renderer(ctx).out.print(f"database at revision {migrate.current_revision(resolved, settings=settings)} (head)")


@db_app.command("current")
def db_current(ctx: typer.Context, dsn: DsnOption = None) -> None:
    """Print the database's migration revision and the newest one.

    Example: metis db current
    """
    from .. import db, migrate
    from ..config import Settings

    settings = Settings.from_env()
    resolved = db.resolve_dsn(dsn, settings)
    renderer(ctx).out.print(f"current {migrate.current_revision(resolved, settings=settings)} · head {migrate.head_revision()}")


@db_app.command("stop")
def db_stop(
    ctx: typer.Context,
    force: Annotated[bool, typer.Option("--force", help="Stop it even while metis processes use it "
                                                        "(they lose their connections).")] = False,
) -> None:
    """Stop the embedded PostgreSQL (in $METIS_HOME/pgdata) if it is running.

    It stops by itself METIS_SERVER_IDLE_S seconds (default 60) after the last metis
    process using it exits or was killed; with METIS_SERVER_IDLE_S=0, one whose users were
    killed (SIGKILL) keeps running until this. The next metis command starts it again.

    Example: metis db stop
    """
    from .. import db
    from ..config import Settings

    settings = Settings.from_env()
    pgdata = settings.pgdata
    pid = db.stop_embedded(pgdata, force=force)
    if pid is None:
        elsewhere = " (METIS_DATABASE_URL is set: metis uses that server, and never stops it)" \
            if settings.database_url else ""
        renderer(ctx).line(f"the embedded PostgreSQL in {pgdata} is not running{elsewhere}")
    else:
        renderer(ctx).line(f"stopped the embedded PostgreSQL in {pgdata} (pid {pid})")


@replica_app.command("create")
def replica_create(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="A new folder for the standby's data.")],
    slot: Annotated[Optional[str], typer.Option("--slot", help="Replication slot name (default: from PATH).")] = None,
    dsn: DsnOption = None,
) -> None:
    """Make a streaming standby of the database in PATH (pg_basebackup -R, a replication slot) and start it.

    Prints its URL: add it to METIS_READ_DATABASE_URLS. Example: metis db replica create /var/tmp/standby1
    """
    from .. import db, replicas
    from ..config import Settings

    url = replicas.create_standby(db.resolve_dsn(dsn, Settings.from_env()), path, slot=slot)
    renderer(ctx).out.print(url)


@replica_app.command("start")
def replica_start(ctx: typer.Context, path: Annotated[Path, typer.Argument(help="The standby's folder.")]) -> None:
    """Start the standby in PATH again; print its URL. Example: metis db replica start /var/tmp/standby1"""
    from .. import replicas

    renderer(ctx).out.print(replicas.start_standby(path))


@replica_app.command("stop")
def replica_stop(ctx: typer.Context, path: Annotated[Path, typer.Argument(help="The standby's folder.")]) -> None:
    """Stop the standby in PATH. Example: metis db replica stop /var/tmp/standby1"""
    from .. import replicas

    replicas.stop_standby(path)
    renderer(ctx).out.print(f"stopped the standby in {path}")


def check_port(host: str, port: int) -> None:
    """Bind `host`:`port` once, as uvicorn will (SO_REUSEADDR), so a busy port is one line, not a traceback.

    Raises:
        PortInUse: another process listens there.
        ConfigError: the address cannot be bound at all (unknown host, a port below 1024 without rights).
    """
    import errno
    import socket

    from ..errors import ConfigError, PortInUse

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError, OverflowError) as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {getattr(exc, 'strerror', None) or exc}") from None
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(f"port {port} on {host} is in use by another process: stop it, or choose another "
                                f"port with --port") from None
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


@eos_app.command("serve")
def eos_serve(
    host: Annotated[str, typer.Option(help="Address to bind; beyond loopback METIS_EOS_TOKENS is required.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8081,
) -> None:
    """Serve the bundled embedding model over HTTP (/v1/embeddings, /embed, /v1/rerank, /rerank).

    Its rerank endpoints re-score by embedding cosine: not a cross-encoder.

    Example: metis eos serve --port 8081
    """
    from ..eos_server import serve

    check_port(host, port)
    serve(host=host, port=port)


@app.command("serve")
def serve_http(
    host: Annotated[str, typer.Option(help="Address to bind; beyond loopback METIS_API_TOKENS is required.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8080,
    watch: Annotated[bool, typer.Option(
        "--watch", help="Also follow every base's folder sources and index what changes (as `metis watch`).")] = False,
    dsn: DsnOption = None,
) -> None:
    """Serve the HTTP API (search, compare, bases, indexing jobs, notes, facts) with uvicorn.

    Bearer tokens come from METIS_API_TOKENS (comma-separated); with none, only a
    loopback address may be bound. Indexing reads only under METIS_SOURCE_ROOTS
    (colon-separated folders). OpenAPI at /openapi.json, docs at /docs.

    Example: METIS_API_TOKENS=$(openssl rand -hex 24) metis serve --host 0.0.0.0 --port 8080
    """
    from ..service import serve

    check_port(host, port)
    serve(dsn=dsn, host=host, port=port, watch=watch)


@app.command("mcp")
def mcp_command(as_group: AsOption = None, dsn: DsnOption = None) -> None:
    """Serve the Model Context Protocol over stdin/stdout, for coding agents (tools search, get, list_bases, status).

    An agent starts it itself: add it to the agent's MCP configuration (README, "For coding agents").

    Example: metis mcp --dsn postgresql://metis@db/metis --as eng
    """
    from ..mcp_server import serve_stdio

    serve_stdio(dsn, principals=principals_option(as_group))
