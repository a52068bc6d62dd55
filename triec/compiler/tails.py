"""Compiling the tail layout in pieces: memory bounded by a piece of the values, not by the whole trie.

The values, sorted, fall into runs that share no first byte with the run before (``lcp[i] == 0`` at each run's
first value): below the root, their tries are disjoint. Each piece of consecutive runs is compiled alone (its
trie, the walk from its branching states, its rows packed) and numbered into the whole table's preorder: a
piece's state x (x >= 1) is the table's ``base + x - 1``, where ``base`` is 1 plus the states the pieces before
it created; its root row holds exactly the root tokens whose first byte starts one of its values, so the
table's root row is the pieces' root rows merged by token id. Every other row, value state and LCP is the piece's
own, shifted. What is held at once is one piece's trie and walk plus the table's packed arrays (about 6 bytes
per stored pair and 1 per state).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from triec._arrays import concat_ranges
from triec.compiler.keysort import SortedKeys
from triec.compiler.walk import walk
from triec.runtime.tails import pack_pairs
from triec.tokenizer.vocabulary import Vocabulary
from triec.trie import build_trie_from_buffer

PIECE = 1 << 20
"""Values per piece, about (a piece ends at the first run boundary past this many)."""


def pieces(lcp: np.ndarray, size: int = PIECE) -> list[tuple[int, int]]:
    """Consecutive ranges of values, each ending where the next value shares no byte with its predecessor."""
    k = int(lcp.shape[0])
    bounds = np.flatnonzero(lcp[1:] == 0) + 1  # a run starts here
    out = []
    a = 0
    while a < k:
        i = int(np.searchsorted(bounds, a + size))
        b = int(bounds[i]) if i < bounds.shape[0] else k
        out.append((a, b))
        a = b
    return out


def tail_lengths(value_lcp: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Each value's tail length (int64 [K]): its last ``len(i) - max(lcp[i], lcp[i + 1])`` states, below which no
    other value remains (none where value i is a prefix of value i + 1). O(K)."""
    lcp = value_lcp.astype(np.int64)
    shared = np.maximum(lcp, np.append(lcp[1:], 0))
    tails: np.ndarray = np.maximum(np.asarray(lengths, dtype=np.int64) - shared, 0)
    return tails


def branching_states(num_states: int, value_state: np.ndarray, tail_len: np.ndarray) -> np.ndarray:
    """Bool per state: not a tail (value i's tail is its last ``tail_len[i]`` states)."""
    first = value_state.astype(np.int64) - tail_len + 1
    live = tail_len > 0
    mark = np.zeros(num_states + 1, dtype=np.int8)
    mark[first[live]] = 1  # tails never overlap: one may end where the next starts (then the two cancel)
    mark[(first + tail_len)[live]] -= 1
    np.cumsum(mark, out=mark)
    branching: np.ndarray = mark[:-1] == 0
    return branching


def compile_pieces(
    sk: SortedKeys,
    vocab: Vocabulary,
    progress: Callable[[int, int], None] | None = None,
    size: int | None = None,
) -> dict[str, np.ndarray]:
    """The tail layout's arrays of sorted, unique keys (``sk``), piece by piece: ``allowed_offsets``,
    ``allowed_pairs``, ``far_pairs``, ``far_next``, ``value_state``, ``value_lcp``, ``state_byte``."""
    automaton = vocab.automaton
    lcp_all = sk.lcp
    k = int(lcp_all.shape[0])
    lengths_all = np.diff(sk.offsets)
    total_states = 1 + int((lengths_all - lcp_all).sum())
    state_byte = np.zeros(total_states, dtype=np.uint8)
    value_state = np.zeros(k, dtype=np.int32)
    root_tok: list[np.ndarray] = []
    root_next: list[np.ndarray] = []
    counts: list[np.ndarray] = []  # stored rows' lengths, per piece (its root's excluded)
    toks: list[np.ndarray] = []
    nexts: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    base = 1
    parts = pieces(lcp_all, PIECE if size is None else size)
    for n_done, (a, b) in enumerate(parts):
        offsets = sk.offsets[a : b + 1] - sk.offsets[a]
        lcp = lcp_all[a:b].copy()
        lcp[0] = 0
        trie = build_trie_from_buffer(sk.data, offsets, lcp, sk.starts[a:b])
        n = trie.num_nodes
        vs = trie.terminal
        tails = tail_lengths(lcp, np.diff(offsets))
        starts = branching_states(n, vs, tails)
        tr = walk(trie, automaton, vocab.vocab_size, starts=starts)
        del trie
        glob = np.arange(n, dtype=np.int64) + (base - 1)  # local state -> the table's (the root is 0 in both)
        glob[0] = 0
        row_len = np.diff(tr.offsets.astype(np.int64))
        r0 = int(row_len[0])
        root_tok.append(tr.tokens[:r0])
        root_next.append(glob[tr.next_state[:r0]])
        branch = np.flatnonzero(starts)[1:]  # the piece's branching states but its root
        counts.append(row_len[branch])
        toks.append(tr.tokens[r0:])
        nexts.append(glob[tr.next_state[r0:]].astype(np.int32))
        owners.append(glob[branch])
        value_state[a:b] = glob[vs]
        state_byte[base : base + n - 1] = _bytes_of(sk, a, b, offsets, lcp, n)
        base += n - 1
        del tr, glob, starts
        if progress is not None:
            progress(n_done + 1, len(parts))
    assert base == total_states
    # the root row: the pieces' root rows, merged by token id
    rt = np.concatenate(root_tok)
    order = np.argsort(rt, kind="stable")
    rt, rn = rt[order], np.concatenate(root_next)[order]
    row_counts = np.concatenate([[rt.shape[0]], *counts]).astype(np.int64)
    stored = np.zeros(row_counts.shape[0] + 1, dtype=np.uint32)
    np.cumsum(row_counts, out=stored[1:], dtype=np.uint32)
    tokens = np.concatenate([rt, *toks]).astype(np.int32)
    nxt = np.concatenate([rn.astype(np.int32), *nexts])
    row_states = np.concatenate([[0], *owners]).astype(np.int64)
    del toks, nexts, owners
    pairs, far_pairs, far_next = pack_pairs(stored, tokens, nxt, row_states, vocab.vocab_size)
    return {
        "allowed_offsets": stored,
        "allowed_pairs": pairs,
        "far_pairs": far_pairs,
        "far_next": far_next,
        "value_state": value_state,
        "value_lcp": lcp_all.astype(np.int32),
        "state_byte": state_byte,
    }


def _bytes_of(sk: SortedKeys, a: int, b: int, offsets: np.ndarray, lcp: np.ndarray, n: int) -> np.ndarray:
    """The edge byte of each state a piece creates (its states 1 .. n - 1): each value's bytes past its LCP."""
    lengths = np.diff(offsets)
    created = lengths - lcp
    lo = sk.starts[a:b] + lcp
    at = concat_ranges(lo.astype(np.int64), created.astype(np.int64))
    assert at.shape[0] == n - 1
    created_bytes: np.ndarray = sk.data[at]
    return created_bytes
