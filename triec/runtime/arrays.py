"""The arrays of a compiled set, as every behaviour of the runtime reads them.

A compiled set is six arrays (little-endian; the artifact sections of the same names):

* ``allowed_offsets`` [S + 1], ``allowed_tokens`` [P], ``allowed_next`` [P]: the content tokens allowed in
  state s are ``allowed_tokens[allowed_offsets[s]:allowed_offsets[s + 1]]`` (ascending) and ``allowed_next``
  holds the state each one leads to. EOS is not stored there; it is allowed exactly at accepting states.
* ``value_state`` [K]: the state where value i ends (strictly increasing).
* ``value_lcp`` [K] and ``state_byte`` [S]: enough to rebuild every value and every state's prefix (value i is
  value i-1's first ``value_lcp[i]`` bytes followed by the bytes of states ``value_state[i-1]+1 .. value_state[i]``).

States are trie nodes in preorder; state 0 is the empty prefix. Every index in them lies in range
(:func:`~triec.runtime.validate.check_indices`, at every load); tokens ascend per state, never EOS, and lead
forward (:func:`~triec.runtime.validate.validate_contents`). The writer, the matchers, the restricted views,
the device upload and the checks read a table through :class:`TableArrays` (and :class:`~triec.runtime.kinds.SetTable`),
never through the table class, so each reads alone and :class:`~triec.runtime.table.MaskTable` composes them
from above. numpy only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from triec._arrays import concat_ranges

if TYPE_CHECKING:
    from triec.runtime.tails import TailLayout
    from triec.runtime.token_classes import TokenClasses


class TableArrays(Protocol):
    """The six arrays of a compiled set and what sizes its rows (the module docstring says what each holds)."""

    @property
    def allowed_offsets(self) -> np.ndarray: ...

    @property
    def allowed_tokens(self) -> np.ndarray: ...

    @property
    def allowed_next(self) -> np.ndarray: ...

    @property
    def value_state(self) -> np.ndarray: ...

    @property
    def value_lcp(self) -> np.ndarray: ...

    @property
    def state_byte(self) -> np.ndarray: ...

    @property
    def vocab_size(self) -> int:
        """The mask width: token ids run from 0 to ``vocab_size - 1``."""
        ...

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        """Allowed exactly at accepting states (the states of ``value_state``)."""
        ...

    @property
    def num_states(self) -> int: ...

    @property
    def num_allowed(self) -> int: ...

    @property
    def num_values(self) -> int: ...

    @property
    def words_per_row(self) -> int: ...

    @property
    def tails(self) -> TailLayout | None:
        """The tail layout's rows (:mod:`triec.runtime.tails`), or ``None`` where the three CSR arrays hold every
        state's row. Where set, ``allowed_offsets``/``allowed_tokens``/``allowed_next`` are the present layout's
        arrays expanded on first use (O(every pair)): a behaviour that serves tails reads ``tails`` instead."""
        ...

    @property
    def classes(self) -> TokenClasses | None:
        """A pattern table's rows by token class (:mod:`triec.runtime.token_classes`), or ``None``. Where set,
        the three CSR arrays are expanded from it on first use (O(every pair)): a behaviour that serves
        patterns of any size reads ``classes`` instead."""
        ...


def content(t: TableArrays, state: int) -> tuple[np.ndarray, np.ndarray]:
    """(content tokens ascending, the state each leads to) of one state known to be in range."""
    if t.tails is not None:
        return t.tails.content(state)
    if t.classes is not None:
        return t.classes.content(state)
    lo, hi = int(t.allowed_offsets[state]), int(t.allowed_offsets[state + 1])
    return t.allowed_tokens[lo:hi], t.allowed_next[lo:hi]


def contents(t: TableArrays, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row index, content token) int64 pairs of a batch of states known to be in range, row by row."""
    if t.tails is not None:
        row, tokens, _ = t.tails.content_pairs(states)
        return row, tokens
    if t.classes is not None:
        row, tokens, _ = t.classes.content_pairs(states)
        return row, tokens
    lo = t.allowed_offsets[states].astype(np.int64)
    counts = t.allowed_offsets[states + 1].astype(np.int64) - lo
    row = np.repeat(np.arange(states.shape[0], dtype=np.int64), counts)
    return row, t.allowed_tokens[concat_ranges(lo, counts)].astype(np.int64)


def content_pairs(t: TableArrays, states: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row index, content token, next state) int64 of a batch of states known to be in range, row by row."""
    tails = t.tails
    if tails is not None:
        return tails.content_pairs(states)
    if t.classes is not None:
        return t.classes.content_pairs(states)
    lo = t.allowed_offsets[states].astype(np.int64)
    counts = t.allowed_offsets[states + 1].astype(np.int64) - lo
    pos = concat_ranges(lo, counts)
    row = np.repeat(np.arange(states.shape[0], dtype=np.int64), counts)
    return row, t.allowed_tokens[pos].astype(np.int64), t.allowed_next[pos].astype(np.int64)


def rebuild_values(t: TableArrays) -> list[bytes]:
    """Every value's bytes in table order: each is its predecessor's shared prefix plus the bytes of the states
    it created (unchecked: a corrupt artifact's may be out of order or not UTF-8)."""
    raw = t.state_byte.tobytes()
    out: list[bytes] = []
    prev_end = 0
    prev = b""
    for end, lcp in zip(t.value_state.tolist(), t.value_lcp.tolist(), strict=True):
        cur = prev[:lcp] + raw[prev_end + 1 : end + 1]
        out.append(cur)
        prev, prev_end = cur, end
    return out
