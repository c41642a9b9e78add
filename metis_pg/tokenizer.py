"""The one tokenizer of BM25 (SPEC F6): the same terms at index time and at query time.

:func:`terms` turns a chunk into its BM25 terms (in text order, repeated: a
term's frequency is its count); :func:`query_terms` turns a question into its
distinct terms by the same rules; :func:`fold` is the normalisation both apply
first (the snippet code uses it too). No stemming, no stop words.
``docs/tokenizing.md`` has the table of examples; ``tests/test_tokenizer.py``
pins each one.

Folding (:func:`fold`), in this order:

1. NFKC: full-width and compatibility forms become plain ones
   (``ＰＯ－２２３１`` → ``PO-2231``, ``ﬁ`` → ``fi``, ``²`` → ``2``, no-break space → space).
2. Case folding (``str.casefold``): ``ß`` and ``ẞ`` → ``ss`` (``Straße`` = ``strasse``),
   ``ς`` → ``σ``, ``İ`` → ``i``.
3. Accents dropped: NFD, remove the combining diacritics (U+0300–036F and the
   other "Combining … Marks" blocks), Hebrew points, Arabic harakat with
   hamza and madda (U+064B–065F, U+0670) and tatweel, then NFC
   (``Configuração`` → ``configuracao``; Cyrillic ``ё`` → ``е`` and ``й`` →
   ``и``; Arabic ``أ إ آ`` → ``ا``). Other marks are part of their word (Indic
   vowel signs, Thai vowels; Japanese dakuten: ``が`` stays ``が``).
4. Letters Unicode does not see as letter + accent: ``ø ł đ ħ ı ŧ`` →
   ``o l d h i t``, ``æ œ`` → ``ae oe``.
5. Soft hyphen, zero-width joiner and non-joiner, word joiner and BOM are
   removed (they join what they stand in).
6. Apostrophes (:data:`APOSTROPHES`: ``’ ‘ ʼ ʻ ‛ ՚``, and full-width ``＇`` by step 1)
   become the ASCII ``'`` (after NFKC, which keeps them and makes some: ``ŉ`` → ``'n``).

Terms (:func:`terms`) of the folded text. A *run* is a maximal run of letters
and digits (``str.isalnum``, plus combining marks; ``_`` is not a letter). A
run splits into *atoms* where letters meet digits (``po2231`` → ``po`` ``2231``).
A *group* is runs joined by single *connectors* ``- . _ / : '`` (and U+2010
hyphen) with no space: ``db.max_pool_size``, ``2.14.1``; a run alone is a
group too. Each group gives, in this order:

==  ==============================================================  ===============================
R1  each atom, except a single letter (a single digit is kept)      ``PO2231`` → ``po`` ``2231``
R3  letters followed by digits across a connector, or across one    ``Xid 79`` → … ``xid79``
    space when the letters are two or more: the two joined
R2  a run mixing letters and digits, whole                          ``H100`` → ``100`` ``h100``
R5  in a group cut by ``. / :``, each piece of 2+ runs, joined      ``db.max_pool_size`` → … ``maxpoolsize``
R6  digit atoms linked by connectors (also after letters), joined   ``v2.14.1`` → … ``2141``
R4  a group of 2+ runs: all its runs joined                         ``nvidia-smi`` → … ``nvidiasmi``
==  ==============================================================  ===============================

All R1 atoms come first; then the joined forms, each once per group (R3 and
R2 run by run). Joined forms longer than :data:`MAX_JOIN_CHARS` (32) are left
out (a URL or path gives its words, not one compound; R2 goes to 64), and so
are atoms and runs longer than :data:`MAX_TERM_CHARS` (64: blobs; a sha-256
in hex still fits). Compounds are made for every group, prose too:
``e-mail`` → ``mail`` ``email``, ``state-of-the-art`` → … ``stateoftheart``.

Apostrophes are connectors: a contraction or elision gives its pieces (a single
letter dropped, as always) and the pieces joined: ``won't`` and ``won’t`` → ``won``
``wont``; ``l'été`` → ``ete`` ``lete``; ``dell'arte`` → ``dell`` ``arte`` ``dellarte``.
So ``won't`` finds ``won’t`` by both its terms, while an unrelated "won" only by one,
and a lone ``t`` or ``l`` is never a term. A final ``'s`` (English possessive, or *is*)
joins nothing: ``lyapunov's`` → ``lyapunov``, ``it's`` → ``it`` (a joined ``lyapunovs``
would only tie a chunk to the other possessives).

So the ways of writing a letters-and-number identifier give the same terms,
and each finds the others with every term matching: ``PO-2231``,
``po 2231``, ``PO2231``, ``po_2231``, ``ＰＯ－２２３１`` all give ``po 2231
po2231``; ``Xid 79``, ``xid79``, ``XID-79`` all give ``xid 79 xid79``. A
question that writes less than the document also matches all its terms:
``max pool size``, ``max_pool_size`` and ``maxpoolsize`` in
``db.max_pool_size``; ``nvidia smi`` and ``nvidiasmi`` in ``nvidia-smi``;
``2.14.1`` in ``v2.14.1``; ``Python 3.11`` in ``python3.11``.

Han, Hiragana, Katakana and Hangul (CJK) runs give overlapping character
bigrams (``東京都`` → ``東京`` ``京都``); a run of one character gives that
character. A CJK run ends any other run: ``Python入門`` → ``python`` ``入門``.
Thai, Lao, Khmer, … get no bigrams: a run, as written between spaces, is a word.

Known limits, kept so the index stays small and predictable:

- Spaces are not bridged between letters: ``nvidiasmi`` does not find a
  document that writes ``nvidia smi``, and ``nvidia-smi`` finds it by two
  of its three terms (``nvidiasmi`` is missing).
- A one-character CJK question (``門``) finds only where that character
  stands alone (the index holds bigrams).
- Commas do not join digits: ``1,000`` → ``1`` ``000``.
- Terms follow the Unicode tables of the running Python (14.0 in 3.11):
  re-index after an upgrade that changes them.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable
from itertools import chain

__all__ = ["terms", "query_terms", "fold", "MAX_TERM_CHARS", "MAX_JOIN_CHARS", "CONNECTORS", "APOSTROPHES",
           "TOKENIZER_VERSION"]

#: Bumped whenever the terms of some text change; a base records the version its postings were
#: made with (``BaseSpec.tokenizer_version``), and ``metis index`` re-tokenizes an older base.
#: 1: before apostrophes joined (``won't`` gave ``won``); 2: apostrophes are connectors. (The
#: heading path's weight, ``BaseSpec.field_weight``, is the base's own: 1 gives version 2's terms.)
TOKENIZER_VERSION = 2

#: Atoms and runs longer than this (characters) are not terms.
MAX_TERM_CHARS = 64
#: Joined forms (R2 aside: rules R3–R6) longer than this (characters) are not terms.
MAX_JOIN_CHARS = 32
#: Characters that join runs into one group when nothing else stands between them
#: (the apostrophe: ``won't`` -> ``won`` ``wont``, ``l'été`` -> ``ete`` ``lete``).
CONNECTORS = "-._/:\u2010'"
#: Written as the ASCII apostrophe by :func:`fold`: the right and left single quotation marks
#: (U+2019, U+2018), the modifier letters apostrophe and turned comma (U+02BC, U+02BB: Hawaiian
#: ʻokina), the single high-reversed-9 quotation mark (U+201B), the Armenian apostrophe
#: (U+055A); the full-width apostrophe (U+FF07) becomes ``'`` with the other full-width forms.
APOSTROPHES = "\u2019\u2018\u02bc\u02bb\u201b\u055a"
_APOSTROPHE = re.compile(f"[{APOSTROPHES}]")
_TO_ASCII_APOSTROPHE = str.maketrans(dict.fromkeys(APOSTROPHES, "'"))

# --- folding -----------------------------------------------------------------

# Removed after NFD: the generic combining-diacritic blocks, Hebrew points, Arabic
# harakat and superscript alef, tatweel (U+0640, a letter by category), and the
# invisible soft hyphen, zero-width non-joiner and joiner, word joiner, BOM.
_DROPPED = re.compile(
    "[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
    "\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7"
    "\u0640\u064b-\u065f\u0670"
    "\u00ad\u200c\u200d\u2060\ufeff]"
)
# Letters with a stroke or ligatures, which Unicode does not decompose.
_STROKED = re.compile("[øłđħıŧæœ]")
_UNSTROKED = {"ø": "o", "ł": "l", "đ": "d", "ħ": "h", "ı": "i", "ŧ": "t", "æ": "ae", "œ": "oe"}
# Full-width ASCII and the ideographic space (CJK punctuation), and below Thai and
# Lao sara am, are replaced before NFKC by what NFKC makes of them: NFKC is slow on
# a text it has to change, instant on one it leaves alone.
_FULL_WIDTH = re.compile("[\uff01-\uff5e\u3000]")


def _half_width(match: re.Match[str]) -> str:
    char = match[0]
    return " " if char == "\u3000" else chr(ord(char) - 0xFEE0)


@functools.cache
def _accented() -> re.Pattern[str]:
    """Return a regex of the characters whose NFD holds a mark that fold drops.

    They are all in U+00C0-2FFF and the Hebrew presentation forms (the tests
    check every code point); built once, in about 3 ms.
    """
    normalize = unicodedata.normalize
    points = [
        cp
        for cp in chain(range(0xC0, 0x3000), range(0xFB1D, 0xFB50))
        if unicodedata.decomposition(chr(cp)) and _DROPPED.search(normalize("NFD", chr(cp)))
    ]
    return re.compile(f"[{_ranges(points)}]")


def fold(text: str) -> str:
    """Return `text` in NFKC, case-folded, without accents (rules in the module docstring).

    Not length-preserving (``ß`` → ``ss``, ``ﬁ`` → ``fi``, soft hyphens removed):
    work on offsets of the folded text. ``fold(fold(x)) == fold(x)``.
    """
    if text.isascii():
        return text.lower()
    if _FULL_WIDTH.search(text):
        text = _FULL_WIDTH.sub(_half_width, text)
    if "\u0e33" in text or "\u0eb3" in text:  # Thai and Lao sara am, as NFKC splits them
        text = text.replace("\u0e33", "\u0e4d\u0e32").replace("\u0eb3", "\u0ecd\u0eb2")
    text = unicodedata.normalize("NFKC", text).casefold()
    if _APOSTROPHE.search(text):  # after NFKC, which makes some (U+0149 ŉ -> ʼn)
        text = text.translate(_TO_ASCII_APOSTROPHE)
    if _accented().search(text):
        text = unicodedata.normalize("NFC", _DROPPED.sub("", unicodedata.normalize("NFD", text)))
    elif _DROPPED.search(text):
        text = unicodedata.normalize("NFC", _DROPPED.sub("", text))
    if _STROKED.search(text):  # after the accents: ǣ -> æ -> ae
        text = _STROKED.sub(lambda match: _UNSTROKED[match[0]], text)
    return text


# --- tokens ------------------------------------------------------------------

# Han (with 々 〆 〇 and the compatibility ideographs), Hiragana, Katakana (without
# the punctuation ゠ and ・), Hangul jamo and syllables; then their supplements
# above U+FFFF (kana, Han extensions B-G and compatibility).
_CJK_BMP = (
    "\u1100-\u11ff\u3005-\u3007\u3021-\u3029\u3031-\u3035\u303b\u303c"
    "\u3041-\u309f\u30a1-\u30fa\u30fc-\u30ff\u3131-\u318e\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7a3\ud7b0-\ud7ff\uf900-\ufaff"
)
_CJK_ASTRAL = "\U0001b000-\U0001b16f\U00020000-\U0002fa1f\U00030000-\U0003134f"
_CJK = _CJK_BMP + _CJK_ASTRAL


@functools.cache
def _cjk_matchers() -> tuple[Callable[[str], object], Callable[[str], object], Callable[[str], object]]:
    """Return (is CJK: match, has CJK in the BMP: search, has CJK above it: search).

    Compiled at first use, by a text that is not ASCII: a class of BMP ranges takes re ~10 ms to
    compile, paid otherwise by every process importing the tokenizer (``metis search``'s start-up,
    issue 25).
    """
    return (re.compile(f"[{_CJK}]").match, re.compile(f"[{_CJK_BMP}]").search,
            re.compile(f"[{_CJK_ASTRAL}]").search)



def _ranges(points: list[int]) -> str:
    """Return a regex class body (``a-z`` ranges) of sorted code points."""
    body, start, prev = [], points[0], points[0]
    for cp in chain(points[1:], [-1]):
        if cp != prev + 1:
            first, last = re.escape(chr(start)), re.escape(chr(prev))
            body.append(first if start == prev else f"{first}-{last}")
            start = cp
        prev = cp
    return "".join(body)


@functools.cache
def _mark_classes() -> tuple[str, str]:
    """Return regex class bodies of the combining marks (Mn Mc Me): in the BMP, and above it.

    Kept apart because a class reaching above U+FFFF is matched range by range
    (slow): it is used only for a text that holds such characters. Built once
    (~25 ms), skipping blocks without marks (CJK, Hangul, surrogates, private use).
    """
    category = unicodedata.category
    spans = (range(0x300, 0x3400), range(0xA000, 0xAC00), range(0xF900, 0x20000), range(0xE0100, 0xE01F0))
    points = [cp for cp in chain(*spans) if category(chr(cp))[0] == "M"]
    return _ranges([cp for cp in points if cp <= 0xFFFF]), _ranges([cp for cp in points if cp > 0xFFFF])


@functools.cache
def _token_pattern(cjk: bool, marks: str) -> re.Pattern[str]:
    """Return a token regex for folded text that is not ASCII.

    A token is a CJK run (when `cjk`); or a group: runs of letters and digits
    (not ``_``, not CJK; with the combining marks `marks` names: "", "bmp" or
    "all") joined by single connectors; or such a group starting with a digit,
    with the one space before it when a letter precedes that space (rule R3).
    """
    bmp, astral = _mark_classes()
    mark_class = {"": "", "bmp": bmp, "all": bmp + astral}[marks]
    not_cjk = _CJK if cjk else ""
    run = rf"[^\W_{not_cjk}]+"
    if mark_class:
        run = rf"(?:{run}|[{mark_class}]+)+"
    group = rf"{run}(?:[{re.escape(CONNECTORS)}]{run})*"
    tokens = rf"{group}|(?<=[^\W\d_{not_cjk}]) (?=\d){group}"
    return re.compile(rf"[{_CJK}]+|{tokens}" if cjk else tokens)


@functools.cache
def _mark_searchers() -> tuple[Callable[[str], object], Callable[[str], object]]:
    bmp, astral = _mark_classes()
    return re.compile(f"[{bmp}]").search, re.compile(f"[{astral}]").search


# Any character from U+0300 on; written as the complement of U+0000-02FF, which re compiles at once
# (the class [\u0300-\U0010ffff] took ~15 ms at every import).
_FROM_U0300 = re.compile("[^\u0000-\u02ff]").search
_ASTRAL = re.compile("[\U00010000-\U0010ffff]+").findall


def _pattern_for(folded: str) -> tuple[re.Pattern[str], bool]:
    """Return the cheapest token regex that reads `folded` right, and whether it has CJK.

    A class reaching above U+FFFF is matched range by range (slow), so such
    classes only look at the characters above U+FFFF, and each regex is used
    only for a text that needs it. Marks start at U+0300, CJK at U+1100.
    """
    if folded.isascii():
        return _ASCII_TOKEN, False
    if not _FROM_U0300(folded):
        return _token_pattern(False, ""), False
    astral = "".join(_ASTRAL(folded))  # emoji, rare scripts: usually none
    _, has_cjk_bmp, has_cjk_astral = _cjk_matchers()
    cjk = bool(has_cjk_bmp(folded) or (astral and has_cjk_astral(astral)))
    bmp_mark, astral_mark = _mark_searchers()
    if astral and astral_mark(astral):
        marks = "all"
    else:
        marks = "bmp" if bmp_mark(folded) else ""
    return _token_pattern(cjk, marks), cjk


# The same for folded ASCII text (no CJK, no marks, no U+2010): faster.
_ASCII_GROUP = r"[a-z0-9]+(?:[-._/:'][a-z0-9]+)*"
_ASCII_TOKEN = re.compile(rf"{_ASCII_GROUP}|(?<=[a-z]) (?=[0-9]){_ASCII_GROUP}")
_SPLIT_CONNECTORS = re.compile(f"([{re.escape(CONNECTORS)}])")
_ATOM = re.compile(r"\d+|\D+")
_DIGIT_OR_CONNECTOR = re.compile(rf"[\d{re.escape(CONNECTORS)}]").search
_PIECE_CUTS = frozenset("./:")


def terms(text: str) -> list[str]:
    """Return the BM25 terms of `text`, in order, with repetitions (term frequency = count).

    Rules R1-R6 and the CJK bigrams of the module docstring, applied to
    :func:`fold` (`text`). Text without terms (punctuation, emoji, single
    letters, ``""``) gives ``[]``.
    """
    folded = fold(text)
    pattern, cjk = _pattern_for(folded)
    tokens = pattern.findall(folded)
    out: list[str] = []
    append = out.append
    letters = ""  # the previous group's last atom when it is 2+ letters (R3)
    is_cjk = _cjk_matchers()[0] if cjk else None
    for token in tokens:
        if is_cjk is not None and is_cjk(token):  # overlapping bigrams
            size = len(token)
            if size <= 2:
                append(token)
            elif size == 3:
                append(token[:2])
                append(token[1:])
            else:
                out.extend([token[i : i + 2] for i in range(size - 1)])
            letters = ""
        elif token.isalpha():  # most tokens: one plain word
            size = len(token)
            if 1 < size <= MAX_TERM_CHARS:
                append(token)
            letters = token if size > 1 else ""
        else:
            if token[0] == " ":  # after letters and one space (R3)
                token, before = token[1:], letters
            else:
                before = ""
            if token.isdecimal():  # a plain number
                if len(token) <= MAX_TERM_CHARS:
                    append(token)
                if before and len(before) + len(token) <= MAX_JOIN_CHARS:
                    append(before + token)
                letters = ""
            elif not _DIGIT_OR_CONNECTOR(token):  # one word, with combining marks
                size = len(token)
                if 1 < size <= MAX_TERM_CHARS:
                    append(token)
                letters = token if size > 1 else ""
            else:
                letters = _group_terms(token, before, out)
    return out


def query_terms(text: str) -> list[str]:
    """Return the distinct terms of a question, in order of first occurrence.

    Same rules as :func:`terms` (BM25 counts a question's term once).
    """
    return list(dict.fromkeys(terms(text)))


def _group_terms(group: str, before: str, out: list[str]) -> str:
    """Append the terms of one group (rules R1-R6) to `out`; return its last atom if 2+ letters.

    `before` is the previous group's last atom (2+ letters) when one space
    separates it from this group (R3), else ``""``. Atoms go out first, then
    the joined forms, each once: per run R3 then R2, then R5, R6, R4.
    """
    append = out.append
    parts = _SPLIT_CONNECTORS.split(group)  # run, connector, run, connector, run, ...
    if len(parts) > 2 and parts[-1] == "s" and parts[-2] == "'":  # English 's: no joined form
        parts = parts[:-2]
    runs = parts[0::2]
    joined: list[str] = []
    letters = before  # the letters atom right before the next run (R3)
    run_atoms: list[list[str]] = []
    digit_atoms = 0
    for run in runs:
        atoms = [run] if run.isalpha() or run.isdecimal() else _ATOM.findall(run)
        run_atoms.append(atoms)
        for atom in atoms:  # R1
            if atom.isdecimal():
                digit_atoms += 1
                if len(atom) <= MAX_TERM_CHARS:
                    append(atom)
            elif 1 < len(atom) <= MAX_TERM_CHARS:
                append(atom)
        if letters and atoms[0].isdecimal() and len(letters) + len(atoms[0]) <= MAX_JOIN_CHARS:
            joined.append(letters + atoms[0])  # R3
        if len(atoms) > 1 and len(run) <= MAX_TERM_CHARS:
            joined.append(run)  # R2
        letters = "" if atoms[-1].isdecimal() else atoms[-1]
    if len(runs) > 1:
        connectors = parts[1::2]
        if len(connectors) > 1 and _PIECE_CUTS.intersection(connectors):  # R5
            piece = [runs[0]]
            for connector, run in zip(connectors, runs[1:]):
                if connector in _PIECE_CUTS:
                    if len(piece) > 1:
                        joined.append("".join(piece))
                    piece = [run]
                else:
                    piece.append(run)
            if len(piece) > 1:
                joined.append("".join(piece))
        if digit_atoms > 1:  # R6: digit atoms linked by connectors
            digits: list[str] = []
            for atoms in run_atoms:
                if digits and atoms[0].isdecimal():
                    digits.append(atoms[0])
                    if len(atoms) == 1:
                        continue
                if len(digits) > 1:
                    joined.append("".join(digits))
                digits = [atoms[-1]] if atoms[-1].isdecimal() else []
            if len(digits) > 1:
                joined.append("".join(digits))
        joined.append("".join(runs))  # R4
    for term in dict.fromkeys(joined):
        if len(term) <= MAX_JOIN_CHARS or term in runs:  # R2 may reach MAX_TERM_CHARS
            append(term)
    return letters if len(letters) > 1 else ""
