"""The masking path for host logits (numpy arrays): what :mod:`triec.runtime.torch` is for tensors.

Engines that hand a processor one row of scores as a numpy array (llama-cpp-python) mask it here, by the
state's allowed ids (O(allowed) gathers plus one fill of the row) or by a packed bitmask row (the schema and
think-then-answer matchers write one). numpy only.
"""

from __future__ import annotations

import numpy as np

from triec.runtime.bitmask import unpack

NEG_INF = np.float32(-np.inf)


def keep_tokens(scores: np.ndarray, ids: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``scores`` with every column but ``ids`` set to ``-inf``: written into ``out`` (a new array by default).

    ``ids`` must lie inside the row (callers filter ids of a wider table on the host). ``scores`` may be a
    strided view (llama-cpp-python's record array); ``out`` may be ``scores`` itself.
    """
    kept = scores[ids]  # gathered first: out may be scores
    if out is None:
        out = np.empty(scores.shape, dtype=np.float32)
    out.fill(NEG_INF)
    out[ids] = kept
    return out


def apply_bitmask(scores: np.ndarray, bitmask: np.ndarray, *, out: np.ndarray | None = None) -> np.ndarray:
    """``scores`` with every column whose bit is clear in ``bitmask`` (one packed row,
    :mod:`triec.runtime.bitmask`) set to ``-inf``; columns past the mask's width are masked too."""
    width = scores.shape[-1]
    bits = unpack(np.ravel(bitmask), width)
    if out is None:
        out = np.array(scores, dtype=np.float32)
    elif out is not scores:
        out[...] = scores
    blocked = np.ones(width, dtype=bool)
    blocked[: bits.shape[0]] = ~bits
    out[blocked] = NEG_INF
    return out
