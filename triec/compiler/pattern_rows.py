"""A minimal DFA's rows over a vocabulary, found as token classes (:mod:`triec.runtime.token_classes`).

The vocabulary's token trie is walked once from the root, every node carrying its *transition vector*: for
each DFA state from which the node's bytes can be read, the state they lead to (a sparse pair of arrays,
``src`` -> ``dst``; a state from which they die is left out). A child's vector is its parent's stepped by one
byte, and bytes that every DFA state treats alike (the DFA's byte classes: ``.`` has a dozen) step alike, so
the step of a (vector, byte class) pair is computed once and remembered: a node costs a dictionary lookup,
and the work that grows with the DFA is one gather per *distinct* vector and byte class. A subtree whose
vector is empty is dead in every state and is never entered, so a digit pattern visits only the tokens made
of digits. Each token's class is its node's vector; the table stores each class's tokens and, per state, the
classes live there and where each leads.

The work is bounded before it runs away: ``max_work`` caps the DFA states stepped over all distinct vectors,
and the walk raises :class:`~triec.errors.PatternTooLarge` as soon as it passes the cap (within a second at
the default), naming the bound and how to raise it.
"""

from __future__ import annotations

import numpy as np

from triec._arrays import concat_ranges
from triec.compiler.regex import Dfa
from triec.errors import PatternTooLarge
from triec.runtime.token_classes import TokenClasses
from triec.tokenizer.automaton import VocabAutomaton

MAX_WORK = 100_000_000
"""Default bound on the DFA states the walk steps, summed over every distinct (vector, byte class) pair: about
a second of numpy. ``.{0,1000}`` (8,001 states) on Qwen2 takes some 20 million; a date, a few hundred."""


def byte_classes(dfa: Dfa) -> tuple[np.ndarray, np.ndarray]:
    """(class of each byte [256], a representative byte of each class): bytes with the same column of
    ``trans`` lead every state to the same place."""
    _, first, inverse = np.unique(dfa.trans.T, axis=0, return_index=True, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64), first.astype(np.int64)


class _Vectors:
    """The distinct transition vectors met so far and the memo of their steps (the walk's state)."""

    def __init__(self, dfa: Dfa, max_work: int) -> None:
        self.trans = dfa.trans
        self.bclass, self.rep = byte_classes(dfa)
        self.num_bclasses = int(self.rep.shape[0])
        every = np.arange(dfa.num_states, dtype=np.int32)
        self.src: list[np.ndarray] = [every]
        self.dst: list[np.ndarray] = [every]
        self.by_content: dict[tuple[bytes, bytes], int] = {}
        self.memo: dict[int, int] = {}
        self.work = 0
        self.max_work = int(max_work)

    def step_all(self, vids: np.ndarray, bytes_: np.ndarray) -> np.ndarray:
        """The vector id after each (vector, byte) pair; -1 where the vector dies (no state reads on)."""
        keys = vids * self.num_bclasses + self.bclass[bytes_]
        unique, inverse = np.unique(keys, return_inverse=True)
        out = np.fromiter((self._step(int(k)) for k in unique.tolist()), dtype=np.int64, count=unique.shape[0])
        return out[inverse.reshape(-1)]

    def _step(self, key: int) -> int:
        found = self.memo.get(key)
        if found is not None:
            return found
        vid, bc = divmod(key, self.num_bclasses)
        src, dst = self.src[vid], self.dst[vid]
        self.work += int(src.shape[0])
        if self.work > self.max_work:
            raise PatternTooLarge(
                f"the pattern's rows over this vocabulary need more than {self.max_work:,} DFA steps "
                "(max_work, --max-work): raise it to compile anyway, or leave this pattern to a grammar engine",
                position=0,
            )
        nxt = self.trans[dst, self.rep[bc]]
        live = np.flatnonzero(nxt >= 0)
        if live.size == 0:
            self.memo[key] = -1
            return -1
        s2, d2 = src[live], nxt[live].astype(np.int32)
        content = (s2.tobytes(), d2.tobytes())
        new = self.by_content.get(content)
        if new is None:
            new = self.by_content[content] = len(self.src)
            self.src.append(s2)
            self.dst.append(d2)
        self.memo[key] = new
        return new


def _token_vectors(vectors: _Vectors, automaton: VocabAutomaton, starts: np.ndarray) -> tuple[np.ndarray, ...]:
    """(trie node, vector id) of every token node some DFA state can read, one trie level per round."""
    edge_keys, edge_child = automaton.edge_keys, automaton.edge_child
    first = np.flatnonzero(automaton.root_child >= 0)
    node = automaton.root_child[first].astype(np.int64)
    vid = vectors.step_all(np.zeros(first.shape[0], dtype=np.int64), first)
    nodes: list[np.ndarray] = []
    vids: list[np.ndarray] = []
    while node.size:
        live = np.flatnonzero(vid >= 0)
        node, vid = node.take(live), vid.take(live)
        is_token = np.flatnonzero(automaton.node_key.take(node) >= 0)
        nodes.append(node.take(is_token))
        vids.append(vid.take(is_token))
        lo = starts.take(node)
        count = starts.take(node + 1) - lo
        edges = concat_ranges(lo, count)
        if edges.size == 0:
            break
        vid = vectors.step_all(np.repeat(vid, count), edge_keys.take(edges) & 255)
        node = edge_child.take(edges)
    if not nodes:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(nodes), np.concatenate(vids)


def token_class_rows(
    dfa: Dfa,
    automaton: VocabAutomaton,
    starts: np.ndarray,
    vocab_size: int,
    eos_token_ids: tuple[int, ...] = (),
    *,
    max_work: int = MAX_WORK,
) -> TokenClasses:
    """Every DFA state's row over the vocabulary, by token class. ``starts`` is where each trie node's
    children begin in ``edge_keys`` (:func:`triec.compiler.pattern.walk_index`). Classes are numbered by
    their smallest token id, and each state's classes ascend: the layout is a function of the DFA and the
    vocabulary alone, so a recompile reproduces it array for array (``triec verify``)."""
    vectors = _Vectors(dfa, max_work)
    node, vid = _token_vectors(vectors, automaton, starts)
    key = automaton.node_key.take(node).astype(np.int64)
    lo = automaton.key_offsets.take(key).astype(np.int64)
    n = automaton.key_offsets.take(key + 1).astype(np.int64) - lo
    ids = automaton.key_ids.take(concat_ranges(lo, n)).astype(np.int64)  # a token text may be several ids
    id_vid = np.repeat(vid, n)
    keep = np.flatnonzero((ids < vocab_size) & ~np.isin(ids, np.asarray(eos_token_ids, dtype=np.int64)))
    ids, id_vid = ids.take(keep), id_vid.take(keep)
    # classes numbered by their smallest id: sort the ids, a class's first appearance is its smallest
    order = np.argsort(ids, kind="stable")
    ids, id_vid = ids.take(order), id_vid.take(order)
    used, first_at, token_cls = np.unique(id_vid, return_index=True, return_inverse=True)
    rank = np.empty(used.shape[0], dtype=np.int64)
    rank[np.argsort(first_at, kind="stable")] = np.arange(used.shape[0], dtype=np.int64)
    id_class = rank[token_cls.reshape(-1)]
    by_class = np.lexsort((ids, id_class))  # members grouped by class, ascending ids within one
    member_tokens = ids.take(by_class).astype(np.int32)
    member_offsets = np.searchsorted(id_class.take(by_class), np.arange(used.shape[0] + 1)).astype(np.uint32)
    # (state, class, next) for every class's live states
    sizes = np.array([vectors.src[v].shape[0] for v in used.tolist()], dtype=np.int64)
    src = (
        np.concatenate([vectors.src[v] for v in used.tolist()]).astype(np.int64) if used.size else np.zeros(0, np.int64)
    )
    dst = np.concatenate([vectors.dst[v] for v in used.tolist()]) if used.size else np.zeros(0, np.int32)
    cls = np.repeat(rank, sizes)
    pair_order = np.lexsort((cls, src))
    src, cls, dst = src.take(pair_order), cls.take(pair_order), dst.take(pair_order)
    offsets = np.searchsorted(src, np.arange(dfa.num_states + 1, dtype=np.int64)).astype(np.uint32)
    return TokenClasses(
        member_offsets=member_offsets,
        member_tokens=member_tokens,
        class_offsets=offsets,
        class_ids=cls.astype(np.int32),
        class_next=dst.astype(np.int32),
        vocab_size=vocab_size,
    )
