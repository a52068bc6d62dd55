"""Bitmask rows in O(allowed): a writer that owns its buffer and clears only what it set.

``MaskTable.fill_bitmask`` zeroes whole rows: 19 KB of memory traffic per row at
a 151,936-token vocabulary, whatever the state allows. A decode loop fills the
same buffer every step, so the writer remembers which words it set last time,
zeroes only those, and assigns the new state's precomputed (word, bits) pairs
(:mod:`triec.runtime.word_masks`). The cost of a fill is the words set now plus the
words set before, never the row width.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from triec.runtime.arrays import TableArrays, contents
from triec.runtime.bitmask import as_int32, bit_of, flat_word, or_few
from triec.runtime.states import state_array, terminal_note
from triec.runtime.word_masks import EMPTY_WORDS, single_words, state_words

# A state with at most this many words is written by a Python loop over a
# memoryview of the buffer (about 40 ns a word); larger ones by one numpy
# fancy assignment (about 1 us plus a few ns a word).
_SMALL = 12


def row_words(
    offsets: np.ndarray, words: np.ndarray, rows: np.ndarray, row_base: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(flat word index, pair position) of every (word, bits) pair of ``rows`` (CSR ``offsets``/``words``), row i's
    words at ``row_base[i]`` onwards: the CSR expansion, for rows of any width (:func:`batch_words` sends the rows
    of one word elsewhere)."""
    lo = offsets[rows]
    counts = offsets[rows + 1] - lo
    n = rows.shape[0]
    ends = np.cumsum(counts)
    total = int(ends[-1]) if n else 0
    pos = np.repeat(lo - ends + counts, counts) + np.arange(total, dtype=np.int64)
    return words[pos] + np.repeat(row_base, counts), pos


def batch_words(
    single: np.ndarray, offsets: np.ndarray, words: np.ndarray, bits: np.ndarray, rows: np.ndarray, row_base: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(flat word index, int32 bits) of every word of ``rows``, row i's words at ``row_base[i]`` onwards. Rows of
    one word (a beam search's leaves: EOS alone, a single child) come from ``single``
    (:func:`~triec.runtime.word_masks.pack_single` of the same CSR), one gather for both; the others from
    :func:`row_words`. The same (index, bits) pairs as ``row_words`` with ``bits[pos]``, in another order where
    the two kinds mix (each flat index once, so the order does not matter to an assignment)."""
    packed = single[rows]
    if packed.min(initial=0) >= 0:  # every row one word (the common case at the leaves): no mask, no copies
        bits_now = packed.astype(np.int32)  # astype keeps the low 32 bits: the word's bits
        np.right_shift(packed, 32, out=packed)
        packed += row_base
        return packed, bits_now
    one = packed >= 0
    n_one = int(np.count_nonzero(one))
    if n_one == 0:
        flat, pos = row_words(offsets, words, rows, row_base)
        return flat, bits[pos]
    p1 = packed[one]
    several = ~one
    flat, pos = row_words(offsets, words, rows[several], row_base[several])
    return (
        np.concatenate([(p1 >> 32) + row_base[one], flat]),
        np.concatenate([p1.astype(np.int32), bits[pos]]),
    )


class MaskWriter:
    """Fills up to ``max_batch`` bitmask rows for batches of states.

    ``fill(states)`` returns a view of the writer's own int32 buffer, shape
    ``(len(states), ceil(vocab_size / 32))``, in the layout of
    :meth:`MaskTable.fill_bitmask` (equal rows). The view stays valid until the
    next ``fill``; callers must read it (or copy it, e.g. to a device) and never
    write to it, since the writer relies on knowing every word that is set.
    """

    def __init__(self, table: TableArrays, max_batch: int = 1) -> None:
        if int(max_batch) < 1:
            raise ValueError(f"max_batch must be >= 1, not {max_batch}")
        self.table = table
        self._tails = table.tails is not None  # tail rows are computed per fill, never expanded into words
        sw = state_words(table) if not self._tails else EMPTY_WORDS
        self.max_batch = int(max_batch)
        self.width = table.words_per_row
        self._num_states = table.num_states
        self._offsets = sw.offsets
        self._words = sw.words
        self._bits = sw.bits
        self._single: np.ndarray | None = None  # pack_single of the words, per table, on the first batch fill
        self._buf = np.zeros((self.max_batch, self.width), dtype=np.int32)
        self._flat = self._buf.reshape(-1)
        self._mv = self._flat.data  # its memoryview, format "i": item assignment without numpy scalar overhead
        self._row0 = self._buf[:1]
        self._row_base = np.arange(self.max_batch, dtype=np.int64) * self.width
        # Python-level copies for the single-state path: list indexing beats numpy scalar indexing.
        self._row_of = sw.row_of  # a class layout's states share rows: offsets index rows, not states
        self._row_of_list: list[int] | None = None if sw.row_of is None else sw.row_of.tolist()
        self._offsets_list: list[int] = sw.offsets.tolist()
        self._words_list: list[int] = sw.words.tolist()
        self._bits_list: list[int] = sw.bits.tolist()
        self._last_state = -1  # state written to row 0 by the single-state path, else -1
        self._last_flat: np.ndarray | None = None  # flat indices written by the batch path
        self._last_words: list[int] = []  # words of row 0 written by a tail table's single-row path
        self._row0_words = self._buf[0].view(np.uint32).data  # its memoryview, format "I"

    @property
    def buffer(self) -> np.ndarray:
        """The whole ``(max_batch, width)`` buffer (read-only use)."""
        return self._buf

    def fill(self, states: Sequence[int] | np.ndarray) -> np.ndarray:
        """Write one row per state and return ``buffer[:len(states)]``."""
        if len(states) == 1:
            return self.fill_one(states[0])
        return self._fill_batch(states)

    def fill_one(self, state: int) -> np.ndarray:
        """The single-state fast path: returns ``buffer[:1]``."""
        s = int(state)
        if not 0 <= s < self._num_states:
            raise IndexError(f"state {s} out of range (0..{self._num_states - 1}){terminal_note(s)}")
        if self._tails:
            return self._fill_computed(s)
        if self._row_of_list is not None:
            s = self._row_of_list[s]
        if s == self._last_state:  # row 0 already holds it
            return self._row0
        off = self._offsets_list
        if self._last_flat is not None:
            self._flat[self._last_flat] = 0
            self._last_flat = None
        elif self._last_state >= 0:
            p = self._last_state
            self._write(off[p], off[p + 1], clear=True)
        self._write(off[s], off[s + 1], clear=False)
        self._last_state = s
        return self._row0

    def _write(self, lo: int, hi: int, *, clear: bool) -> None:
        if hi - lo <= _SMALL:
            mv = self._mv
            words = self._words_list
            if clear:
                for k in range(lo, hi):
                    mv[words[k]] = 0
            else:
                bits = self._bits_list
                for k in range(lo, hi):
                    mv[words[k]] = bits[k]
        elif clear:
            self._flat[self._words[lo:hi]] = 0
        else:
            self._flat[self._words[lo:hi]] = self._bits[lo:hi]

    def _fill_batch(self, states: Sequence[int] | np.ndarray) -> np.ndarray:
        st = state_array(states)
        n = st.shape[0]
        if n > self.max_batch:
            raise ValueError(f"{n} states exceed this writer's max_batch of {self.max_batch}")
        if n and st.view(np.uint64).max() >= self._num_states:  # negatives wrap to huge values
            bad = int(st[(st < 0) | (st >= self._num_states)][0])
            raise IndexError(f"state {bad} out of range (0..{self._num_states - 1}){terminal_note(bad)}")
        if self._tails:
            return self._fill_rows(st)
        if self._last_flat is not None:
            self._flat[self._last_flat] = 0
        elif self._last_state >= 0:
            off = self._offsets_list
            p = self._last_state
            self._write(off[p], off[p + 1], clear=True)
        self._last_state = -1
        if self._row_of is not None:
            st = self._row_of[st]
        if self._single is None:
            self._single = single_words(self.table)
        flat_index, values = batch_words(self._single, self._offsets, self._words, self._bits, st, self._row_base[:n])
        self._flat[flat_index] = values
        self._last_flat = flat_index
        return self._buf[:n]

    def _fill_computed(self, s: int) -> np.ndarray:
        """A tail table's single row: its ids OR-ed into row 0 by item writes, its words remembered."""
        if self._last_flat is not None:
            self._flat[self._last_flat] = 0
            self._last_flat = None
        words = self._row0_words
        for w in self._last_words:
            words[w] = 0
        tails = self.table.tails
        assert tails is not None
        ids, accepting = tails.row_ids(s)
        if accepting:
            ids = [*ids, *self.table.eos_token_ids]
        self._last_words = or_few(words, ids)
        self._last_state = -1
        return self._row0

    def _fill_rows(self, st: np.ndarray) -> np.ndarray:
        """A tail table's rows: each state's tokens (a stored row or a tail row) and EOS, OR-ed into the words,
        every word set remembered for the next clear."""
        n = st.shape[0]
        if self._last_flat is not None:
            self._flat[self._last_flat] = 0
        for w in self._last_words:
            self._row0_words[w] = 0
        self._last_words = []
        row, tokens = contents(self.table, st)
        eos = np.asarray(self.table.eos_token_ids, dtype=np.int64)
        if eos.size:
            vs = self.table.value_state
            i = np.minimum(vs.searchsorted(st.astype(vs.dtype)), vs.shape[0] - 1)  # in its dtype: no O(K) cast
            accepting = np.flatnonzero(vs[i] == st)
            if accepting.size:
                row = np.concatenate([row, np.repeat(accepting, eos.size)])
                tokens = np.concatenate([tokens, np.tile(eos, accepting.size)])
        flat_index = flat_word(row, tokens, self.width)
        np.bitwise_or.at(self._flat, flat_index, as_int32(bit_of(tokens)))
        self._last_flat = flat_index
        self._last_state = -1
        return self._buf[:n]
