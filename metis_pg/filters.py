"""The filters of a search (SPEC F10, issue 21): checked once, then bound inside both legs.

:class:`Filters` is what ``filters=`` of :meth:`Metis.search <metis_pg.api.Metis.search>`, the
HTTP ``filters`` object, the MCP arguments and the CLI options become
(:meth:`Filters.from_mapping` checks them); :meth:`Filters.to_params` gives the parameters of
``sql/search/hybrid.sql`` that apply them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any

from psycopg.types.json import Jsonb

from .errors import InvalidInput

__all__ = ["FILTER_KEYS", "Filters"]

#: The keys of a filters mapping (``filters=`` of a search, HTTP ``filters``, MCP arguments).
FILTER_KEYS = ("path_prefix", "exclude_prefixes", "kinds", "sources", "tags_any", "tags_all", "exclude_tags",
               "authors", "categories", "since", "until", "meta")


@dataclass(frozen=True, slots=True)
class Filters:
    """Filters applied inside both legs before anything is ranked (SPEC F10, issue 21).

    Every filter given must hold (AND); None = no filter. Tags are compared lower case (as the
    readers store them, :mod:`metis_pg.readers.metadata`); authors and categories exactly.

    Attributes:
        path_prefix: keep documents whose path (relative to their source) starts with it.
        exclude_prefixes: drop documents whose path starts with any of these.
        kinds: keep documents of these kinds (``md``, ``txt``, ``html``, ``pdf``, ``docx``).
        sources: keep documents of these sources (a base's notes: ``metis-<base>``).
        tags_any: keep documents with at least one of these tags.
        tags_all: keep documents with every one of these tags.
        exclude_tags: drop documents with any of these tags.
        authors: keep documents by one of these authors.
        categories: keep documents of one of these categories.
        since, until: keep documents dated in ``[since, until]``: their own date, else their file's
            modification time (undated documents are dropped). ISO 8601 dates or date-times; a date
            ``until`` includes its whole day; no offset means UTC.
        meta: keep documents whose other metadata (jsonb ``meta``) has every ``key: value`` given
            (JSON containment: ``{"status": "final"}``; a key whose value is a list matches when the
            list holds the value; a value given as a string also matches the same number or boolean
            written in the front matter: ``version=3`` matches ``version: 3``).
    """

    path_prefix: str | None = None
    kinds: tuple[str, ...] | None = None
    sources: tuple[str, ...] | None = None
    exclude_prefixes: tuple[str, ...] | None = None
    tags_any: tuple[str, ...] | None = None
    tags_all: tuple[str, ...] | None = None
    exclude_tags: tuple[str, ...] | None = None
    authors: tuple[str, ...] | None = None
    categories: tuple[str, ...] | None = None
    since: datetime | None = None
    until: datetime | None = None  # exclusive bound (a date's next midnight); see from_mapping
    meta: tuple[tuple[str, Any], ...] | None = None

    @classmethod
    def from_mapping(cls, data: dict[str, Any] | None) -> "Filters":
        """Build filters from a mapping of :data:`FILTER_KEYS` (a string stands for a list of one).

        Raises:
            InvalidInput: an unknown key, an unknown kind, a date that is not ISO 8601, ``since``
                after ``until``, or a value of the wrong type.
        """
        if not data:
            return cls()
        unknown = set(data) - set(FILTER_KEYS)
        if unknown:
            raise InvalidInput(f"unknown filter {sorted(unknown)[0]!r}: use {', '.join(FILTER_KEYS)}")
        prefix = data.get("path_prefix")
        if prefix is not None and not isinstance(prefix, str):
            raise InvalidInput("filters.path_prefix must be a string")
        kinds = _string_tuple(data.get("kinds"), "kinds")
        if kinds is not None:
            from .readers import KINDS  # at first use: the readers are no part of a search without --kind

            names = frozenset(KINDS.values())
            bad = [k for k in kinds if k not in names]
            if bad:
                raise InvalidInput(f"unknown kind {bad[0]!r}: use {', '.join(sorted(names))}")
        since = _when(data.get("since"), "since", end_of_day=False)
        until = _when(data.get("until"), "until", end_of_day=True)
        if since is not None and until is not None and since >= until:
            raise InvalidInput(f"filters.since ({data['since']}) is after filters.until ({data['until']})")
        return cls(
            path_prefix=prefix or None, kinds=kinds, sources=_string_tuple(data.get("sources"), "sources"),
            exclude_prefixes=_string_tuple(data.get("exclude_prefixes"), "exclude_prefixes"),
            tags_any=_tags(data.get("tags_any"), "tags_any"), tags_all=_tags(data.get("tags_all"), "tags_all"),
            exclude_tags=_tags(data.get("exclude_tags"), "exclude_tags"),
            authors=_string_tuple(data.get("authors"), "authors"),
            categories=_string_tuple(data.get("categories"), "categories"),
            since=since, until=until, meta=_meta(data.get("meta")),
        )

    @property
    def unfiltered(self) -> bool:
        """True when no filter is set (the legs then skip the allowed_documents semi-join)."""
        return all(getattr(self, name) is None for name in self.__slots__)

    def describe(self) -> str:
        """The filters set, in words (for warnings): ``"tags any of hr; since 2024-01-01"``."""
        parts = []
        for name in self.__slots__:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, datetime):
                shown = value.isoformat()
            elif name == "meta":
                shown = ", ".join(f"{k}={json.dumps(v)}" for k, v in value)
            elif isinstance(value, tuple):
                shown = ", ".join(value)
            else:
                shown = repr(value)
            parts.append(f"{name.replace('_', ' ')} {shown}")
        return "; ".join(parts)

    def to_params(self) -> dict[str, Any]:
        """The parameters of ``allowed_documents`` (sql/search/hybrid.sql, filtered_documents.sql)."""
        def listed(value: tuple[str, ...] | None) -> list[str] | None:
            return list(value) if value else None

        return {
            "path_prefix": self.path_prefix,
            "kinds": listed(self.kinds),
            "sources": listed(self.sources),
            "exclude_prefixes": listed(self.exclude_prefixes),
            "tags_any": listed(self.tags_any),
            "tags_all": listed(self.tags_all),
            "exclude_tags": listed(self.exclude_tags),
            "authors": listed(self.authors),
            "categories": listed(self.categories),
            "since": self.since,
            "until": self.until,
            # Alternatives: {"k": "3"} also matches a front matter's k: 3 (numbers, booleans).
            "meta": Jsonb([_meta_alternatives(k, v) for k, v in self.meta]) if self.meta else None,
            "unfiltered": self.unfiltered,
        }


def _meta_alternatives(key: str, value: Any) -> list[dict[str, Any]]:
    """The jsonb values a ``key=value`` filter accepts: the value, and for a string the number or
    boolean it spells (``"3"`` -> 3, ``"true"`` -> true)."""
    options = [{key: value}, {key: [value]}]  # a list in the front matter holding the value matches too
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, (int, float, bool)) and not isinstance(parsed, str):
            options += [{key: parsed}, {key: [parsed]}]
    return options


def _string_tuple(value: Any, name: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise InvalidInput(f"filters.{name} must be a list of strings")
    return tuple(value) or None


def _tags(value: Any, name: str) -> tuple[str, ...] | None:
    tags = _string_tuple(value, name)
    if tags is None:
        return None
    return tuple(t.strip().lower() for t in tags if t.strip()) or None


def _when(value: Any, name: str, *, end_of_day: bool) -> datetime | None:
    """An ISO date or date-time as an aware datetime; a date ``until`` becomes the next midnight (exclusive)."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, date):
        day = datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
        return day + timedelta(days=1) if end_of_day else day
    if not isinstance(value, str):
        raise InvalidInput(f"filters.{name} must be an ISO 8601 date or date-time string")
    text = value.strip()
    try:
        if len(text) == 10:
            return _when(date.fromisoformat(text), name, end_of_day=end_of_day)
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(f"filters.{name} {value!r} is not an ISO 8601 date (2024-01-31) or date-time"
                           " (2024-01-31T12:00:00Z)") from None
    parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    return parsed + timedelta(microseconds=1) if end_of_day else parsed  # until a date-time: inclusive


def _meta(value: Any) -> tuple[tuple[str, Any], ...] | None:
    """``{"key": value}`` or ``["key=value", ...]`` as sorted pairs; None when empty."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)):
        pairs = {}
        for item in value:
            if not isinstance(item, str) or "=" not in item or not item.split("=", 1)[0].strip():
                raise InvalidInput(f"filters.meta entry {item!r} must be key=value")
            key, _, text = item.partition("=")
            pairs[key.strip().lower()] = text.strip()
        value = pairs
    if not isinstance(value, dict) or not all(isinstance(k, str) and k.strip() for k in value):
        raise InvalidInput("filters.meta must map keys to values ({\"status\": \"final\"}) or list key=value")
    for k, v in value.items():
        if isinstance(v, (dict, list)) or (isinstance(v, float) and v != v):
            raise InvalidInput(f"filters.meta[{k!r}] must be a string, number, boolean or null")
    return tuple(sorted((k.strip().lower(), v) for k, v in value.items())) or None
