"""Phrases and exclusions in a question (issue 20): ``"reset the router" -legacy``.

- A **quoted phrase** (straight ``"…"``, curly ``“…”`` or guillemets ``«…»``) keeps only the
  chunks that hold it: its words in that order, separated by anything but a letter or a digit,
  on word boundaries, in the folded text (:func:`metis_pg.tokenizer.fold`: NFKC, case-folded,
  accents removed), so ``"Reset the router"`` matches ``reset the Router,`` and not
  ``reset the routers``. Several phrases: a chunk must hold each. The phrase's words stay in the
  question: they are embedded and searched by BM25 like the others.
- A word written ``-word`` (a minus at the start of a word, then a letter) drops every chunk
  holding it (its BM25 term; for a word of several terms, such as ``-foo_bar``, the longest,
  its joined form). It is removed from what is embedded and searched.

Both apply inside the statement, in both legs, before anything is ranked, like the filters
(``sql/search/hybrid.sql``: ``only_chunks``, ``exclude_terms``). A question of exclusions only
is refused: nothing would be left to look for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InvalidInput
from .tokenizer import fold, query_terms

__all__ = ["ParsedQuestion", "parse", "phrase_pattern"]

_PHRASE = re.compile(r"[\"“”«»„](.+?)[\"“”«»]")
_EXCLUDED = re.compile(r"(?<!\S)-([^\W\d_][^\s\"“”«»„]*)")


@dataclass(frozen=True, slots=True)
class ParsedQuestion:
    """A question with its operators taken out.

    Attributes:
        text: what is embedded and tokenized: the question without its exclusions (the quote
            marks kept, the phrase's words searched like the others).
        phrases: the quoted phrases, as written.
        excluded: the BM25 terms whose chunks are dropped.
        excluded_words: the excluded words, as written (for messages).
    """

    text: str
    phrases: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    excluded_words: tuple[str, ...] = ()

    @property
    def has_operators(self) -> bool:
        return bool(self.phrases or self.excluded)


def parse(question: str) -> ParsedQuestion:
    """Return `question` with its quoted phrases and ``-word`` exclusions found.

    Raises:
        InvalidInput: the question holds only exclusions (``-legacy``), or a phrase without
            a word (``""``).
    """
    phrases = tuple(p.strip() for p in _PHRASE.findall(question))
    for p in phrases:
        if not query_terms(p):
            raise InvalidInput(f"the quoted phrase {p!r} holds no word to look for")
    # A minus inside a phrase is the phrase's, not an exclusion.
    words = _EXCLUDED.findall(_PHRASE.sub(" ", question))
    excluded: list[str] = []
    for word in words:
        terms = query_terms(word)
        if terms:
            excluded.append(max(terms, key=len))
    text = " ".join(_exclusions_removed(question).split())
    if words and not query_terms(text) and not phrases:
        raise InvalidInput(
            f"the question only excludes words ({', '.join('-' + w for w in words)}): say what to look for too, "
            f"e.g. 'router reset -{words[0]}'")
    return ParsedQuestion(text=text or question, phrases=phrases, excluded=tuple(dict.fromkeys(excluded)),
                          excluded_words=tuple(words))


def _exclusions_removed(question: str) -> str:
    """The question without its exclusions, its phrases left as they are."""
    out, last = [], 0
    for m in _PHRASE.finditer(question):
        out.append(_EXCLUDED.sub(" ", question[last:m.start()]))
        out.append(m.group(0))
        last = m.end()
    out.append(_EXCLUDED.sub(" ", question[last:]))
    return "".join(out)


def phrase_pattern(phrase: str) -> re.Pattern[str]:
    """Return the regular expression matching `phrase` in folded text (word boundaries, any
    run of non-word characters between its words)."""
    words = re.findall(r"\w+", fold(phrase))
    return re.compile(r"(?<!\w)" + r"\W+".join(map(re.escape, words)) + r"(?!\w)")
