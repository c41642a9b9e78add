"""The embedding phase (phase 2) alone, with a fast embedding service: chunks/s of `metis index` (issue 24).

When a base points at a GPU embedding service, the model answers a batch in milliseconds and
what metis does around it (fetching the chunks, finding vectors to reuse, writing vectors)
sets the pace. This benchmark serves an OpenAI-style ``/v1/embeddings`` of hashed vectors
from this process (``--ms-per-passage`` of sleep per passage stands for the model), indexes
FOLDER into a fresh base, and prints the seconds from the first to the last vector written
(``on_embed_progress``) and chunks/s, with ``uptime`` before and after. Run it twice, with the
code to compare first on ``PYTHONPATH``, back to back (the benchmark uses only ``Metis``).

Usage::

    python benchmarks/embed_phase.py FOLDER [--ms-per-passage 2] [--repeats 3] [--dsn postgresql://...]

With no ``--dsn`` an embedded PostgreSQL starts in a temporary folder deleted at the end.
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import json
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

from metis_pg.config import Settings
import metis_pg
from metis_pg import db, migrate

DIM = 384


def vector(text: str) -> list[float]:
    """A deterministic unit-free vector of `text` (its words hashed into DIM buckets)."""
    v = np.zeros(DIM)
    v[0] = 0.5
    for word in text.lower().split():
        v[1 + int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little") % (DIM - 1)] += 1
    return v.tolist()


def serve(ms_per_passage: float) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            time.sleep(ms_per_passage * len(texts) / 1000)
            data = [{"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(texts)]
            raw = json.dumps({"object": "list", "data": data, "model": body.get("model")}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--ms-per-passage", type=float, default=2.0, help="the service's sleep per passage")
    parser.add_argument("--repeats", type=int, default=3, help="fresh bases indexed one after the other")
    parser.add_argument("--dsn", default=None)
    args = parser.parse_args()
    dsn = args.dsn
    if dsn is None:
        home = Path(tempfile.mkdtemp(prefix="metis-embed-phase-"))
        atexit.register(shutil.rmtree, home, ignore_errors=True)
        dsn = db.embedded_dsn(home / "pgdata")
    migrate.upgrade(dsn, settings=Settings.from_env())
    server, url = serve(args.ms_per_passage)
    m = metis_pg.Metis(dsn)
    print(f"metis_pg: {Path(metis_pg.__file__).parent}")
    print(f"uptime before: {uptime()}")
    try:
        for _ in range(args.repeats):
            base = f"bench-{uuid.uuid4().hex[:8]}"
            m.create_base(base, embedding_model="bench-embed", embedding_url=url, embedding_dim=DIM)
            times: list[float] = []
            report = m.index(base, args.folder, on_embed_progress=lambda done, total: times.append(time.perf_counter()))
            m.drop_base(base)
            seconds = times[-1] - times[0] if len(times) > 1 else float("nan")
            print(f"{report.chunks} chunks, {report.chunks_embedded} embedded; phase 2: {seconds:.2f} s"
                  f" ({report.chunks_embedded / seconds:.0f} chunks/s)", flush=True)
    finally:
        m.close()
        server.shutdown()
    print(f"uptime after:  {uptime()}")


if __name__ == "__main__":
    main()
