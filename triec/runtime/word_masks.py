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
from typing import TYPE_CHECKING, Protocol

import numpy as np

from triec._memo import per_table
from triec.runtime.bitmask import bit_of, flat_word
from triec.runtime.token_classes import row_words

if TYPE_CHECKING:
    from triec.runtime.token_classes import TokenClasses


class RowArrays(Protocol):
    """What a state's words are built from: a set table's (:class:`~triec.runtime.arrays.TableArrays`) or a pattern
    table's arrays (which have no ``value_lcp`` or ``state_byte``)."""

    @property
    def allowed_offsets(self) -> np.ndarray: ...

    @property
    def allowed_tokens(self) -> np.ndarray: ...

    @property
    def value_state(self) -> np.ndarray: ...

    @property
    def classes(self) -> TokenClasses | None: ...

    @property
    def eos_token_ids(self) -> tuple[int, ...]: ...

    @property
    def num_states(self) -> int: ...

    @property
    def words_per_row(self) -> int: ...


@dataclass(frozen=True)
class StateWords:
    """CSR of (word index, bits) pairs: state s sets ``words[offsets[s]:offsets[s + 1]]``.

    Words are ascending and unique within a state; ``bits`` is int32 (bit 31
    is the sign bit), exactly the value the row word holds.
    """

    offsets: np.ndarray  # int64 [R + 1]
    words: np.ndarray  # int64 [N]: word index in the row
    bits: np.ndarray  # int32 [N]
    row_of: np.ndarray | None = None
    """int64 [S]: the row each state sets, where states share rows (a pattern table's token classes:
    :mod:`triec.runtime.token_classes`); ``None`` where row s is state s's own."""

    @property
    def num_states(self) -> int:
        return int(self.offsets.shape[0]) - 1 if self.row_of is None else int(self.row_of.shape[0])

    def counts(self) -> np.ndarray:
        """Words set per state."""
        per_row = np.diff(self.offsets)
        return per_row if self.row_of is None else per_row[self.row_of]

    def rows(self, states: np.ndarray) -> np.ndarray:
        """The row each of ``states`` (in range) sets: index ``offsets`` with these."""
        return states if self.row_of is None else self.row_of[states]

    def row(self, state: int) -> int:
        return state if self.row_of is None else int(self.row_of[state])


EMPTY_WORDS = StateWords(
    offsets=np.zeros(1, dtype=np.int64), words=np.zeros(0, dtype=np.int64), bits=np.zeros(0, dtype=np.int32)
)
"""No state's words: what a tail table's writers hold instead (they compute each row when asked)."""


@per_table
def state_words(table: RowArrays) -> StateWords:
    """The (word, bits) pairs of every state of ``table``; built once per table (O(allowed pairs))."""
    return build_state_words(table)


@per_table
def single_words(table: RowArrays) -> np.ndarray:
    """:func:`pack_single` of ``state_words(table)``: built once per table, for the writers' batch fills."""
    sw = state_words(table)
    return pack_single(sw.offsets, sw.words, sw.bits)


def pack_single(offsets: np.ndarray, words: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """int64 [R]: for each row of the CSR that sets exactly one word, ``word << 32 | bits`` (bits as uint32); -1
    for the other rows. One gather of this array gives a one-word row's flat word and its bits, where the CSR takes
    four (both offsets, the word, the bits): at a beam search's leaves (one child, or EOS alone) a step of 4,096
    rows writes in half the time. 8 bytes a row, built on a writer's first batch fill."""
    counts = np.diff(offsets)
    out = np.full(counts.shape[0], -1, dtype=np.int64)
    one = np.flatnonzero(counts == 1)
    first = offsets[one]
    out[one] = (words[first].astype(np.int64) << 32) | bits[first].view(np.uint32).astype(np.int64)
    return out


def build_state_words(table: RowArrays) -> StateWords:
    """Merge each state's content tokens and, at accepting states, the EOS ids into words (a class layout's
    states share the words of their distinct rows)."""
    if table.classes is not None:
        return class_state_words(table)
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


def class_state_words(table: RowArrays) -> StateWords:
    """A class layout's words: one set per distinct row (live classes, acceptance), ``row_of`` for the states."""
    classes = table.classes
    assert classes is not None
    accepting = np.zeros(table.num_states, dtype=bool)
    accepting[np.asarray(table.value_state, dtype=np.int64)] = True
    row_of, reps = classes.distinct_rows(accepting)
    eos = np.asarray(table.eos_token_ids, dtype=np.int64)
    offsets, words, bits = row_words(classes, reps, accepting, eos, table.words_per_row)
    return StateWords(offsets=offsets, words=words, bits=bits, row_of=row_of)


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
