"""The precomputed rows of a schema table: (word, bits) pairs of every trie state and tail offset.

In the name field and the literal tail a row allows few tokens; they are
derived once per table from the trie's pairs and the straddle tables, so a
matcher writes a row in O(words set) and never asks the engine
(docs/decisions.md D19).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from triec._arrays import concat_ranges
from triec._memo import per_table
from triec.runtime.word_masks import StateWords, words_from_pairs

if TYPE_CHECKING:
    from triec.schema.table import SchemaTable


class SourceWords:
    """(word, bits) rows of every non-engine position: trie states 0..S-1, then tail offsets S + i."""

    def __init__(self, sw: StateWords, num_states: int) -> None:
        self.num_states = num_states
        self.offsets = sw.offsets
        self.words = sw.words
        self.bits = sw.bits
        self.offsets_list: list[int] = sw.offsets.tolist()
        self.words_list: list[int] = sw.words.tolist()
        self.bits_list: list[int] = sw.bits.tolist()


@per_table
def source_words(table: SchemaTable) -> SourceWords:
    """Built once per table: O(trie pairs + straddle pairs)."""
    trie, st = table.trie, table.straddles
    s, n = trie.num_states, table.tail_len
    off = np.asarray(trie.allowed_offsets, dtype=np.int64)
    rows = [np.repeat(np.arange(s, dtype=np.int64), np.diff(off))]
    toks = [np.asarray(trie.allowed_tokens, dtype=np.int64)]
    # straddles starting at trie states
    e_row = table.entry_row.astype(np.int64)
    lo = st.offsets[e_row]
    cnt = st.offsets[e_row + 1] - lo
    rows.append(np.repeat(table.entry_state.astype(np.int64), cnt))
    toks.append(st.tokens[concat_ranges(lo, cnt)].astype(np.int64))
    # tail rows at S + i; a leaf reads tail row 0 through its own id
    cnt_t = np.diff(st.offsets[: n + 1])
    rows.append(np.repeat(np.arange(s, s + n, dtype=np.int64), cnt_t))
    toks.append(st.tokens[: int(st.offsets[n])].astype(np.int64))
    sw = words_from_pairs(s + n, np.concatenate(rows), np.concatenate(toks), table.words_per_row)
    return SourceWords(sw, s)


@per_table
def leaf_value(table: SchemaTable) -> dict[int, int]:
    """Trie state where a key ends -> the value index of that key."""
    return {int(s): i for i, s in enumerate(table.trie.value_state.tolist())}


@per_table
def row_maps(table: SchemaTable) -> list[dict[int, int]]:
    """Per straddle row: token -> entry index in the straddle arrays."""
    st = table.straddles
    toks = st.tokens.tolist()
    off = st.offsets.tolist()
    return [{toks[k]: k for k in range(off[r], off[r + 1])} for r in range(st.num_rows)]
