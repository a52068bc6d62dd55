"""Which states of a table a check looks at: each state's byte depth, and the seeded sample of large tables.

One definition for ``inspect``, ``verify`` and the schema verifier (issue 34).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from triec.runtime.arrays import TableArrays


def state_depths(table: TableArrays) -> np.ndarray:
    """Byte depth (prefix length) of every state, from ``value_state`` and ``value_lcp`` alone."""
    vs = table.value_state.astype(np.int64)
    prev = np.concatenate(([0], vs[:-1]))  # value i creates states prev[i] + 1 .. vs[i]
    owner = np.repeat(np.arange(vs.shape[0]), vs - prev)
    depth = np.zeros(table.num_states, dtype=np.int64)
    depth[1:] = table.value_lcp.astype(np.int64)[owner] + (np.arange(1, table.num_states) - prev[owner])
    return depth


def select_states(table: TableArrays, limit: int, seed: int) -> tuple[np.ndarray, bool]:
    """All states when there are at most ``limit``; else a seeded sample of ``limit``.

    The sample always holds the start and every state of byte depth <= 2 (where rows are widest).
    Returns (sorted states, sampled).
    """
    n = table.num_states
    if n <= limit:
        return np.arange(n, dtype=np.int64), False
    must = np.flatnonzero(state_depths(table) <= 2)
    rest = np.setdiff1d(np.arange(n, dtype=np.int64), must)
    take = max(0, min(limit - must.size, rest.size))
    chosen = np.random.default_rng(seed).choice(rest, size=take, replace=False) if take else np.zeros(0, np.int64)
    return np.union1d(must, chosen).astype(np.int64), True


__all__ = ["select_states", "state_depths"]
