"""Token classes: a pattern table's rows stored by what tokens *do*, not by which tokens they are.

A DFA state's row over a vocabulary lists every token the state allows and where each leads. For a pattern that
allows most of the vocabulary in most states (``.{0,255}``, ``[^a]{500}``: how schemas bound a string's length),
those rows are the vocabulary over and over: 117 MB for ``.{0,100}`` on Qwen2. Yet tokens that act alike on the
DFA are interchangeable: every token of three ASCII characters takes ``.{0,100}`` from state i to state i + 3.
So the tokens are grouped by their *transition function* over the DFA (which state each one leads to from every
state, or nowhere), and a state's row is stored over those groups, the **classes**:

* ``member_offsets`` [C + 1], ``member_tokens``: each class's token ids, ascending (a token no state allows,
  EOS among them, is in none): ``token_class`` [V], each token's class or -1, is derived from them on load;
* ``class_offsets`` [S + 1], ``class_ids``, ``class_next``: per state, its live classes ascending and the state
  each leads to (the CSR of a mask table's rows, with class ids where the token ids stood).

Tokens of one class are allowed in exactly the same states and lead to the same state from each, so the rows
are exact. ``.{0,100}`` has 119 classes on Qwen2 and 10,307 (state, class) pairs where its token rows held
14.6 million; a date's 14 states hold 46. Storage follows how many distinct behaviours the language gives
the tokens, never vocabulary x states. A table stored as token rows (pattern format version 1, or
built by hand) holds no classes and is served from its rows as before.

Every query is O(what it returns): ``step`` is a binary search among a state's live classes; ``content`` gathers
the members of those classes (O(allowed)); bitmask rows are built once per *distinct* row (the set of live
classes and whether EOS is allowed), shared by every state that has it (:func:`class_state_words`), each in
O(vocabulary) at most: a few hundred distinct rows where there are thousands of states. numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from triec._arrays import concat_ranges
from triec.runtime.bitmask import bit_of, pack, word_of


@dataclass(eq=False)
class TokenClasses:
    """The class layout of a pattern table's rows (the module docstring says what each array holds)."""

    member_offsets: np.ndarray  # uint32 [C + 1]
    member_tokens: np.ndarray  # int32 [M], ascending within a class, each id in one class at most
    class_offsets: np.ndarray  # uint32 [S + 1]
    class_ids: np.ndarray  # int32 [P], ascending per state
    class_next: np.ndarray  # int32 [P]
    vocab_size: int
    _token_class: np.ndarray | None = field(default=None, repr=False)
    _num_pairs: int | None = field(default=None, repr=False)
    _state_counts: np.ndarray | None = field(default=None, repr=False)

    @property
    def num_states(self) -> int:
        return int(self.class_offsets.shape[0]) - 1

    @property
    def num_classes(self) -> int:
        return int(self.member_offsets.shape[0]) - 1

    @property
    def num_class_pairs(self) -> int:
        """Stored (state, class) pairs."""
        return int(self.class_ids.shape[0])

    @property
    def nbytes(self) -> int:
        arrays = (self.member_offsets, self.member_tokens, self.class_offsets, self.class_ids, self.class_next)
        return sum(int(a.nbytes) for a in arrays)

    @property
    def token_class(self) -> np.ndarray:
        """int32 [V]: each token's class, -1 where it is in none (derived once: O(vocabulary))."""
        if self._token_class is None:
            tc = np.full(self.vocab_size, -1, dtype=np.int32)
            sizes: np.ndarray = self.class_sizes()
            tc[np.asarray(self.member_tokens, dtype=np.int64)] = np.repeat(
                np.arange(self.num_classes, dtype=np.int32), sizes
            )
            self._token_class = tc
        return self._token_class

    def members(self) -> tuple[np.ndarray, np.ndarray]:
        """(offsets [C + 1] int64, token ids ascending within each class)."""
        return np.asarray(self.member_offsets, dtype=np.int64), self.member_tokens

    def class_sizes(self) -> np.ndarray:
        return np.diff(np.asarray(self.member_offsets, dtype=np.int64))

    @property
    def num_pairs(self) -> int:
        """(state, token) pairs the rows allow: what a table of token rows would store."""
        if self._num_pairs is None:
            self._num_pairs = int(self.class_sizes()[np.asarray(self.class_ids, dtype=np.int64)].sum())
        return self._num_pairs

    def state_pair_counts(self) -> np.ndarray:
        """Allowed content tokens per state (int64 [S], computed once)."""
        if self._state_counts is None:
            per_pair = self.class_sizes()[np.asarray(self.class_ids, dtype=np.int64)]
            cum = np.concatenate([[0], np.cumsum(per_pair)])
            self._state_counts = np.diff(cum[np.asarray(self.class_offsets, dtype=np.int64)])
        return self._state_counts

    # ------------------------------------------------------------- queries

    def step(self, state: int, token: int) -> int:
        """The state ``token`` (in the vocabulary's range) leads to from ``state`` (in range), or -1."""
        c = int(self.token_class[token])
        if c < 0:
            return -1
        lo, hi = int(self.class_offsets[state]), int(self.class_offsets[state + 1])
        i = lo + int(np.searchsorted(self.class_ids[lo:hi], c))
        return int(self.class_next[i]) if i < hi and int(self.class_ids[i]) == c else -1

    def content(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """(content tokens ascending, the state each leads to) of one state in range: O(allowed)."""
        _row, tokens, nxt = self.content_pairs(np.array([state], dtype=np.int64))
        return tokens.astype(np.int32), nxt.astype(np.int32)

    def content_pairs(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row index, content token, next state) int64 of a batch of states in range, row by row, tokens
        ascending within a row."""
        m_off, m_tok = self.members()
        lo = np.asarray(self.class_offsets, dtype=np.int64)[states]
        n = np.asarray(self.class_offsets, dtype=np.int64)[states + 1] - lo
        pos = concat_ranges(lo, n)
        cls = np.asarray(self.class_ids, dtype=np.int64)[pos]
        size = m_off[cls + 1] - m_off[cls]
        tokens = m_tok[concat_ranges(m_off[cls], size)].astype(np.int64)
        row = np.repeat(np.repeat(np.arange(states.shape[0], dtype=np.int64), n), size)
        nxt = np.repeat(np.asarray(self.class_next, dtype=np.int64)[pos], size)
        if tokens.size > 1:  # classes interleave in id order: sort each row by token
            order = np.lexsort((tokens, row))
            row, tokens, nxt = row[order], tokens[order], nxt[order]
        return row, tokens, nxt

    def expand(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The token rows (offsets [S + 1], tokens ascending per state, next state) that a version-1 pattern
        artifact stores: O(every allowed pair), for the consumers that read token rows (verify, a schema slot)."""
        row, tokens, nxt = self.content_pairs(np.arange(self.num_states, dtype=np.int64))
        offsets = np.searchsorted(row, np.arange(self.num_states + 1, dtype=np.int64)).astype(np.uint32)
        return offsets, tokens.astype(np.int32), nxt.astype(np.int32)

    # ------------------------------------------------------------- distinct rows

    def distinct_rows(self, accepting: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row of each state [S], a representative state of each distinct row): states with the same live
        classes and the same acceptance have the same bitmask row."""
        off = np.asarray(self.class_offsets, dtype=np.int64)
        ids = np.asarray(self.class_ids, dtype=np.int32)
        seen: dict[tuple[bool, bytes], int] = {}
        row_of = np.empty(self.num_states, dtype=np.int64)
        reps: list[int] = []
        for s in range(self.num_states):
            key = (bool(accepting[s]), ids[off[s] : off[s + 1]].tobytes())
            r = seen.get(key)
            if r is None:
                r = seen[key] = len(reps)
                reps.append(s)
            row_of[s] = r
        return row_of, np.array(reps, dtype=np.int64)


def row_words(
    classes: TokenClasses, rep_states: np.ndarray, accepting: np.ndarray, eos: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets [R + 1], word index, bits int32) of each distinct row's bitmask words, EOS included where the
    row's states accept: a row of few tokens from its classes' members, a wide one from a flag per token
    (O(vocabulary)) packed into words."""
    m_off, m_tok = classes.members()
    sizes = np.diff(m_off)
    tc1 = np.asarray(classes.token_class, dtype=np.int64) + 1  # class -1 reads flag 0, which is never set
    off = np.asarray(classes.class_offsets, dtype=np.int64)
    ids = np.asarray(classes.class_ids, dtype=np.int64)
    vocab = int(tc1.shape[0])
    out_words: list[np.ndarray] = []
    out_bits: list[np.ndarray] = []
    counts = np.zeros(rep_states.shape[0] + 1, dtype=np.int64)
    few = max(64, width // 4)
    for r, s in enumerate(rep_states.tolist()):
        live = ids[off[s] : off[s + 1]]
        extra = eos if bool(accepting[s]) else eos[:0]
        if int(sizes[live].sum()) <= few:
            tokens = np.concatenate([m_tok[concat_ranges(m_off[live], sizes[live])].astype(np.int64), extra])
            tokens = np.unique(tokens)
            bit = bit_of(tokens).astype(np.int64)
            uw, start = np.unique(word_of(tokens), return_index=True)
            words, values = uw, (np.bitwise_or.reduceat(bit, start) if bit.size else bit)
        else:
            flag = np.zeros(classes.num_classes + 1, dtype=bool)
            flag[live + 1] = True
            on = np.zeros(vocab, dtype=bool)
            on[:] = flag[tc1]
            on[extra] = True
            packed = pack(on).view(np.uint32).astype(np.int64)
            words = np.flatnonzero(packed)
            values = packed[words]
        out_words.append(words.astype(np.int64))
        out_bits.append(values.astype(np.uint32).view(np.int32))
        counts[r + 1] = words.shape[0]
    offsets = np.cumsum(counts)
    empty64, empty32 = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
    return (
        offsets,
        np.concatenate(out_words) if out_words else empty64,
        np.concatenate(out_bits) if out_bits else empty32,
    )
