"""Who may read what (issue 21, part 2): principals, readers, and reads on their behalf under row-level security.

A document has **readers**: the groups given to its source (``metis index DIR --readers hr,legal``),
narrowed by its own ``readers:`` metadata where the operator allows it for the source
(``--front-matter-readers``). No readers = readable by every caller. PostgreSQL keeps them
(``documents.readers``, given by a trigger when a document is written) and enforces them with
row-level security (``sql/access/policies.v1.sql``, migration 0020).

A read on behalf of **principals** (the caller's groups) runs in a transaction that starts with
``SET LOCAL ROLE metis_search`` (a role that is neither a superuser nor BYPASSRLS, so the policies
apply even on the embedded server, which connects as a superuser) and ``SET LOCAL
metis.principals = '{eng,hr}'``; both end with the transaction, so a pooled connection never
keeps them. ``principals=None`` is the trusted operator: no role switch, every document.
``principals=[]`` (a token without groups) reads only documents without readers.

Where principals come from: Python ``principals=[...]``; HTTP, MCP over HTTP and the console from
the bearer token (``METIS_API_TOKENS`` entries ``token=group+group``, :func:`parse_token_groups`);
the CLI's ``--as GROUP``. docs/security.md says what still crosses groups.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from .errors import ConfigError, DatabaseUnsupported, InvalidInput

__all__ = ["GROUP_PATTERN", "SEARCH_ROLE", "Principals", "check_groups", "principals_literal", "OnBehalf",
           "on_behalf", "parse_token_groups"]

#: A group name: lower case letters, digits, ``_ . -``, 1-63 characters, starting with a letter or digit.
GROUP_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
#: The role every read on behalf of principals runs as (migration 0020).
SEARCH_ROLE = "metis_search"

#: The caller's groups; None = the trusted operator (no row-level security).
Principals = Sequence[str] | None


def check_groups(groups: Iterable[str] | str | None, *, what: str = "group") -> tuple[str, ...]:
    """Return `groups` (a list, or one comma-separated text) lower-cased, sorted, each once.

    Raises:
        InvalidInput: a name that is not 1-63 of ``a-z 0-9 _ . -`` starting with a letter or digit.
    """
    if groups is None:
        return ()
    items = groups.split(",") if isinstance(groups, str) else list(groups)
    found: set[str] = set()
    for item in items:
        if not isinstance(item, str):
            raise InvalidInput(f"a {what} must be a name, not {item!r}")
        name = item.strip().lower()
        if not name:
            continue
        if not GROUP_PATTERN.match(name):
            raise InvalidInput(f"{what} {item!r} is not a group name: 1-63 of a-z 0-9 _ . - starting with a "
                               "letter or digit")
        found.add(name)
    return tuple(sorted(found))


def principals_literal(principals: Sequence[str]) -> str:
    """The value of ``metis.principals``: a PostgreSQL text[] literal (``{eng,hr}``; ``{}`` for no group).

    Raises:
        InvalidInput: a malformed group name (:func:`check_groups`): nothing is ever quoted.
    """
    if isinstance(principals, str):
        raise InvalidInput("principals must be a list of group names, not one text")
    return "{" + ",".join(check_groups(principals, what="principal")) + "}"


def begin_on_behalf(conn: psycopg.Connection, principals: Sequence[str]) -> None:
    """Make the rest of `conn`'s current transaction read on behalf of `principals` (SET LOCAL ROLE
    metis_search and ``metis.principals``); both end with the transaction.

    Raises:
        DatabaseUnsupported: the documents are not under row-level security (a Citus cluster, where
            the policies cannot exist): never answered unfiltered.
    """
    literal = principals_literal(principals)
    # One round trip: set_config('role', ..., true) is SET LOCAL ROLE; and whether the documents are
    # under row-level security at all (not on Citus: sql/citus/distribute.sql drops the policies).
    enforced = conn.execute("SELECT set_config('role', %s, true), set_config('metis.principals', %s, true),"
                            " (SELECT c.relrowsecurity FROM pg_catalog.pg_class AS c"
                            "  WHERE c.oid = to_regclass('documents'))",
                            (SEARCH_ROLE, literal)).fetchone()[2]
    if not enforced:
        raise DatabaseUnsupported(
            "reads on behalf of principals (groups: --as, a token's groups) need the documents under row-level"
            " security, and this database has none: on Citus the policies cannot exist (Citus refuses subqueries"
            " in policies on distributed tables), so readers are not enforced there; read as the operator (no"
            " principals) or on one node (docs/scaling.md)")


class OnBehalf:
    """A pool whose every ``connection()`` block reads on behalf of `principals` (see the module).

    Everything else (``max_size``, ``settings``, ...) is the wrapped pool's. The block is one
    transaction, as with the pool; a block that commits in its middle would drop the role with it,
    so reads on behalf of principals never do.
    """

    def __init__(self, pool: Any, principals: Sequence[str]) -> None:
        self._pool = pool
        self.principals = check_groups(principals, what="principal")

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection]:
        """Lend a connection whose transaction runs as metis_search for the principals."""
        with self._pool.connection(timeout) as conn:
            begin_on_behalf(conn, self.principals)
            yield conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


def on_behalf(pool: Any, principals: Principals) -> Any:
    """Return `pool` itself for the operator (None), else an :class:`OnBehalf` of it."""
    if principals is None:
        return pool
    if isinstance(principals, str):
        raise InvalidInput("principals must be a list of group names, not one text")
    return OnBehalf(pool, principals)


def parse_token_groups(entries: Iterable[str], *, min_chars: int = 1) -> dict[str, tuple[str, ...]]:
    """Map each bearer token of ``METIS_API_TOKENS`` entries to its groups.

    An entry is ``TOKEN`` (no group: it reads only documents without readers) or
    ``TOKEN=group+group`` (``hr+legal``). The token never holds ``=``.

    Raises:
        ConfigError: a token shorter than `min_chars`, a token given twice, or a malformed group name.
    """
    groups: dict[str, tuple[str, ...]] = {}
    for entry in entries:
        token, _, names = entry.partition("=")
        token = token.strip()
        if len(token) < min_chars:
            raise ConfigError(f"a token of METIS_API_TOKENS has {len(token)} characters before its groups; use at "
                              f"least {min_chars}")
        if token in groups:
            raise ConfigError("a token of METIS_API_TOKENS is given twice: give each token its groups once")
        try:
            groups[token] = check_groups(names.replace("+", ","), what="group of a token")
        except InvalidInput as exc:
            raise ConfigError(f"METIS_API_TOKENS: {exc.message}") from None
    return groups
