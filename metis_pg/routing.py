"""Query routing: a question's features, found without any model, shift the dense leg's share.

Issue 20; the hybrid-search overview's "query routing": identifiers and quoted phrases call for
words, questions in plain language for meaning. A base with ``routing`` on fuses each question
with its dense share (the rrf weights' ``dense_weight / (dense_weight + keyword_weight)``, or
convex's alpha) plus the shift of every feature that fired, clipped to [0, 1]:

============== ============================================================ ==========
feature        fires when                                                   computed
============== ============================================================ ==========
identifier     a word is identifier-like (:func:`identifier_words`)          here
phrase         the question holds a quoted phrase                           here
long           the question has :data:`LONG_WORDS` words or more            here
question_word  it starts with a question word (how, what, why, wie, ...)    here
absent         a share of its words that no chunk of the bases holds        statement
weak_bm25      its best BM25 is below :data:`WEAK_RATIO` of the bound       statement
============== ============================================================ ==========

``absent`` adds its shift times that share; the others add theirs whole. The two last need the
base and the keyword leg: ``sql/search/hybrid.sql`` computes them (``route`` CTE) and returns
them, so the answer can name them (``answer.fusion.route``). The shifts are
:data:`SHIFTS`, chosen by leave-one-set-out cross-validation over the shared sets
(``benchmarks/quality.py``, ``docs/quality.md``), never on the figures reported.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = ["SHIFTS", "LONG_WORDS", "WEAK_RATIO", "QUESTION_WORDS", "identifier_words", "has_quoted_phrase",
           "QuestionFeatures", "features"]

#: Shift of the dense share per feature (``absent``: per unit of the share of absent words).
#: Chosen by cross-validation (benchmarks/quality.py --cv); see docs/quality.md.
SHIFTS: dict[str, float] = {
    "identifier": 0.0,
    "phrase": 0.0,
    "long": -0.1,
    "question_word": 0.0,
    "absent": 0.0,
    "weak_bm25": 0.0,
}
#: Words from which a question is ``long``.
LONG_WORDS = 8
#: ``weak_bm25``: the best BM25 of the question below this share of its bound
#: (the sum over its terms of idf * (k1 + 1)).
WEAK_RATIO = 0.35

#: Leading words that make a question (English, German, French, Spanish).
QUESTION_WORDS = frozenset(
    "how what why when where which who whom whose is are can could does do did should would will "
    "wie was warum wann wo welche welcher welches wer kann "
    "comment quoi pourquoi quand où quel quelle qui est "
    "cómo como qué que por cuándo dónde cuál quién".split()
)

_QUOTED = re.compile(r"[\"“”«»„].+?[\"“”«»]")
_JOINED = re.compile(r"[^\W_][_./:\\#@]+[^\W_]|[^\W_]_|_[^\W_]|::")
_CAMEL = re.compile(r"[a-z][A-Z]")
_CAPS = re.compile(r"^[A-Z]{5,}$")
_OUTER = "\"'“”‘’«»„()[]{}<>,;!?¿¡。、，？！"


def identifier_words(question: str) -> list[str]:
    """Return the identifier-like words of `question` (split on spaces, outer punctuation stripped).

    A word is identifier-like when it mixes ASCII letters and digits (``PO-2231``, ``E4021``),
    joins letters or digits by ``_ . / : \\ # @`` (``db.max_pool_size``, ``std::vector``; a
    hyphen alone does not count), is camelCase (``getUserById``) or five capitals or more
    (``ECONNREFUSED``). Plain and hyphenated words, short acronyms and numbers alone are not.
    """
    out = []
    for word in unicodedata.normalize("NFKC", question).split():
        word = word.strip(_OUTER).rstrip(".:")
        if not word:
            continue
        mixed = any(ch.isalpha() for ch in word) and any(ch.isdigit() for ch in word) and word.isascii()
        if mixed or _JOINED.search(word) or _CAMEL.search(word) or _CAPS.match(word):
            out.append(word)
    return out


def has_quoted_phrase(question: str) -> bool:
    """Whether `question` holds text between double quotes (straight, curly or guillemets)."""
    return bool(_QUOTED.search(unicodedata.normalize("NFKC", question)))


@dataclass(frozen=True, slots=True)
class QuestionFeatures:
    """The features of a question computed without the base (the statement adds the others)."""

    identifier: bool
    phrase: bool
    long: bool
    question_word: bool

    def fired(self) -> list[str]:
        """Names of the features that fired, in the order of :data:`SHIFTS`."""
        return [name for name in ("identifier", "phrase", "long", "question_word") if getattr(self, name)]

    def shift(self, shifts: dict[str, float] = SHIFTS) -> float:
        """Sum of the shifts of the features that fired (the statement adds absent and weak_bm25)."""
        return sum(shifts[name] for name in self.fired())


def features(question: str) -> QuestionFeatures:
    """Return the model-free features of `question` (see the module's table)."""
    words = [w.strip(_OUTER).casefold() for w in question.split()]
    words = [w for w in words if w]
    return QuestionFeatures(
        identifier=bool(identifier_words(question)),
        phrase=has_quoted_phrase(question),
        long=len(words) >= LONG_WORDS,
        question_word=bool(words) and words[0] in QUESTION_WORDS,
    )
