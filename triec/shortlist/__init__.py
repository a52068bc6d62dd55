"""Shortlists: constrain a choice among thousands of values to a retriever's best few, with a cascade for misses.

``from triec import shortlist`` (a subpackage, imported on use)::

    table = triec.compile(values + [shortlist.ESCAPE], vocab)       # once
    ranked = shortlist.BM25(values, descriptions).rank(query)      # per request
    cascade = shortlist.Cascade(table, ranked, k=20)               # views at k, 2k, all
    result = shortlist.run(cascade, decode)                        # decode(view, listed) -> answer

See docs/python.md ("Shortlists") and issue 52.
"""

from __future__ import annotations

from triec.shortlist.cascade import ESCAPE, Cascade, CascadeResult, compacted, full_view, run
from triec.shortlist.retrievers import BM25, Embedding, ScoreFunction, model_encoder, words

__all__ = [
    "BM25",
    "ESCAPE",
    "Cascade",
    "CascadeResult",
    "Embedding",
    "ScoreFunction",
    "compacted",
    "full_view",
    "model_encoder",
    "run",
    "words",
]
