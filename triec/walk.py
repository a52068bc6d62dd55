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

from dataclasses import dataclass

import numpy as np

from triec.automaton import VocabAutomaton
from triec.trie import Trie


@dataclass(frozen=True)
class Transitions:
    """Allowed (state, token) pairs as CSR, tokens ascending within each state."""

    offsets: np.ndarray  # int64 [S + 1]
    tokens: np.ndarray  # int32 [P]
    next_state: np.ndarray  # int32 [P]


def _ranges(lo: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(lo[i], lo[i] + counts[i])`` for all i, vectorized."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(counts)
    shift = np.repeat(lo - (ends - counts), counts)
    return shift + np.arange(total, dtype=np.int64)


def walk(trie: Trie, automaton: VocabAutomaton, vocab_size: int) -> Transitions:
    """Every allowed (state, token, next state) of the trie, sorted by (state, token)."""
    depth, parent, byte = trie.depth, trie.parent, trie.byte
    max_depth = int(depth.max()) if depth.size else 0
    by_depth = np.argsort(depth.astype(np.uint16) if max_depth < 65536 else depth, kind="stable")
    bounds = np.searchsorted(depth[by_depth], np.arange(max_depth + 2), side="left")

    edge_keys, edge_child = automaton.edge_keys, automaton.edge_child
    n_edges = edge_keys.shape[0]
    root_child, has_child, node_key = automaton.root_child, automaton.has_child, automaton.node_key

    f_node = np.zeros(0, dtype=np.int64)  # frontier, sorted by node
    f_start = np.zeros(0, dtype=np.int64)
    f_v = np.zeros(0, dtype=np.int64)
    out_start: list[np.ndarray] = []
    out_key: list[np.ndarray] = []
    out_dest: list[np.ndarray] = []

    for d in range(1, max_depth + 1):
        level = by_depth[bounds[d] : bounds[d + 1]].astype(np.int64)
        if level.size == 0:
            break
        par = parent[level].astype(np.int64)
        lvl_byte = byte[level]

        # fresh entries: each parent starts a token at the vocabulary root
        v_fresh = root_child[lvl_byte].astype(np.int64)
        fresh = np.nonzero(v_fresh >= 0)[0]
        idx_parts = [fresh]
        start_parts = [par[fresh]]
        v_parts = [v_fresh[fresh]]

        if f_node.size:
            lo = np.searchsorted(f_node, par, side="left")
            counts = np.searchsorted(f_node, par, side="right") - lo
            entry = _ranges(lo, counts)
            if entry.size:
                child_idx = np.repeat(np.arange(level.size, dtype=np.int64), counts)
                keys = f_v[entry] * 256 + lvl_byte[child_idx]
                pos = np.searchsorted(edge_keys, keys)
                pos[pos >= n_edges] = 0
                hit = edge_keys[pos] == keys
                idx_parts.append(child_idx[hit])
                start_parts.append(f_start[entry[hit]])
                v_parts.append(edge_child[pos[hit]].astype(np.int64))

        idx = np.concatenate(idx_parts)
        start = np.concatenate(start_parts)
        v = np.concatenate(v_parts)

        key = node_key[v]
        ends = key >= 0
        if ends.any():
            out_start.append(start[ends])
            out_key.append(key[ends])
            out_dest.append(level[idx[ends]])

        keep = has_child[v]
        idx, start, v = idx[keep], start[keep], v[keep]
        order = np.argsort(idx, kind="stable")
        f_node = level[idx[order]]
        f_start = start[order]
        f_v = v[order]

    return _to_csr(trie.num_nodes, automaton, vocab_size, out_start, out_key, out_dest)


def _to_csr(
    num_states: int,
    automaton: VocabAutomaton,
    vocab_size: int,
    out_start: list[np.ndarray],
    out_key: list[np.ndarray],
    out_dest: list[np.ndarray],
) -> Transitions:
    if out_start:
        start = np.concatenate(out_start)
        key = np.concatenate(out_key).astype(np.int64)
        dest = np.concatenate(out_dest)
    else:
        start = key = dest = np.zeros(0, dtype=np.int64)
    if automaton.single_id:
        token = automaton.key_ids[automaton.key_offsets[key]].astype(np.int64)
    else:  # several ids share bytes: each of them is allowed and leads to the same node
        lo = automaton.key_offsets[key].astype(np.int64)
        counts = automaton.key_offsets[key + 1].astype(np.int64) - lo
        token = automaton.key_ids[_ranges(lo, counts)].astype(np.int64)
        start = np.repeat(start, counts)
        dest = np.repeat(dest, counts)
    order = np.argsort(start * vocab_size + token)
    start = start[order]
    offsets = np.zeros(num_states + 1, dtype=np.int64)
    np.cumsum(np.bincount(start, minlength=num_states), out=offsets[1:])
    return Transitions(
        offsets=offsets,
        tokens=token[order].astype(np.int32),
        next_state=dest[order].astype(np.int32),
    )
