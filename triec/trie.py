"""Byte tries built from sorted keys with numpy alone.

Both tries triec needs (the values' trie and the vocabulary's trie) are built
here from *sorted, unique* byte strings. Sorting makes the trie implicit: key
``i`` shares ``lcp[i]`` bytes with key ``i - 1`` and creates exactly
``len(key) - lcp[i]`` new nodes, so nodes numbered in creation order are
numbered in preorder (children in byte order) and every per-node array falls
out of cumulative sums. No Python loop runs per key or per node.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_LCP_BLOCK = 16  # bytes compared per vectorized round when computing LCPs
_NODE_BLOCK = 1 << 20  # nodes whose depth and byte are computed per vectorized pass


@dataclass(frozen=True)
class Trie:
    """A preorder-numbered byte trie; node 0 is the root (the empty prefix)."""

    data: np.ndarray  # uint8: the keys' bytes (in sorted order unless built from a SortedKeys)
    key_offsets: (
        np.ndarray
    )  # int64 [K + 1]: cumulative key lengths; key i has key_offsets[i + 1] - key_offsets[i] bytes
    lcp: np.ndarray  # int64 [K]: bytes key i shares with key i - 1 (0 for key 0)
    terminal: np.ndarray  # int64 [K]: node where key i ends, strictly increasing
    parent: np.ndarray  # int32 [N]: parent node (-1 for the root)
    byte: np.ndarray  # uint8 [N]: byte on the edge into the node (0 for the root)
    depth: np.ndarray  # int32 [N]: prefix length of the node
    key_starts: np.ndarray  # int64 [K]: key i starts at data[key_starts[i]]

    @property
    def num_nodes(self) -> int:
        return int(self.parent.shape[0])

    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The trie as sorted edges for vectorized walks: (edge keys ``parent * 256 + byte`` ascending, then an int64
        max sentinel so a searchsorted result indexes without clipping; the child of each edge, 0 after the
        sentinel; the key ending at each node or -1 (int64); whether each node has a child)."""
        n = self.num_nodes
        node_key = np.full(n, -1, dtype=np.int64)
        node_key[self.terminal] = np.arange(self.terminal.shape[0], dtype=np.int64)
        has_child = np.zeros(n, dtype=bool)
        has_child[self.parent[1:]] = True
        edge = self.parent[1:].astype(np.int64) * 256 + self.byte[1:]
        order = np.argsort(edge, kind="stable")
        edge_keys = np.append(edge[order], np.iinfo(np.int64).max)
        edge_child = np.append(order + 1, 0).astype(np.int64)
        return edge_keys, edge_child, node_key, has_child

    @property
    def num_keys(self) -> int:
        return int(self.terminal.shape[0])


def join_keys(keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate keys into one uint8 buffer plus int64 offsets."""
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    offsets = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.frombuffer(b"".join(keys), dtype=np.uint8)
    return data, offsets


def longest_common_prefixes(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """``lcp[i]`` = length of the common prefix of key ``i - 1`` and key ``i``.

    Compares ``_LCP_BLOCK`` bytes per round for every pair still equal so far,
    reading each block as one row of a sliding-window view (one contiguous copy
    per key), so the number of numpy rounds is ``max(lcp) / _LCP_BLOCK``, not K.
    """
    k = offsets.shape[0] - 1
    lcp = np.zeros(k, dtype=np.int64)
    if k < 2:
        return lcp
    padded = np.concatenate([data, np.zeros(_LCP_BLOCK, dtype=np.uint8)])
    window = np.lib.stride_tricks.sliding_window_view(padded, _LCP_BLOCK)
    starts = offsets[:-1]
    lengths = np.diff(offsets)
    limit = np.minimum(lengths[:-1], lengths[1:])  # pair j compares key j and key j + 1
    span = np.arange(_LCP_BLOCK, dtype=np.int64)
    rows = window[starts]  # first block of every key, gathered once
    same = (rows[:-1] == rows[1:]) & (span < limit[:, None])
    full = same.all(axis=1)
    done = np.where(full, _LCP_BLOCK, np.argmin(same, axis=1)).astype(np.int64)
    active = np.nonzero(full & (limit > _LCP_BLOCK))[0]
    while active.size:
        pos = done[active]
        a = window[starts[active] + pos]
        b = window[starts[active + 1] + pos]
        same = (a == b) & (span < (limit[active] - pos)[:, None])
        full = same.all(axis=1)
        done[active] += np.where(full, _LCP_BLOCK, np.argmin(same, axis=1))
        active = active[full & (done[active] < limit[active])]
    lcp[1:] = np.minimum(done, limit)
    return lcp


def build_trie(keys: list[bytes]) -> Trie:
    """Build the trie of ``keys``, which must be sorted and unique (``b""`` allowed)."""
    data, offsets = join_keys(keys)
    return build_trie_from_buffer(data, offsets)


def build_trie_from_buffer(
    data: np.ndarray, offsets: np.ndarray, lcp: np.ndarray | None = None, starts: np.ndarray | None = None
) -> Trie:
    """The trie of sorted, unique keys: ``data[offsets[i]:offsets[i + 1]]``, or, given ``starts``
    (and then ``lcp``), ``data[starts[i]:starts[i] + offsets[i + 1] - offsets[i]]``."""
    k = offsets.shape[0] - 1
    lengths = np.diff(offsets)
    if starts is None:
        starts = offsets[:-1]
    if lcp is None:
        lcp = longest_common_prefixes(data, offsets)
    created = lengths - lcp  # new nodes per key (0 only for a leading empty key)
    first_new = np.ones(k, dtype=np.int64)
    if k > 1:
        np.cumsum(created[:-1], out=first_new[1:])
        first_new[1:] += 1
    terminal = first_new + created - 1
    num_nodes = 1 + int(created.sum())

    # Within the run of nodes a key creates, depth and byte position go up by one per node;
    # at the first node of each run they jump. Both are cumulative sums of per-node steps,
    # filled block by block: a few MB of temporaries whatever N, and no per-node owner array.
    depth = np.zeros(num_nodes, dtype=np.int32)
    byte = np.zeros(num_nodes, dtype=np.uint8)
    skip = 1 if k and created[0] == 0 else 0  # only a leading empty key creates no node
    fn, lc, st, ln = first_new[skip:], lcp[skip:], starts[skip:], lengths[skip:]
    for lo in range(1, num_nodes, _NODE_BLOCK):
        hi = min(lo + _NODE_BLOCK, num_nodes)
        a = int(np.searchsorted(fn, lo, side="right"))  # run a - 1 holds node lo; runs a .. b - 1 start inside
        b = int(np.searchsorted(fn, hi, side="left"))
        at = fn[a:b] - lo
        d = np.ones(hi - lo, dtype=np.int64)
        d[0] = lc[a - 1] + 1 + (lo - fn[a - 1])
        d[at] = lc[a:b] + 1 - ln[a - 1 : b - 1]  # the previous node ends the previous key
        np.cumsum(d, out=d)
        depth[lo:hi] = d
        p = np.zeros(hi - lo, dtype=np.int64)  # the start of the node's key, less one
        p[0] = st[a - 1] - 1
        p[at] = st[a:b] - st[a - 1 : b - 1]
        np.cumsum(p, out=p)
        p += d
        byte[lo:hi] = data[p]
        del d, p, at
    del lengths, fn, lc, st, ln

    parent = np.arange(
        -1, num_nodes - 1, dtype=np.int32
    )  # root -1; within a key's run of new nodes, the parent is the previous node
    _link_branch_points(parent, first_new, created, lcp)
    return Trie(
        data=data,
        key_offsets=offsets,
        lcp=lcp,
        terminal=terminal,
        parent=parent,
        byte=byte,
        depth=depth,
        key_starts=starts,
    )


def _link_branch_points(parent: np.ndarray, first_new: np.ndarray, created: np.ndarray, lcp: np.ndarray) -> None:
    """Set the parent of the first node each key creates.

    That parent is the node at depth ``lcp[i]`` on key ``i``'s path, created by
    the last key ``m < i`` with ``lcp[m] < lcp[i]`` (its previous smaller LCP):
    node ``first_new[m] + lcp[i] - lcp[m] - 1``. Previous smaller elements are
    found for all keys at once by pointer jumping (``m = prev[m]`` while
    ``lcp[m] >= lcp[i]``, all keys in a round), in O(K) memory and a handful of
    rounds, instead of sorting all N nodes by depth.
    """
    at_root = np.nonzero((created > 0) & (lcp == 0))[0]
    parent[first_new[at_root]] = 0
    todo = np.nonzero((created > 0) & (lcp > 0))[0]
    if todo.size == 0:
        return
    prev = np.arange(
        -1, lcp.shape[0] - 1, dtype=np.int32 if lcp.shape[0] < 2**31 else np.int64
    )  # prev[i] < i; every key between has lcp >= lcp[i]
    branching = todo
    while todo.size:
        todo = todo[lcp[prev[todo]] >= lcp[todo]]
        prev[todo] = prev[prev[todo]]
    m = prev[branching]
    parent[first_new[branching]] = first_new[m] + (lcp[branching] - lcp[m] - 1)
