"""Memories (SPEC F11): facts that still hold come before replaced ones.

A memory base holds facts; a newer fact may replace an older one (same key, or
named explicitly), and the old one stays findable. After reranking, a search
puts the results that hold first, then the replaced ones, each group in its
ranked order. Results that are not facts (``holds is None``: notes, documents
of another base searched at the same time) are not replaced by anything: they
stay in the first group.

This module is a pure function of the ranked list: it runs no query and
changes no score.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

__all__ = ["order_facts"]


class _HasHolds(Protocol):
    @property
    def holds(self) -> bool | None: ...


T = TypeVar("T", bound=_HasHolds)


def order_facts(ranked: Sequence[T]) -> list[T]:
    """Return `ranked` with replaced facts (``holds is False``) moved after all the others.

    A stable partition: results that hold (or are not facts) keep their ranked
    order, then the replaced facts follow in their ranked order. Nothing is
    dropped and nothing is re-scored.

    Example::

        >>> from types import SimpleNamespace as R
        >>> [r.name for r in order_facts([R(name="old", holds=False), R(name="new", holds=True)])]
        ['new', 'old']
    """
    holding = [r for r in ranked if r.holds is not False]
    replaced = [r for r in ranked if r.holds is False]
    return holding + replaced
