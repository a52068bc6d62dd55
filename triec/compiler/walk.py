"""The fast path: a numpy-vectorized walk of the value trie against the vocabulary trie.

For every value-trie node we need each token whose bytes, read from that node,
stay inside the trie. An *entry* ``(node, start, v)`` says: reading the bytes
from trie node ``start`` down to ``node`` spells the path from the
vocabulary-trie root to vocabulary node ``v``; wherever ``v`` ends a token, the
pair (``start``, token) is allowed and leads to ``node``.

Entries are independent of each other, so they are advanced in *rounds*, not
trie levels: round 1 is every node's one-byte step from its parent (a single
table lookup for the whole trie); each later round moves every live entry to
each child of its node by that child's byte (one ``searchsorted`` on the
vocabulary's edge keys for the whole batch) and drops those that fall off the
vocabulary trie. The number of rounds is the longest token match in the set
(a dozen or two), not the trie's depth: a 1 MB value costs no more rounds than
a 20-byte one, and Python-level work never grows with nodes or matches.

Working memory is bounded: entries are advanced in batches of at most
``chunk`` (the initial entries in slices, and any batch whose expansion to
children would exceed ``chunk`` is split first), and found pairs are kept as
int32 as soon as ``chunk`` raw ones are pending.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from triec._arrays import concat_ranges
from triec.tokenizer.automaton import VocabAutomaton
from triec.trie import Trie

CHUNK = 1 << 18  # entries advanced per numpy pass (and raw found entries held)
_PACKED_BITS = 63  # a pair's (state, token, next state) sorts as one int64 when their bits fit


@dataclass(frozen=True)
class Transitions:
    """Allowed (state, token) pairs as CSR, tokens ascending within each state."""

    offsets: np.ndarray  # uint32 [S + 1] (int64 from 2**32 pairs)
    tokens: np.ndarray  # int32 [P]
    next_state: np.ndarray  # int32 [P]
    leaf_entries: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    """With ``walk(..., leaf_entries=True)``: (start, vocabulary node, leaf) of every partial
    token match still alive where a value's path ends at a leaf: the tokens that would run past
    the end of the value (what :mod:`triec.schema.straddle` continues into a literal tail)."""


class _Found:
    """Entries as they are found, (start node, vocabulary node, destination node).

    Kept raw and filtered to token-ending entries (stored as int32 with the
    distinct-bytes key) once ``limit`` entries are pending: a small set pays one
    filter in all, a large one never holds more than ``limit`` raw entries.
    """

    def __init__(self, automaton: VocabAutomaton, limit: int, leaves: np.ndarray | None = None) -> None:
        self.node_key = automaton.node_key
        self.has_child = automaton.has_child
        self.leaves = leaves  # bool per trie node, when partial matches alive at leaves are wanted
        self.at_leaf: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.limit = limit
        self.pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.pending_size = 0
        self.start: list[np.ndarray] = []
        self.key: list[np.ndarray] = []
        self.dest: list[np.ndarray] = []

    def add(self, start: np.ndarray, v: np.ndarray, dest: np.ndarray) -> None:
        if self.leaves is not None:
            alive = np.nonzero(self.leaves[dest] & self.has_child[v])[0]
            if alive.size:
                self.at_leaf.append(
                    (start[alive].astype(np.int64), v[alive].astype(np.int64), dest[alive].astype(np.int64))
                )
        self.pending.append((start, v, dest))
        self.pending_size += start.shape[0]
        if self.pending_size >= self.limit:
            self._flush()

    def _flush(self) -> None:
        if not self.pending:
            return
        if len(self.pending) == 1:
            start, v, dest = self.pending[0]
        else:
            start, v, dest = (np.concatenate(a) for a in zip(*self.pending, strict=True))
        self.pending, self.pending_size = [], 0
        key = self.node_key[v]
        ends = np.nonzero(key >= 0)[0]
        self.start.append(start[ends].astype(np.int32))
        self.key.append(key[ends])
        self.dest.append(dest[ends].astype(np.int32))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        self._flush()
        if not self.start:
            empty = np.zeros(0, dtype=np.int32)
            return empty, empty, empty
        out = []
        for pieces in (self.start, self.key, self.dest):  # one array at a time: pieces freed as they are joined
            out.append(pieces[0] if len(pieces) == 1 else np.concatenate(pieces))
            pieces.clear()
        return out[0], out[1], out[2]


def walk(
    trie: Trie,
    automaton: VocabAutomaton,
    vocab_size: int,
    progress: Callable[[int, int], None] | None = None,
    *,
    chunk: int = CHUNK,
    leaf_entries: bool = False,
    starts: np.ndarray | None = None,
) -> Transitions:
    """Every allowed (state, token, next state) of the trie, sorted by (state, token).

    ``progress(done, total)``, if given, is called after each slice of ``chunk``
    nodes has been walked (half of ``total``, in proportion to the nodes), then
    once after the pairs are collected and once when they are sorted into CSR (a
    quarter each). ``leaf_entries=True`` also returns the partial token matches
    alive at leaves (:attr:`Transitions.leaf_entries`). ``starts`` (bool per node) walks from those nodes
    only: the other rows stay empty (the tail layout's tail states, whose rows are served from the values).
    """
    leaves = None
    if leaf_entries:
        leaves = np.ones(trie.num_nodes, dtype=bool)
        leaves[trie.parent[1:]] = False
    found = _Found(automaton, chunk, leaves)
    n = trie.num_nodes
    if n > 1:
        kids = Children.of(trie)
        for lo in range(1, n, chunk):  # nodes lo .. hi - 1
            hi = min(lo + chunk, n)
            # round 1: the token's first byte, read from the parent; one table lookup per node
            v = automaton.root_child[trie.byte[lo:hi]].astype(np.int64)
            live = np.nonzero(v >= 0)[0]
            if starts is not None:
                live = live[starts[trie.parent[live + lo]]]
            child = live + lo
            parent = trie.parent[child].astype(np.int64)
            v = v[live]
            found.add(parent, v, child)
            go_on = np.nonzero(automaton.has_child[v])[0]
            _advance(kids, automaton, found, child[go_on], parent[go_on], v[go_on], chunk)
            if progress is not None:
                progress(2 * hi, 4 * n)
        del kids
    start, key, dest = found.arrays()
    if progress is not None:
        progress(3 * n, 4 * n)
    out = _to_csr(n, automaton, vocab_size, start, key, dest)
    if progress is not None:
        progress(4 * n, 4 * n)
    if not leaf_entries:
        return out
    empty = np.zeros(0, dtype=np.int64)
    start_at, node_at, leaf_at = (
        np.concatenate([f[i] for f in found.at_leaf]) if found.at_leaf else empty for i in range(3)
    )
    return Transitions(out.offsets, out.tokens, out.next_state, leaf_entries=(start_at, node_at, leaf_at))


@dataclass(frozen=True)
class Children:
    """Each node's children as CSR: ``node[lo[n]:lo[n] + count[n]]`` with their edge bytes."""

    node: np.ndarray  # int32 [N - 1]: children grouped by parent, in byte order within a parent
    byte: np.ndarray  # uint8 [N - 1]: the byte on the edge into each
    lo: np.ndarray  # int32 (int64 past 2**31 nodes) [N]
    count: np.ndarray  # int32 [N]
    first_byte: np.ndarray  # uint8 [N]: the byte on the edge into each node (trie.byte)

    @classmethod
    def of(cls, trie: Trie) -> Children:
        # preorder numbering makes parent ids mostly ascending runs: a stable sort is cheap
        node = np.argsort(trie.parent[1:], kind="stable").astype(np.int32)
        node += 1
        count = np.bincount(trie.parent[1:], minlength=trie.num_nodes).astype(np.int32)
        lo = np.cumsum(count, dtype=np.int64)
        lo -= count
        if lo.shape[0] and lo[-1] < 2**31:
            lo = lo.astype(np.int32)
        return cls(node, trie.byte[node], lo, count, trie.byte)


def _advance(
    kids: Children,
    automaton: VocabAutomaton,
    found: _Found,
    node: np.ndarray,
    start: np.ndarray,
    v: np.ndarray,
    chunk: int,
) -> None:
    """Advance a batch of entries one byte per round until every one has fallen off the vocabulary trie.

    The entries start one byte deep (at a child of the vocabulary root, reached
    by their node's own byte), so their first step is a lookup in the two-byte
    table; later steps binary-search the edge keys.
    """
    edge_keys, edge_child, has_child = automaton.edge_keys, automaton.edge_child, automaton.has_child
    two = two_byte_table(automaton)
    stack = [(node, start, v, True)]
    while stack:
        node, start, v, first = stack.pop()
        while node.shape[0]:
            count = kids.count[node]
            ends = np.cumsum(count)
            total = int(ends[-1])
            if total > chunk and node.shape[0] > 1:  # expanding would exceed the bound: halve the batch
                half = max(1, int(np.searchsorted(ends, total // 2)))
                stack.append((node[half:], start[half:], v[half:], first))
                node, start, v = node[:half], start[:half], v[:half]
                continue
            which = np.repeat(np.arange(node.shape[0], dtype=np.int64), count)
            pos = concat_ranges(kids.lo[node], count) if total else which
            if first:  # every entry is one byte deep: one lookup in the two-byte table
                v = two[kids.first_byte[node][which].astype(np.int64) * 256 + kids.byte[pos]]
                hit = np.nonzero(v >= 0)[0]
                v = v[hit]
            else:
                keys = v[which] * 256
                keys += kids.byte[pos]
                at = np.searchsorted(edge_keys, keys)
                hit = np.nonzero(edge_keys[at] == keys)[0]
                v = edge_child[at[hit]]
            node = kids.node[pos[hit]].astype(np.int64)
            start = start[which[hit]]
            found.add(start, v, node)
            keep = np.nonzero(has_child[v])[0]
            node, start, v = node[keep], start[keep], v[keep]
            first = False


_TWO_BYTE: dict[int, tuple[VocabAutomaton, np.ndarray]] = {}


def two_byte_table(automaton: VocabAutomaton) -> np.ndarray:
    """``table[b0 * 256 + b1]``: the vocabulary node spelling bytes b0 b1, or -1 (int64 [65536]).

    Most entries die within two bytes, so their lookups skip the binary search
    over the edge keys. Built once per automaton (about a millisecond) and kept
    with it.
    """
    found = _TWO_BYTE.get(id(automaton))
    if found is not None and found[0] is automaton:
        return found[1]
    u = automaton.root_child.astype(np.int64)
    keys = (u[:, None] * 256 + np.arange(256, dtype=np.int64)).ravel()
    at = np.searchsorted(automaton.edge_keys, keys)
    table = np.where((automaton.edge_keys[at] == keys) & (np.repeat(u, 256) >= 0), automaton.edge_child[at], -1)
    if len(_TWO_BYTE) >= 8:
        _TWO_BYTE.clear()
    _TWO_BYTE[id(automaton)] = (automaton, table)
    return table


def _to_csr(
    num_states: int,
    automaton: VocabAutomaton,
    vocab_size: int,
    start: np.ndarray,
    key: np.ndarray,
    dest: np.ndarray,
) -> Transitions:
    """Pairs to CSR. Held at most: the pairs (int32), the offsets and one int64 per pair (the packed sort key)."""
    if automaton.single_id:
        token = automaton.key_ids[automaton.key_offsets[key]]
    else:  # several ids share bytes: each of them is allowed and leads to the same node
        lo = automaton.key_offsets[key].astype(np.int64)
        counts = automaton.key_offsets[key + 1].astype(np.int64) - lo
        token = automaton.key_ids[concat_ranges(lo, counts)]
        start = np.repeat(start, counts)
        dest = np.repeat(dest, counts)
        del lo, counts
    del key
    n = start.shape[0]
    per_state = np.bincount(start, minlength=num_states)
    offsets = np.zeros(num_states + 1, dtype=np.uint32 if n < 2**32 else np.int64)
    np.cumsum(per_state, out=offsets[1:], dtype=offsets.dtype)
    del per_state
    state_bits = max(1, (num_states - 1).bit_length())
    token_bits = max(1, (vocab_size - 1).bit_length())
    packed = start.astype(np.int64)
    del start
    packed <<= token_bits
    packed |= token  # int32 into int64 in place: numpy casts in small buffers, no int64 copy
    if (
        2 * state_bits + token_bits <= _PACKED_BITS
    ):  # the destination rides in the low bits: sorting the keys is the whole job
        del token
        packed <<= state_bits
        packed |= dest
        del dest
        packed.sort(kind="stable")  # timsort: the rounds emit long ascending runs
        dest = np.empty(n, dtype=np.int32)
        np.bitwise_and(packed, (1 << state_bits) - 1, out=dest, casting="unsafe")
        packed >>= state_bits
        packed &= (1 << token_bits) - 1
        token = packed.astype(np.int32)
        del packed
    else:  # past about 2**22 states with qwen2: sort (key, index) and gather
        order = _sort_order(packed, state_bits + token_bits)
        del packed
        token = token[order].astype(np.int32, copy=False)
        dest = dest[order].astype(np.int32, copy=False)
    return Transitions(offsets=offsets, tokens=token, next_state=dest)


def _sort_order(packed: np.ndarray, key_bits: int) -> np.ndarray:
    """``argsort(packed)`` for unique keys, via a plain sort when the index fits beside the key (reuses ``packed``).

    Sorting values is markedly faster than argsort in numpy (SIMD sorts), so the
    position is packed into the low bits and read back after sorting.
    """
    n = packed.shape[0]
    index_bits = max(1, (n - 1).bit_length())
    if n == 0 or key_bits + index_bits > 63:
        return np.argsort(packed, kind="stable")
    packed <<= index_bits
    for lo in range(0, n, 1 << 20):  # the index in slices: no second n-sized int64 array
        hi = min(lo + (1 << 20), n)
        packed[lo:hi] |= np.arange(lo, hi, dtype=np.int64)
    packed.sort(kind="stable")  # timsort: the rounds emit long ascending runs
    packed &= (1 << index_bits) - 1
    return packed
