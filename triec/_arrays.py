"""Array idioms every layer shares: the CSR gather, and a bitmask row read back as token ids."""

from __future__ import annotations

import numpy as np


def concat_ranges(lo: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``concatenate([arange(lo[i], lo[i] + counts[i]) for i])`` without a Python loop.

    Gathering the rows of many states from CSR arrays is this index followed by
    one fancy index, whatever the number of states.
    """
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(counts)
    return np.repeat(lo - (ends - counts), counts) + np.arange(total, dtype=np.int64)


def row_ids(row: np.ndarray) -> np.ndarray:
    """The token ids whose bits are set in one int32 mask row (ascending)."""
    bits = np.unpackbits(np.ascontiguousarray(row).view(np.uint8), bitorder="little")
    return np.flatnonzero(bits).astype(np.int64)
