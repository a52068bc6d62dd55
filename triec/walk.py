"""The fast path: a level-synchronous, numpy-vectorized walk of the value trie.

For every value-trie node we need each token whose bytes, read from that node,
stay inside the trie. A *frontier entry* ``(node, start, v)`` says: reading the
bytes from trie node ``start`` down to ``node`` spells the path from the
vocabulary-trie root to vocabulary node ``v``. Processing one depth at a time,
every entry at a node moves to each child of the node by that child's byte
(one ``searchsorted`` for the whole level); entries that fall off the
vocabulary trie die; wherever ``v`` ends a token, the pair (``start``, token)
is allowed and leads to the child. Each node also starts one fresh entry at the
vocabulary root. Python-level work is per depth, not per node or per match.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from triec.automaton import VocabAutomaton
from triec.csr import concat_ranges
from triec.trie import Trie


@dataclass(frozen=True)
class Transitions:
    """Allowed (state, token) pairs as CSR, tokens ascending within each state."""

    offsets: np.ndarray  # int64 [S + 1]
    tokens: np.ndarray  # int32 [P]
    next_state: np.ndarray  # int32 [P]


def walk(
    trie: Trie, automaton: VocabAutomaton, vocab_size: int, progress: Callable[[int, int], None] | None = None
) -> Transitions:
    """Every allowed (state, token, next state) of the trie, sorted by (state, token).

    ``progress(done, total)``, if given, is called once per level (a display for
    long compiles; one call per level costs nothing measurable), then once after
    the pairs are collected and once when they are sorted into CSR. Units: half of
    ``total`` for the levels, in proportion to the trie states walked; a quarter
    each for collecting and sorting, which take about as long together.
    """
    depth, parent, byte = trie.depth, trie.parent, trie.byte
    max_depth = int(depth.max()) if depth.size else 0
    by_depth = np.argsort(depth.astype(np.uint16) if max_depth < 65536 else depth, kind="stable")
    bounds = np.searchsorted(depth[by_depth], np.arange(max_depth + 2), side="left").tolist()
    level_par = parent[by_depth].astype(np.int64)
    level_key = byte[by_depth].astype(np.int64)
    by_depth = by_depth.astype(np.int64)

    edge_keys, edge_child = automaton.edge_keys, automaton.edge_child  # sentinel-terminated
    has_child = automaton.has_child
    # A level's expanded frontier (carried entries + one fresh entry per node) can
    # be several times the trie's node count on wide, shallow sets: grow on demand.
    ramp = np.arange(trie.num_nodes + 1, dtype=np.int64)

    # Frontier, sorted by node; slot 0 is a dummy entry at the vocabulary root that
    # stands for the fresh token every node starts.
    f_node = np.zeros(0, dtype=np.int64)
    f_start = np.zeros(1, dtype=np.int64)
    f_v = np.zeros(1, dtype=np.int64)
    found_start: list[np.ndarray] = []
    found_v: list[np.ndarray] = []
    found_dest: list[np.ndarray] = []

    for d in range(1, max_depth + 1):
        lo_b, hi_b = bounds[d], bounds[d + 1]
        if lo_b == hi_b:
            break
        par = level_par[lo_b:hi_b]
        lo = np.searchsorted(f_node, par, side="left")
        per_child = np.searchsorted(f_node, par, side="right") - lo + 1  # carried entries + the fresh one
        ends = np.cumsum(per_child)
        total = int(ends[-1])
        if total > ramp.shape[0]:
            ramp = np.arange(2 * total, dtype=np.int64)
        child = np.repeat(ramp[: hi_b - lo_b], per_child)
        rank = ramp[:total] - np.repeat(ends - per_child, per_child)  # 0 = fresh entry
        slot = (lo[child] + rank) * (rank > 0)  # frontier slot + 1, or 0 for the fresh dummy
        keys = f_v[slot] * 256 + level_key[lo_b:hi_b][child]
        pos = np.searchsorted(edge_keys, keys)
        hit = np.nonzero(edge_keys[pos] == keys)[0]
        child, slot, v = child[hit], slot[hit], edge_child[pos[hit]]
        start = np.where(slot > 0, f_start[slot], par[child])
        dest = by_depth[lo_b:hi_b][child]
        found_start.append(start)
        found_v.append(v)
        found_dest.append(dest)

        keep = np.nonzero(has_child[v])[0]
        f_node = dest[keep]
        f_start = np.concatenate(([0], start[keep]))
        f_v = np.concatenate(([0], v[keep]))
        if progress is not None:
            progress(2 * hi_b, 4 * trie.num_nodes)

    if found_start:
        start = np.concatenate(found_start)
        v = np.concatenate(found_v)
        dest = np.concatenate(found_dest)
        key = automaton.node_key[v]
        ends_token = np.nonzero(key >= 0)[0]
        start, key, dest = start[ends_token], key[ends_token], dest[ends_token]
    else:
        start = key = dest = np.zeros(0, dtype=np.int64)
    if progress is not None:  # collecting took about half of the second share; the sort is the rest
        progress(3 * trie.num_nodes, 4 * trie.num_nodes)
    transitions = _to_csr(trie.num_nodes, automaton, vocab_size, start, key, dest)
    if progress is not None:
        progress(4 * trie.num_nodes, 4 * trie.num_nodes)
    return transitions


def _to_csr(
    num_states: int,
    automaton: VocabAutomaton,
    vocab_size: int,
    start: np.ndarray,
    key: np.ndarray,
    dest: np.ndarray,
) -> Transitions:
    key = key.astype(np.int64)
    if automaton.single_id:
        token = automaton.key_ids[automaton.key_offsets[key]].astype(np.int64)
    else:  # several ids share bytes: each of them is allowed and leads to the same node
        lo = automaton.key_offsets[key].astype(np.int64)
        counts = automaton.key_offsets[key + 1].astype(np.int64) - lo
        token = automaton.key_ids[concat_ranges(lo, counts)].astype(np.int64)
        start = np.repeat(start, counts)
        dest = np.repeat(dest, counts)
    order = _order_by(start * vocab_size + token, num_states * vocab_size)
    start = start[order]
    offsets = np.zeros(num_states + 1, dtype=np.int64)
    np.cumsum(np.bincount(start, minlength=num_states), out=offsets[1:])
    return Transitions(
        offsets=offsets,
        tokens=token[order].astype(np.int32),
        next_state=dest[order].astype(np.int32),
    )


def _order_by(keys: np.ndarray, key_bound: int) -> np.ndarray:
    """``argsort(keys)`` for unique keys, via a plain sort when the index fits beside the key.

    Sorting values is markedly faster than argsort in numpy (SIMD sorts), so the
    position is packed into the low bits and read back after sorting.
    """
    n = keys.shape[0]
    index_bits = max(1, (n - 1).bit_length())
    if n == 0 or (max(key_bound, 1) - 1).bit_length() + index_bits > 63:
        return np.argsort(keys)
    packed = np.sort((keys << index_bits) | np.arange(n, dtype=np.int64))
    return packed & ((1 << index_bits) - 1)
