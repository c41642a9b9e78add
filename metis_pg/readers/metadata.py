"""A document's metadata (tags, author, category, date, language, other keys), as each reader finds it.

Every reader gives a :class:`Metadata`: Markdown from its YAML front matter, HTML from its
``<meta>`` elements and ``<html lang>``, PDF from its document information dictionary, DOCX
from its core properties; the indexer adds the file's modification time. :func:`from_mapping`
turns a key → value mapping (front matter, or what a reader collected) into one, the same way
for every kind:

- ``tags``: from ``tags``, ``tag`` or ``keywords``: a list, or a string split at commas and
  semicolons; each stripped and lower-cased (a filter's tags are too), duplicates dropped.
- ``author``: ``author`` (the first of a list; the whole list stays in ``extra["authors"]``),
  else ``authors``, ``creator``.
- ``category``: ``category`` (the first of ``categories``).
- ``date``: ``date``, else ``created``, ``published``: an ISO date or date-time (a date is
  midnight UTC, a date-time without an offset is UTC).
- ``language``: ``lang`` or ``language``, lower-cased (``en``, ``de-ch``).
- ``extra``: every other key, with JSON values (dates as ISO strings), stored as jsonb.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def clean_text(text: str) -> str:
    """:func:`metis_pg.readers._common.clean_text`, imported at first use (_common imports this module's users)."""
    from ._common import clean_text as clean

    return clean(text)

__all__ = ["Metadata", "from_mapping", "parse_date", "split_tags"]

_TAG_KEYS = ("tags", "tag", "keywords")
_AUTHOR_KEYS = ("author", "authors", "creator")
_CATEGORY_KEYS = ("category", "categories")
_DATE_KEYS = ("date", "created", "published")
_LANGUAGE_KEYS = ("lang", "language")
_TITLE_KEYS = ("title",)
_SEPARATORS = re.compile(r"[,;]")
#: A string kept in the metadata is cut at this many characters (a 1 MB keywords list is not metadata).
MAX_VALUE_CHARS = 1000


@dataclass(frozen=True, slots=True)
class Metadata:
    """What a document says about itself.

    Attributes:
        tags: lower-case tags, in the order given, no duplicates.
        author: the (first) author, or None.
        category: the category, or None.
        date: when the document was written (timezone-aware), or None.
        language: its language tag, lower case (``en``, ``de-ch``), or None.
        extra: every other key, JSON values (str, int, float, bool, None, lists, objects).
    """

    tags: tuple[str, ...] = ()
    author: str | None = None
    category: str | None = None
    date: dt.datetime | None = None
    language: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        value = next((v for v in value if v not in (None, "")), None)
        if value is None:
            return None
    text = " ".join(clean_text(str(value)).replace("\ufffd", "").split())[:MAX_VALUE_CHARS]
    return text or None


def split_tags(value: Any) -> tuple[str, ...]:
    """Return the tags of ``value``: a list (of strings or numbers) or a string split at ``,`` and ``;``.

    Each tag is stripped, lower-cased and kept once; empty ones are dropped.
    """
    if value is None:
        return ()
    items = value if isinstance(value, (list, tuple, set)) else _SEPARATORS.split(str(value))
    tags: dict[str, None] = {}
    for item in items:
        tag = _text(item)
        if tag:
            tags[tag.lower()] = None
    return tuple(tags)


def parse_date(value: Any) -> dt.datetime | None:
    """Return ``value`` (a datetime, a date, or an ISO 8601 string) as a timezone-aware datetime, else None.

    A date is midnight UTC; a date-time without an offset is taken as UTC. PDF dates
    (``D:20240131120000Z``) come through pypdf as datetimes.
    """
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
    if isinstance(value, dt.date):
        return dt.datetime(value.year, value.month, value.day, tzinfo=dt.timezone.utc)
    if isinstance(value, str):
        text = value.strip()
        try:
            if len(text) == 10:
                return parse_date(dt.date.fromisoformat(text))
            return parse_date(dt.datetime.fromisoformat(text.replace("Z", "+00:00")))
        except ValueError:
            return None
    return None


def _json(value: Any, depth: int = 0) -> Any:
    """Return ``value`` as JSON jsonb accepts: dates as ISO strings, no NUL, no NaN, bounded depth."""
    if depth > 8:
        return None
    if value is None or isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {clean_text(str(k)).replace("\ufffd", ""): _json(v, depth + 1) for k, v in list(value.items())[:200]}
    if isinstance(value, (list, tuple, set)):
        return [_json(v, depth + 1) for v in list(value)[:200]]
    return clean_text(str(value)).replace("\ufffd", "")[:MAX_VALUE_CHARS]


def _first(data: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str | None, Any]:
    for key in keys:
        if data.get(key) not in (None, "", [], ()):
            return key, data[key]
    return None, None


def from_mapping(data: Mapping[str, Any]) -> Metadata:
    """Return the :class:`Metadata` of a key → value mapping (keys compared lower-case; see the module)."""
    lowered: dict[str, Any] = {}
    for key, value in data.items():
        lowered.setdefault(str(key).strip().lower(), value)
    used: set[str] = set(_TITLE_KEYS)
    tags: tuple[str, ...] = ()
    for key in _TAG_KEYS:
        if key in lowered:
            used.add(key)
            tags += tuple(t for t in split_tags(lowered[key]) if t not in tags)
    author_key, author = _first(lowered, _AUTHOR_KEYS)
    category_key, category = _first(lowered, _CATEGORY_KEYS)
    date_key, date = None, None
    for key in _DATE_KEYS:
        parsed = parse_date(lowered.get(key))
        if parsed is not None:
            date_key, date = key, parsed
            break
    language_key, language = _first(lowered, _LANGUAGE_KEYS)
    used.update(k for k in (author_key, category_key, date_key, language_key) if k)
    extra = {key: _json(value) for key, value in lowered.items() if key not in used}
    if isinstance(author, (list, tuple)) and len(author) > 1:
        extra["authors"] = _json(author)
    lang = _text(language)
    return Metadata(tags=tags, author=_text(author), category=_text(category), date=date,
                    language=lang.lower() if lang else None, extra=extra)
