"""Helpers every reader shares: errors, text decoding, heading paths, text assembly.

Decoding (md, txt, html): a byte-order mark wins (UTF-8, UTF-16, UTF-32); else
strict UTF-8; else the encoding the file declares (HTML ``<meta charset>``);
else charset-normalizer's guess, where Windows-1252 wins when its reading is
as clean (least chaos) as the best one and uses only Western European letters
and signs, and a tie between equally plausible 8-bit code pages goes to it too
(charset-normalizer ranks cp1250 or HP Roman-8 first on short Portuguese or
French Latin-1 text and would turn "Configuração" into "Configuraçăo" or
"ConfiguraÓÐo"). Newlines are normalised to ``"\\n"`` as Python's ``open()``
does, so line numbers count the same lines as an editor. NUL characters mean
binary content and the file is refused.

Also here: :func:`clean_text` (no NUL or lone surrogate reaches the database),
:func:`display_path` (a file name with undecodable bytes, shown and stored
escaped), and the per-file time budget (:func:`time_budget`,
:func:`check_time_budget`) the readers and the chunker check in their loops.
"""

from __future__ import annotations

import codecs
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path


from ..errors import UnreadableDocument
from .document import Section

# UTF-32 LE before UTF-16 LE: its BOM starts with the UTF-16 LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# What Western European text uses above ASCII in Windows-1252 (the most common legacy code
# page, WHATWG's default for unlabelled text). On short texts charset-normalizer's language
# coherence cannot tell cp1252 from cp1250 or HP Roman-8 (a 3-line Portuguese file became
# "ConfiguraÓÐo"): a cp1252 reading as clean as the best one and made only of these wins.
# Turkish (þ ý ð for ş ı ğ) or Icelandic text keeps the library's choice.
_WESTERN_1252 = frozenset(
    "àáâãäåæçèéêëìíîïñòóôõöøùúûüÿÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÑÒÓÔÕÖØÙÚÛÜßœŒ€«»°ºª§£¥©®–—‘’‚“”„…•·¿¡½¼¾²³±×÷µ\xa0"
)
#: A first line longer than this (characters) is not taken as a title.
MAX_TITLE_CHARS = 100


def unreadable(path: str, reason: str) -> UnreadableDocument:
    """Return the error for a file that cannot be read: ``"<path>: <reason>"`` (path as :func:`display_path`)."""
    return UnreadableDocument(f"{display_path(path)}: {reason}")


# NUL and UTF-16 surrogates (lone or not: a Python str holds a pair as two code points) cannot be
# encoded to UTF-8, and PostgreSQL text refuses NUL.
_BAD_CHARS = re.compile("[\x00\ud800-\udfff]")
# What os.fsdecode makes of an undecodable byte 0xNN of a file name (surrogateescape).
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def clean_text(text: str) -> str:
    """Return ``text`` with each NUL and surrogate code point replaced by U+FFFD.

    One character for one: offsets into the text (``Section.char_start``) stay valid.
    """
    if _BAD_CHARS.search(text) is None:
        return text
    return _BAD_CHARS.sub("\ufffd", text)


def display_path(path: str) -> str:
    """Return a file path (or any message holding one) as text PostgreSQL and a terminal accept.

    Each undecodable byte of a file name (``os.fsdecode`` makes byte 0xNN the
    surrogate U+DCNN) becomes the four characters ``\\xNN``, so
    ``b"caf\\xe9.md"`` is shown and stored as ``caf\\xe9.md``: the same name on
    every run. Other NUL or surrogate characters become U+FFFD (:func:`clean_text`).
    """
    if _BAD_CHARS.search(path) is None:
        return path
    return clean_text(_ESCAPED_BYTE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}", path))


class TimeBudgetExceeded(UnreadableDocument):
    """A file took longer to read and chunk than the per-file time budget (:func:`time_budget`)."""


#: Seconds of budget a file earns per MB it holds (its bytes; a .docx: its XML inflated), beyond the base
#: budget. Measured at load 5-9: 0.01-4 s per MB of pathological text or markup, 0.8 s per MB of .docx XML.
DEFAULT_PER_MB_S = 3.0
#: Seconds of budget a PDF earns per page. pypdf extracts 10-50 ms per page.
DEFAULT_PER_PAGE_S = 0.1


@dataclass(slots=True)
class _Budget:
    """The time budget of the file being read: a deadline that grows with what the file holds."""

    started: float  # time.monotonic()
    seconds: float  # the budget now: the base plus what was granted
    path: str
    per_mb_s: float
    per_page_s: float

    @property
    def deadline(self) -> float:
        return self.started + self.seconds


_BUDGET: ContextVar[_Budget | None] = ContextVar("metis_file_budget", default=None)


@contextmanager
def time_budget(seconds: float | None, path: str, *, per_mb_s: float | None = None,
                per_page_s: float | None = None) -> Iterator[None]:
    """Give the reading and chunking of the file at ``path`` at most ``seconds`` (None: no bound),
    plus `per_mb_s` seconds per MB and `per_page_s` per page the file holds (default
    :data:`DEFAULT_PER_MB_S`, :data:`DEFAULT_PER_PAGE_S`), granted by the readers as they learn it
    (:func:`grant_for`): a big honest file gets the time its size needs, a small bomb does not.

    The bound is cooperative: :func:`check_time_budget`, called in the loops of
    the readers (per line, node, page, paragraph) and of the chunker (per
    paragraph and piece), raises :class:`TimeBudgetExceeded` once the deadline
    has passed. One library call that does not return to those loops (pypdf
    extracting one page's text, BeautifulSoup parsing the whole page, decoding)
    finishes before the check sees the deadline, so a file may overrun by the
    time of its slowest such call.
    """
    budget = None if seconds is None else _Budget(
        time.monotonic(), seconds, path, DEFAULT_PER_MB_S if per_mb_s is None else per_mb_s,
        DEFAULT_PER_PAGE_S if per_page_s is None else per_page_s)
    token = _BUDGET.set(budget)
    try:
        yield
    finally:
        _BUDGET.reset(token)


def grant_for(*, size_bytes: int = 0, pages: int = 0) -> None:
    """Extend the current file's budget for what it holds: `size_bytes` of content, `pages` pages.

    A reader calls it once it knows (read_document: the file's size; docx: its XML inflated;
    pdf: its pages). Nothing happens outside :func:`time_budget`.
    """
    budget = _BUDGET.get()
    if budget is not None:
        budget.seconds += budget.per_mb_s * size_bytes / 1e6 + budget.per_page_s * pages


def budget_left() -> float | None:
    """Seconds left of the current file's time budget (None outside :func:`time_budget`; 0 once spent)."""
    budget = _BUDGET.get()
    return None if budget is None else max(0.0, budget.deadline - time.monotonic())


def check_time_budget() -> None:
    """Raise :class:`TimeBudgetExceeded` if the current file's time budget has run out.

    Raises:
        TimeBudgetExceeded: ``"<path>: took longer than <budget> s to read: skipped"``.
    """
    budget = _BUDGET.get()
    if budget is not None and time.monotonic() > budget.deadline:
        raise TimeBudgetExceeded(f"{display_path(budget.path)}: took longer than {budget.seconds:.3g} s to read: skipped")


def decode_text(data: bytes, path: str, *, declared: str | None = None) -> str:
    """Return ``data`` decoded as text with ``"\\n"`` newlines (rules in the module docstring).

    Args:
        data: the file's bytes.
        path: the file's name, for error messages.
        declared: an encoding the file names for itself (HTML ``<meta charset>``), if any.

    Raises:
        UnreadableDocument: NUL characters (binary content) or no encoding fits.
    """
    text = _decode(data, path, declared)
    if "\x00" in text:
        raise unreadable(path, "binary content (NUL bytes), not text")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _decode(data: bytes, path: str, declared: str | None) -> str:
    for bom, codec in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(codec)
            except UnicodeDecodeError as exc:
                raise unreadable(path, f"not valid {codec} text despite its byte-order mark") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if b"\x00" in data:
        raise unreadable(path, "binary content (NUL bytes), not text")
    if declared:
        try:
            return data.decode(declared)
        except (LookupError, UnicodeDecodeError):
            pass
    from charset_normalizer import from_bytes  # here: a search reads no file (metis search's start-up)

    matches = from_bytes(data)
    best = matches.best()
    if best is None:
        raise unreadable(path, "binary content or unknown encoding (not UTF-8, UTF-16 or a detectable charset)")
    lowest_chaos = min(match.chaos for match in matches)
    for match in matches:
        if match.chaos == lowest_chaos and "cp1252" in match.could_be_from_charset:
            western = str(match)
            if all(ch < "\x80" or ch in _WESTERN_1252 for ch in western):
                return western
    for match in matches:
        if (match.chaos, match.coherence) == (best.chaos, best.coherence) and "cp1252" in match.could_be_from_charset:
            return str(match)
    return str(best)


def collapse(text: str) -> str:
    """Return ``text`` with every run of whitespace made one space, stripped."""
    return " ".join(text.split())


def first_line_title(text: str) -> str | None:
    """Return the first non-blank line of ``text`` if at most MAX_TITLE_CHARS characters, else None."""
    for line in text.splitlines():
        if line.strip():
            line = collapse(line)
            return line if len(line) <= MAX_TITLE_CHARS else None
    return None


def file_title(path: str) -> str:
    """Return the file name without its extension (the title of last resort), as :func:`display_path`."""
    return display_path(Path(path).stem)


class LineCounter:
    """Gives the 1-based line of offsets in ``text``, counting newlines only since the last call."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._offset = 0
        self._line = 1

    def line_at(self, offset: int) -> int:
        """Return 1 + the number of newlines in ``text[:offset]``."""
        if offset < self._offset:
            self._offset, self._line = 0, 1
        self._line += self._text.count("\n", self._offset, offset)
        self._offset = offset
        return self._line


def source_section(
    text: str, start: int, end: int, headings: tuple[str, ...], lines: LineCounter
) -> Section | None:
    """Return the section for ``text[start:end]`` of a source file (md, txt), stripped; None if blank.

    Its line is exact: 1 + the number of newlines before its first character.
    """
    body = text[start:end]
    stripped = body.strip()
    if not stripped:
        return None
    start += len(body) - len(body.lstrip())
    return Section(headings, stripped, None, lines.line_at(start), start)


class HeadingPath:
    """The stack of headings above the current text; a heading pops those at its level or deeper."""

    def __init__(self) -> None:
        self._stack: list[tuple[float, str, object]] = []

    def push(self, level: float, text: str, scope: object = None) -> None:
        """Enter a heading of ``level`` (1 = outermost; 0 for a docx Title; HTML may nest at x.5).

        ``scope``: what the reader knows of where the heading's section ends (HTML: its element).
        """
        self._stack = [entry for entry in self._stack if entry[0] < level]
        self._stack.append((level, text, scope))

    @property
    def path(self) -> tuple[str, ...]:
        """The non-empty heading texts, outermost first."""
        return tuple(t for _, t, _ in self._stack if t)

    @property
    def deepest(self) -> tuple[float, object] | None:
        """The level and scope of the innermost heading, or None."""
        return (self._stack[-1][0], self._stack[-1][2]) if self._stack else None

    def snapshot(self) -> tuple[tuple[float, str, object], ...]:
        """Return the stack as it is now, for :meth:`restore`."""
        return tuple(self._stack)

    def restore(self, snapshot: tuple[tuple[float, str, object], ...]) -> None:
        """Put back the stack a :meth:`snapshot` returned (the headings entered since are closed)."""
        self._stack = list(snapshot)


class TextBuilder:
    """Assembles ``Document.text`` from headings and body blocks joined by blank lines.

    Used by the readers whose text is extracted (html, pdf, docx). Each body
    block becomes a :class:`Section`; a block without a line number joins the
    previous section when nothing but the blank line separates them (same
    headings, same page), so a docx section is one Section, not one per paragraph.
    Linear in the text's size: a section's text is sliced from the whole text once, at the end.
    """

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._size = 0
        # [headings, page, line, start, end, line_map] of each section, end exclusive, in the text.
        self._sections: list[list] = []
        self._built: tuple[int, list[Section]] | None = None

    def _append(self, text: str) -> int:
        if self._parts:
            self._parts.append("\n\n")
            self._size += 2
        start = self._size
        self._parts.append(text)
        self._size += len(text)
        return start

    def heading(self, text: str) -> None:
        """Add a heading's text to the document text (it starts no section by itself)."""
        if text.strip():
            self._append(text.strip())

    def body(
        self, text: str, headings: tuple[str, ...], *, page: int | None = None, line: int | None = None,
        line_map: tuple[int, ...] = (),
    ) -> None:
        """Add a block of body text under ``headings``; whitespace-only blocks are dropped.

        ``line`` is the source line where the block's first non-blank character is;
        ``line_map`` (offsets into ``text`` as given) as :attr:`Section.line_map`.
        """
        check_time_budget()
        lead = len(text) - len(text.lstrip())
        text = text.strip()
        if not text:
            return
        if lead and line_map:
            line_map = tuple(v - lead if i % 2 == 0 else v for i, v in enumerate(line_map))
        last = self._sections[-1] if self._sections else None
        start = self._append(text)
        if last is not None and line is None and (last[0], last[1]) == (headings, page) and last[4] + 2 == start:
            last[4] = start + len(text)
        else:
            self._sections.append([headings, page, line, start, start + len(text), line_map])

    @property
    def sections(self) -> list[Section]:
        """The sections so far, in document order."""
        if self._built is None or self._built[0] != self._size:
            text = self.text
            self._built = (self._size, [Section(h, text[s:e], p, ln, s, lm) for h, p, ln, s, e, lm in self._sections])
        return self._built[1]

    @property
    def text(self) -> str:
        """The document text assembled so far."""
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""
