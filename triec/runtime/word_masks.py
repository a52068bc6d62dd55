"""Each state's bitmask row as sparse (word, bits) pairs, EOS included.

A bitmask row is ``ceil(vocab_size / 32)`` int32 words of which a state sets
only a handful. Writing those words directly (instead of scattering one bit per
token) makes a row cost O(words set), and the pairs of one state are unique by
word, so they can be *assigned* rather than OR-ed. Both the CPU mask writer and
the device table build on these pairs; they are derived in memory from the
artifact's arrays (docs/decisions.md D2 keeps them out of the file) and cached
per table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from triec._memo import per_table
from triec.runtime.arrays import TableArrays
from triec.runtime.bitmask import bit_of, flat_word


@dataclass(frozen=True)
class StateWords:
    """CSR of (word index, bits) pairs: state s sets ``words[offsets[s]:offsets[s + 1]]``.

    Words are ascending and unique within a state; ``bits`` is int32 (bit 31
    is the sign bit), exactly the value the row word holds.
    """

    offsets: np.ndarray  # int64 [S + 1]
    words: np.ndarray  # int64 [N]: word index in the row
    bits: np.ndarray  # int32 [N]

    @property
    def num_states(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def counts(self) -> np.ndarray:
        """Words set per state."""
        return np.diff(self.offsets)


EMPTY_WORDS = StateWords(
    offsets=np.zeros(1, dtype=np.int64), words=np.zeros(0, dtype=np.int64), bits=np.zeros(0, dtype=np.int32)
)
"""No state's words: what a tail table's writers hold instead (they compute each row when asked)."""


@per_table
def state_words(table: TableArrays) -> StateWords:
    """The (word, bits) pairs of every state of ``table``; built once per table (O(allowed pairs))."""
    return build_state_words(table)


def build_state_words(table: TableArrays) -> StateWords:
    """Merge each state's content tokens and, at accepting states, the EOS ids into words."""
    num_states = table.num_states
    width = table.words_per_row
    offsets = np.asarray(table.allowed_offsets, dtype=np.int64)
    state = np.repeat(np.arange(num_states, dtype=np.int64), np.diff(offsets))
    tokens = np.asarray(table.allowed_tokens, dtype=np.int64)
    eos = np.asarray(table.eos_token_ids, dtype=np.int64)
    if eos.size:
        accepting = np.asarray(table.value_state, dtype=np.int64)
        state = np.concatenate([state, np.repeat(accepting, eos.size)])
        tokens = np.concatenate([tokens, np.tile(eos, accepting.size)])
    return words_from_pairs(num_states, state, tokens, width)


def words_from_pairs(num_rows: int, row: np.ndarray, tokens: np.ndarray, width: int) -> StateWords:
    """(word, bits) CSR of arbitrary (row, token) pairs: duplicate pairs and shared words are OR-ed."""
    row = np.asarray(row, dtype=np.int64)
    tokens = np.asarray(tokens, dtype=np.int64)
    key = flat_word(row, tokens, width)
    order = np.argsort(key, kind="stable")
    key = key[order]
    bits = bit_of(tokens[order])
    if key.size:
        first = np.concatenate([[True], key[1:] != key[:-1]])
        starts = np.flatnonzero(first)
        key = key[starts]
        bits = np.bitwise_or.reduceat(bits, starts)
    word_row = key // width
    out_offsets = np.searchsorted(word_row, np.arange(num_rows + 1, dtype=np.int64)).astype(np.int64)
    return StateWords(offsets=out_offsets, words=key - word_row * width, bits=bits.view(np.int32))
