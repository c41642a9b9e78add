"""The converters of the shared evaluation sets (benchmarks/shared_sets.py), on the sets themselves."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import shared_sets  # noqa: E402


def test_every_shared_converter_reads_its_folder(shared_data):
    counts = {name: len(shared_sets.convert(shared_data / name).queries) for name in shared_sets.CONVERTERS}
    assert counts == {"gno-fastapi-multilingual": 13, "gno-cjk-lexical": 25, "gno-evals-multilingual": 37,
                      "qmd-eval-docs": 25}
