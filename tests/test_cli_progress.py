"""``metis index`` progress on a real terminal (a pty) 80 columns wide (issue 25, item 2).

Rich's own columns fit the line to the terminal; the time left shows from the first step on (not
``-:--:--``); the embedding bar says chunks/s; "created base" comes before the bars.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
import time

from cli_runner import METIS_SCRIPT
from corpus import write_corpus

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def on_a_terminal(command: list[str], env: dict[str, str], columns: int = 80) -> str:
    """Run `command` with stdin/stdout/stderr on a pty `columns` wide; return what it drew, escapes removed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen(command, stdin=follower, stdout=follower, stderr=follower, env=env, close_fds=True)
    os.close(follower)
    screen = b""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closes with the process
            break
        if not chunk:
            break
        screen += chunk
    proc.wait(timeout=60)
    os.close(leader)
    assert proc.returncode == 0, screen.decode(errors="replace")
    return ANSI.sub("", screen.decode(errors="replace"))


def test_bars_fit_80_columns_show_time_left_and_come_after_created_base(dsn, metis, base_name, tmp_path):
    folder = write_corpus(tmp_path / "kb", {f"note{i:02d}.txt": f"Note {i} about the lighthouse keeper number {i}."
                                            for i in range(24)})
    env = {**os.environ, "COLUMNS": "80", "METIS_EMBED_BATCH_CHUNKS": "4", "TERM": "xterm"}
    screen = on_a_terminal([str(METIS_SCRIPT), "index", str(folder), "--base", base_name, "--dsn", dsn], env)
    lines = [line for part in screen.split("\n") for line in part.split("\r") if line.strip()]
    created = next(i for i, line in enumerate(lines) if f"created base {base_name!r}" in line)
    bars = [i for i, line in enumerate(lines) if line.startswith(("indexing ", "embedding "))]
    assert bars and created < bars[0], lines
    too_long = [lines[i] for i in bars if len(lines[i]) > 80]
    assert not too_long, too_long
    embedding = [line for line in lines if line.startswith("embedding ")]
    assert embedding, lines
    assert any(re.search(r" \d+/24 chunks · [\d.]+ chunks/s +\d:\d\d:\d\d left \d:\d\d:\d\d$", line)
               for line in embedding), embedding
    assert lines[-1].startswith(f"{base_name}: 24 read (24 new"), lines[-1]
    assert metis.base(base_name).chunks_without_vector == 0


def test_the_embedding_bar_advances_per_chunk_not_per_batch(metis, base_name, tmp_path, monkeypatch):
    """The bundled model's workers say each passage as they embed it: the bar's counts are not only
    multiples of the batch (the issue saw 0/N for 40 s, then steps of 64)."""
    monkeypatch.setenv("METIS_EMBED_BATCH_CHUNKS", "8")
    folder = write_corpus(tmp_path / "kb", {f"n{i:02d}.txt": f"Lighthouse note {i} of the harbour." for i in range(16)})
    seen: list[tuple[int, int]] = []
    report = metis.index(base_name, folder, on_embed_progress=lambda done, total: seen.append((done, total)))
    assert report.chunks_embedded == 16
    counts = [done for done, _ in seen]
    assert counts == sorted(counts) and counts[0] == 0 and counts[-1] == 16
    assert any(done % 8 for done in counts), counts


def test_piped_stderr_gets_plain_progress_lines_instead_of_silence(dsn, metis, base_name, tmp_path):
    """Not on a terminal (a CI log, `2> file`): the bars are off, and plain lines say what is done.

    Before, a piped `metis demo` printed nothing on stderr for the whole embedding phase (17 minutes
    at load 11 for the demo's 489 chunks).
    """
    folder = write_corpus(tmp_path / "kb", {f"note{i:02d}.txt": f"Note {i} about the lighthouse keeper number {i}."
                                            for i in range(6)})
    env = {**os.environ, "METIS_EMBED_BATCH_CHUNKS": "2"}
    done = subprocess.run([str(METIS_SCRIPT), "index", str(folder), "--base", base_name, "--dsn", dsn],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "indexing 6/6 documents · 6 chunks" in lines, lines
    embedding = [line for line in lines if line.startswith("embedding ")]
    assert re.fullmatch(r"embedding 0/6 chunks · [\d.]+ chunks/s", embedding[0]), embedding
    assert re.fullmatch(r"embedding 6/6 chunks · [\d.]+ chunks/s", embedding[-1]), embedding
    assert not any("\x1b" in line or "\r" in line for line in lines), lines  # no bar drawn into the log
    quiet = subprocess.run([str(METIS_SCRIPT), "index", str(folder), "--base", base_name, "--dsn", dsn, "--json"],
                           env=env, capture_output=True, text=True, timeout=600)
    assert quiet.returncode == 0 and not [ln for ln in quiet.stderr.splitlines() if ln.startswith(("indexing", "embedding"))]
