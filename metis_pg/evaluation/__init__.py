"""Evaluation (SPEC F16): evaluation sets (:mod:`.sets`), the metrics (:mod:`.metrics`), and the runner (:mod:`.runner`).

An evaluation set is questions with graded judgments of relevant documents
(or of passages: a line or a page of a document). Two layouts are read:

- a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv`` with or
  without a header row): :func:`load_beir`. Its corpus is written as one Markdown
  file per entry (``<id>.md``: ``# title`` then the text) into a cache folder so it
  can be indexed like any other folder;
- our JSON format (``docs/evaluation.md``): :func:`load_eval_set`.

Metrics, on the ranked list of *units* a search returned (a unit is a document
for document-level judgments, a judged passage for located ones; a unit counts
once, at its first rank):

- nDCG@10: linear gain (the grade), discount log2(rank + 1), ideal DCG from the
  judged grades, as trec_eval's ``ndcg_cut`` (``m_ndcg_cut.c``; Järvelin &
  Kekäläinen 2002);
- Recall@k: relevant units (grade > 0) in the first k over all relevant units
  (trec_eval ``recall``);
- MRR@10: 1 / rank of the first relevant unit within the first 10, else 0;
- zero-result rate: share of questions the mode answered with no result;
- latency: p50 / p95 of the search's own ``took.total`` (ms), linear
  interpolation between order statistics (numpy's default).

Only questions with at least one relevant judgment (grade > 0) are scored;
the others are counted in ``skipped``.
"""

from .metrics import *  # noqa: F403
from .metrics import __all__ as _metrics
from .runner import *  # noqa: F403
from .runner import __all__ as _runner
from .sets import *  # noqa: F403
from .sets import __all__ as _sets

__all__ = [*_sets, *_metrics, *_runner]
