"""Tail states: the states below which one value alone remains, served from the value's bytes (numpy only).

A state is a *tail* of value i when its depth exceeds both ``value_lcp[i]`` and ``value_lcp[i + 1]``: no other
value passes through it. Its row is a function of the rest of value i and the vocabulary alone: every content
token whose bytes are a prefix of the rest, each leading ``len(bytes)`` states further along the same value (a
value's created states are numbered consecutively, so that is ``state + len``), and EOS where the rest is empty.
Storing those rows as pairs is what made a set of titles 17 times its text; the tail layout (format version 4,
docs/format.md) stores only the branching rows and serves tails here, from:

* ``state_byte`` (the rest of value i after tail state s is ``state_byte[s + 1 .. value_state[i]]``), and
* a :class:`TailIndex`: every content token's bytes, sorted and distinct, with the ids spelling each.

State ids are the trie's preorder ids, as in every other layout: a tail table and the same set compiled in the
present layout number their states alike and answer alike, state by state. Which states are tails is derived from
``value_state`` and ``value_lcp`` (:class:`TailLayout`), never stored: O(K) at load.

A canonical table's tails (:mod:`triec.compiler.canonical`) follow the encoder, not the bytes: they read each
value's tail tokens instead of the token index's prefix rows (:class:`CanonicalTailLayout`, the same tails and
stored rows).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from triec._arrays import concat_ranges, find_sorted
from triec.trie import build_trie_from_buffer

_NO_TOKENS = np.zeros(0, dtype=np.int32)
_NO_TOKENS.flags.writeable = False


def _counts(offsets: np.ndarray) -> np.ndarray:
    """Entries per row of CSR ``offsets``, int64."""
    wide = np.asarray(offsets, dtype=np.int64)
    out: np.ndarray = wide[1:] - wide[:-1]
    return out


@dataclass
class TailIndex:
    """Every content token's bytes, sorted and distinct (``key_bytes`` cut at ``key_offsets``), and the ids that
    spell each one (``ids[id_offsets[d]:id_offsets[d + 1]]``, ascending). EOS ids and ids without bytes are absent."""

    key_offsets: np.ndarray  # uint32 [D + 1]
    key_bytes: np.ndarray  # uint8 [key_offsets[D]]
    id_offsets: np.ndarray  # uint32 [D + 1]
    ids: np.ndarray  # int32 [T]
    _ready: bool = field(default=False, repr=False)
    _walk: dict[bytes, int] = field(default_factory=dict, repr=False)
    _row_ids: np.ndarray = field(default_factory=lambda: _NO_TOKENS, repr=False)
    _row_lengths: np.ndarray = field(default_factory=lambda: _NO_TOKENS, repr=False)
    _keys: list[bytes] = field(default_factory=list, repr=False)
    _id_key: np.ndarray | None = field(default=None, repr=False)
    _max_len: int = field(default=0, repr=False)

    @classmethod
    def of(cls, token_bytes: Sequence[bytes], eos_token_ids: Iterable[int] = ()) -> TailIndex:
        """The index of a decoded vocabulary (``token_bytes[id]``; EOS ids and empty tokens are not content)."""
        eos = set(eos_token_ids)
        ids = [i for i, b in enumerate(token_bytes) if b and i not in eos]
        ids.sort(key=token_bytes.__getitem__)  # stable: equal bytes keep ascending ids
        keys: list[bytes] = []
        id_offsets = [0]
        for n, i in enumerate(ids):
            b = token_bytes[i]
            if not keys or keys[-1] != b:
                if keys:
                    id_offsets.append(n)
                keys.append(b)
        id_offsets.append(len(ids))
        if not keys:
            id_offsets = [0]
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
        key_offsets = np.zeros(len(keys) + 1, dtype=np.uint32)
        np.cumsum(lengths, out=key_offsets[1:], dtype=np.uint32)
        return cls(
            key_offsets=key_offsets,
            key_bytes=np.frombuffer(b"".join(keys), dtype=np.uint8).copy(),
            id_offsets=np.asarray(id_offsets, dtype=np.uint32),
            ids=np.asarray(ids, dtype=np.int32),
        )

    @property
    def num_keys(self) -> int:
        return int(self.key_offsets.shape[0]) - 1

    @property
    def nbytes(self) -> int:
        return int(self.key_offsets.nbytes + self.key_bytes.nbytes + self.id_offsets.nbytes + self.ids.nbytes)

    def keys(self) -> list[bytes]:
        raw = self.key_bytes.tobytes()
        ends = self.key_offsets.tolist()
        return [raw[a:b] for a, b in zip(ends[:-1], ends[1:], strict=True)]

    def lookup(self) -> dict[bytes, tuple[int, ...]]:
        """Token bytes -> the ids spelling them (a whole-index view for checks; the serving path reads
        :meth:`match`)."""
        offs = self.id_offsets.tolist()
        ids = self.ids.tolist()
        return {k: tuple(ids[offs[d] : offs[d + 1]]) for d, k in enumerate(self.keys())}

    def prepare(self) -> None:
        """Build what :meth:`match` and a tail's step read, once, on first use: every token's bytes, the key of
        each id, and the prefix rows (about 0.2 s and 40 MB for qwen2's 150,000 tokens)."""
        if self._ready:
            return
        keys = self.keys()
        self._max_len = max(map(len, keys), default=0)
        self._keys = keys
        top = int(self.ids.max()) + 1 if self.ids.shape[0] else 0
        id_key = np.full(top, -1, dtype=np.int32)
        id_key[self.ids] = np.repeat(np.arange(len(keys), dtype=np.int32), _counts(self.id_offsets))
        self._id_key = id_key
        self._walk, self._row_ids, self._row_lengths = _prefix_rows(self)
        self._ready = True

    def match(self, rest: bytes) -> tuple[np.ndarray, np.ndarray]:
        """(ids ascending, their byte lengths), read-only int32 views, of every token whose bytes are a non-empty
        prefix of ``rest``."""
        lo, hi = self.span(rest)
        return self._row_ids[lo:hi], self._row_lengths[lo:hi]

    def span(self, rest: bytes) -> tuple[int, int]:
        """Where :meth:`match`'s row lies in the prefix rows: one dict lookup per byte down to the longest prefix
        of ``rest`` that begins a token, whose row is stored whole (O(longest matching token), no sort)."""
        if not self._ready:
            self.prepare()
        get = self._walk.get
        found = 0
        for n in range(1, len(rest) + 1):
            hit = get(rest[:n])
            if hit is None:
                break
            found = hit
            if not hit & 1:  # no longer token begins with these bytes
                break
        return found >> 32, (found >> 1) & 0x7FFFFFFF

    def automaton(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The token trie for vectorized walks: (edge keys sorted with a sentinel, edge child, key index per node
        or -1, has child, root child per byte)."""
        trie = build_trie_from_buffer(np.ascontiguousarray(self.key_bytes), self.key_offsets.astype(np.int64))
        return (*trie.edges(), np.zeros(0))


def _prefix_rows(index: TailIndex) -> tuple[dict[bytes, int], np.ndarray, np.ndarray]:
    """For every prefix p of a token: the ids of every token that is a prefix of p (p included), ascending, with
    their byte lengths, stored one row after another; and p -> ``lo << 32 | hi << 1 | (a longer token starts
    with p)``, where ``lo:hi`` is p's row. A tail's row is the row of the longest prefix of its rest that begins a
    token. Built level by level over the token trie (numpy; one Python pass to name the prefixes)."""
    trie = build_trie_from_buffer(np.ascontiguousarray(index.key_bytes), index.key_offsets.astype(np.int64))
    n = trie.num_nodes
    own_lo = np.zeros(n, dtype=np.int64)
    own = np.zeros(n, dtype=np.int64)
    own_lo[trie.terminal] = index.id_offsets[:-1]
    own[trie.terminal] = _counts(index.id_offsets)
    depth = trie.depth.astype(np.int64)
    parent = trie.parent.astype(np.int64)
    by_depth = np.argsort(depth, kind="stable")  # ascending nodes within a depth
    cuts = np.searchsorted(depth[by_depth], np.arange(int(depth.max(initial=0)) + 2))
    count = own.copy()  # a node's row length: its parent's and its own
    for d in range(1, cuts.shape[0] - 1):
        at = by_depth[cuts[d] : cuts[d + 1]]
        count[at] += count[parent[at]]
    row_lo = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(count, out=row_lo[1:])
    ids = np.zeros(int(row_lo[-1]), dtype=np.int32)
    lengths = np.zeros(int(row_lo[-1]), dtype=np.int32)
    for d in range(1, cuts.shape[0] - 1):
        at = by_depth[cuts[d] : cuts[d + 1]]
        up = parent[at]
        inherited = concat_ranges(row_lo[up], count[up])
        mine = concat_ranges(own_lo[at], own[at])
        node = np.concatenate([np.repeat(at, count[up]), np.repeat(at, own[at])])
        tok = np.concatenate([ids[inherited], index.ids[mine]])
        length = np.concatenate([lengths[inherited], np.full(mine.shape[0], d, dtype=np.int32)])
        order = np.lexsort((tok, node))
        where = concat_ranges(row_lo[at], count[at])
        ids[where] = tok[order]
        lengths[where] = length[order]
    has_child = np.zeros(n, dtype=bool)
    has_child[parent[1:]] = True
    packed = (row_lo[:-1] << 32) | (row_lo[1:] << 1) | has_child
    # each node's bytes: the first bytes of the token whose run of created nodes holds it (preorder numbering)
    owner = np.searchsorted(trie.terminal, np.arange(1, n))
    raw = index.key_bytes.tobytes()
    starts = (trie.key_starts[owner]).tolist()
    names = [raw[a : a + m] for a, m in zip(starts, depth[1:].tolist(), strict=True)]
    walk = dict(zip(names, packed[1:].tolist(), strict=True))
    ids.flags.writeable = False
    lengths.flags.writeable = False
    return walk, ids, lengths


class TailLayout:
    """Which states of a table are tails, the CSR row of each branching state, and the rows of tail states.

    Derived from ``value_state``, ``value_lcp`` and ``state_byte`` (checked in range before: the caller's
    :func:`~triec.runtime.validate.check_indices` rules 9 and 10) in O(K).
    """

    def __init__(
        self,
        *,
        offsets: np.ndarray,
        pairs: np.ndarray,
        far_pairs: np.ndarray,
        far_next: np.ndarray,
        value_state: np.ndarray,
        value_lcp: np.ndarray,
        state_byte: np.ndarray,
        index: TailIndex,
        vocab_size: int,
    ) -> None:
        self.offsets = offsets
        self.pairs = pairs
        self.far_pairs = far_pairs
        self.far_next = far_next
        self.vocab_size = int(vocab_size)
        self.token_bits = token_bits(self.vocab_size)
        self.token_mask = np.uint32((1 << self.token_bits) - 1)
        self._decoded: tuple[np.ndarray, np.ndarray] | None = None
        self._row_states: np.ndarray | None = None
        self._automaton: tuple[np.ndarray, ...] | None = None
        self.value_state = value_state
        self.state_byte = state_byte
        self._bytes = np.ascontiguousarray(state_byte, dtype=np.uint8).data  # slices cheaper than numpy's
        self.index = index
        # int32 throughout (states < 2**31): one pass per line over K values, the only O(K) work of a load
        ends = np.asarray(value_state, dtype=np.int32)
        lcp = np.asarray(value_lcp, dtype=np.int32)
        k = ends.shape[0]
        created = np.empty(k, dtype=np.int32)
        if k:
            created[0] = ends[0]
            np.subtract(ends[1:], ends[:-1], out=created[1:])
        np.maximum(created, 0, out=created)  # corrupt values (refused by the caller's checks) stay in range
        shared = lcp.copy()
        if k > 1:
            np.maximum(shared[:-1], lcp[1:], out=shared[:-1])
        tail_len = lcp + created
        tail_len -= shared
        np.maximum(tail_len, 0, out=tail_len)
        np.minimum(tail_len, created, out=tail_len)
        self.tail_len = tail_len
        tail_first = ends - tail_len
        tail_first += 1
        self.tail_first = tail_first
        before = np.zeros(k, dtype=np.int64 if int(ends[-1] if k else 0) >= 2**31 - 1 else np.int32)
        if k > 1:
            np.cumsum(tail_len[:-1], out=before[1:], dtype=before.dtype)
        self.tails_before = before
        # the per-step lookups read these through memoryviews: a bisect and items as Python ints cost half what
        # numpy's scalar searchsorted and indexing do on a single state
        self._ends = np.ascontiguousarray(value_state).data
        self._first = tail_first.data
        self._before = before.data
        self._offs = np.ascontiguousarray(offsets).data
        self.num_tails = int(tail_len.sum(dtype=np.int64))
        self.num_states = int(state_byte.shape[0])
        self.num_branch = self.num_states - self.num_tails

    # ------------------------------------------------------------- the stored rows

    @property
    def num_pairs(self) -> int:
        return int(self.pairs.shape[0])

    def row_states(self) -> np.ndarray:
        """The state of each stored row (the branching states ascending; int64 [B]), built once."""
        if self._row_states is None:
            self._row_states = self.branch_states()
        return self._row_states

    def decode(self, pos: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(token, next state) int64 of stored pairs ``pos`` whose rows' states are ``owner``."""
        packed = self.pairs[pos]
        tokens = (packed & self.token_mask).astype(np.int64)
        delta = (packed >> np.uint32(self.token_bits)).astype(np.int64)
        nxt = owner + delta
        far = np.flatnonzero(delta == 0)
        if far.size:
            at = np.minimum(np.searchsorted(self.far_pairs, pos[far]), max(self.far_pairs.shape[0] - 1, 0))
            nxt[far] = self.far_next[at] if self.far_next.shape[0] else 0
        return tokens, nxt

    def _stored(self) -> tuple[np.ndarray, np.ndarray]:
        if self._decoded is None:
            owner = np.repeat(self.row_states(), _counts(self.offsets))
            tok, nxt = self.decode(np.arange(self.num_pairs, dtype=np.int64), owner)
            self._decoded = (tok.astype(np.int32), nxt.astype(np.int32))
        return self._decoded

    @property
    def tokens(self) -> np.ndarray:
        """Every stored pair's token (int32 [P]; decoded once, O(P): whole-table checks and the expansion)."""
        return self._stored()[0]

    @property
    def next(self) -> np.ndarray:
        """Every stored pair's next state (int32 [P]; decoded once with :attr:`tokens`)."""
        return self._stored()[1]

    # ------------------------------------------------------------- classifying

    def branch_rows(self, states: np.ndarray) -> np.ndarray:
        """Each state's branching row, or -1 for a tail state (states known in range; int64)."""
        v = self.value_state.searchsorted(states.astype(self.value_state.dtype))  # in its dtype: no O(K) cast
        row: np.ndarray = states - self.tails_before[v]
        row[states >= self.tail_first[v]] = -1
        return row

    def branch_row(self, state: int) -> int:
        """One state's branching row, or -1 for a tail state (in range)."""
        v = find_sorted(self.value_state, state)
        if state >= int(self.tail_first[v]):
            return -1
        return state - int(self.tails_before[v])

    def branch_states(self, first_value: int = 0) -> np.ndarray:
        """The branching states, ascending (int64 [B]): per value, the states it creates before its tail (state 0
        before value 0's); from value ``first_value`` on."""
        ends = self.value_state[max(first_value - 1, 0) :].astype(np.int64)
        start = ends + 1
        if first_value == 0:
            start = np.concatenate([[0], start[: ends.shape[0] - 1]]) if ends.shape[0] else start
        else:
            start = start[:-1]
        return concat_ranges(start, np.maximum(self.tail_first[first_value:] - start, 0))

    def tail_states(self) -> tuple[np.ndarray, np.ndarray]:
        """(every tail state ascending, the last state of its value) as int64."""
        counts = self.tail_len.astype(np.int64)
        states = concat_ranges(self.tail_first, counts)
        ends = np.repeat(self.value_state.astype(np.int64), counts)
        return states, ends

    # ------------------------------------------------------------- rows

    def row(self, state: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """(content tokens ascending, next states) of tail state ``state`` of the value ending at ``end``."""
        index = self.index
        if not index._ready:
            index.prepare()
        m = min(end - state, index._max_len)  # a token match never runs past the value nor past the longest token
        if m <= 0:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
        ids, lengths = index.match(self.state_byte[state + 1 : state + 1 + m].tobytes())
        return ids, lengths + np.int32(state)

    def allowed_row(self, state: int) -> tuple[np.ndarray, bool]:
        """(content tokens ascending as int32, whether EOS is allowed too) of any state in range: the serving
        path of ``allowed``: one bisect of the values, then a stored row's slice or a tail's prefix row (about
        3 us on a tail here, most of it Python's per-call cost)."""
        ends = self._ends
        v = bisect_left(ends, state)
        end = ends[v]
        if state >= self._first[v]:
            index = self.index
            if not index._ready:
                index.prepare()
            lo, hi = index.span(self._bytes[state + 1 : min(end, state + index._max_len) + 1].tobytes())
            return index._row_ids[lo:hi], state == end
        r = state - self._before[v]
        return (self.pairs[self._offs[r] : self._offs[r + 1]] & self.token_mask).view(np.int32), state == end

    def row_ids(self, state: int) -> tuple[list[int], bool]:
        """:meth:`allowed_row` as a Python list (a writer's single row: item writes, no array)."""
        ids, accepting = self.allowed_row(state)
        return ids.tolist(), accepting

    def step(self, state: int, token: int) -> int:
        """The state content token ``token`` (>= 0) leads to from ``state`` (in range), or -1 where it is not
        allowed: a tail compares the token's bytes with the rest of its value, a stored row is searched."""
        v = bisect_left(self._ends, state)
        if state >= self._first[v]:
            index = self.index
            if not index._ready:
                index.prepare()
            id_key = index._id_key
            assert id_key is not None
            d = int(id_key[token]) if token < id_key.shape[0] else -1
            if d < 0:
                return -1
            key = index._keys[d]
            n = len(key)
            if state + n > self._ends[v] or self._bytes[state + 1 : state + 1 + n] != key:
                return -1
            return state + n
        r = state - self._before[v]
        lo, hi = self._offs[r], self._offs[r + 1]
        packed = self.pairs[lo:hi]
        tokens = packed & self.token_mask
        i = int(tokens.searchsorted(np.uint32(token)))
        if i == hi - lo or int(tokens[i]) != token:
            return -1
        delta = int(packed[i]) >> self.token_bits
        if delta:
            return state + delta
        at = min(find_sorted(self.far_pairs, lo + i), self.far_pairs.shape[0] - 1)
        return int(self.far_next[at])

    def content(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """(content tokens ascending, next states) of any state in range: a CSR slice or a tail row."""
        v = find_sorted(self.value_state, state)
        if state >= int(self.tail_first[v]):
            return self.row(state, int(self.value_state[v]))
        r = state - int(self.tails_before[v])
        lo, hi = int(self.offsets[r]), int(self.offsets[r + 1])
        packed = self.pairs[lo:hi]
        tokens = (packed & self.token_mask).astype(np.int32)
        delta = packed >> np.uint32(self.token_bits)
        nxt = delta.astype(np.int32)
        nxt += np.int32(state)
        if hi > lo and not delta.all():  # a far target (delta 0): its own table
            for k in np.flatnonzero(delta == 0).tolist():
                at = min(find_sorted(self.far_pairs, lo + k), self.far_pairs.shape[0] - 1)
                nxt[k] = self.far_next[at]
        return tokens, nxt

    def content_pairs(self, states: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row index, token, next state) int64 of a batch of states in range, row by row, tokens ascending."""
        states = np.asarray(states, dtype=np.int64)
        n = states.shape[0]
        v = self.value_state.searchsorted(states.astype(self.value_state.dtype))  # in its dtype: no O(K) cast
        tail = states >= self.tail_first[v]
        b_at = np.flatnonzero(~tail)
        r = states[b_at] - self.tails_before[v[b_at]]
        lo = self.offsets[r].astype(np.int64)
        counts = self.offsets[r + 1].astype(np.int64) - lo
        pos = concat_ranges(lo, counts)
        b_tok, b_next = self.decode(pos, np.repeat(states[b_at], counts))
        rows = [np.repeat(b_at, counts)]
        toks = [b_tok]
        nxts = [b_next]
        t_at = np.flatnonzero(tail)
        if t_at.size:
            ends = self.value_state[v[t_at]].tolist()
            for i, s, e in zip(t_at.tolist(), states[t_at].tolist(), ends, strict=True):
                tt, tn = self.row(s, e)
                rows.append(np.full(tt.shape[0], i, dtype=np.int64))
                toks.append(tt.astype(np.int64))
                nxts.append(tn.astype(np.int64))
        row, tok, nxt = np.concatenate(rows), np.concatenate(toks), np.concatenate(nxts)
        if t_at.size and n > 1:
            order = np.argsort(row, kind="stable")
            row, tok, nxt = row[order], tok[order], nxt[order]
        return row, tok, nxt

    def end_of(self, state: int) -> int:
        """The last state of the value a tail state lies on."""
        return int(self.value_state[find_sorted(self.value_state, state)])

    def expand(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every tail state's pairs at once: (state, token id, next state) int64, sorted by (state, token): what the
        full layout's arrays hold for these states (O(tail pairs) memory: the device upload, whole-table checks)."""
        states, ends = self.tail_states()
        return self.expand_states(states, ends)

    def tail_counts(self, chunk: int = 1 << 21) -> np.ndarray:
        """Content tokens of every tail state (in :meth:`tail_states` order), walked ``chunk`` states at a time."""
        states, ends = self.tail_states()
        out = np.zeros(states.shape[0], dtype=np.int64)
        for lo in range(0, states.shape[0], chunk):
            s, _, _ = self.expand_states(states[lo : lo + chunk], ends[lo : lo + chunk])
            out[lo : lo + chunk] = np.bincount(
                np.searchsorted(states[lo : lo + chunk], s), minlength=min(chunk, states.shape[0] - lo)
            )
        return out

    def expand_states(self, states: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pairs of tail states ``states`` (ascending; ``ends`` the last state of each one's value), as
        :meth:`expand`: a vectorized walk of the token trie along each tail, one byte per round."""
        if self._automaton is None:
            self._automaton = self.index.automaton()
        edge_keys, edge_child, node_key, has_child, _ = self._automaton
        inside = states < ends  # a value's last state has no rest
        start, end = states[inside], ends[inside]
        node = np.zeros(start.shape[0], dtype=np.int64)
        found_s: list[np.ndarray] = []
        found_k: list[np.ndarray] = []
        found_n: list[np.ndarray] = []
        depth = 1
        sb = self.state_byte
        while start.shape[0]:
            keys = node * 256 + sb[start + depth]
            at = np.searchsorted(edge_keys, keys)
            hit = edge_keys[at] == keys
            start, end, node = start[hit], end[hit], edge_child[at[hit]]
            k = node_key[node]
            ends_here = k >= 0
            found_s.append(start[ends_here])
            found_k.append(k[ends_here])
            found_n.append(start[ends_here] + depth)
            go = has_child[node] & (start + depth < end)
            start, end, node = start[go], end[go], node[go]
            depth += 1
        s = np.concatenate(found_s) if found_s else np.zeros(0, dtype=np.int64)
        k = np.concatenate(found_k) if found_k else np.zeros(0, dtype=np.int64)
        nx = np.concatenate(found_n) if found_n else np.zeros(0, dtype=np.int64)
        lo = self.index.id_offsets[k].astype(np.int64)
        counts = self.index.id_offsets[k + 1].astype(np.int64) - lo
        tok = self.index.ids[concat_ranges(lo, counts)].astype(np.int64)
        s, nx = np.repeat(s, counts), np.repeat(nx, counts)
        order = np.lexsort((tok, s))
        return s[order], tok[order], nx[order]


class CanonicalTailLayout(TailLayout):
    """The tail layout of a canonical table (:mod:`triec.compiler.canonical`): a tail state allows the next token of
    its value's encoder tokenization where it lies at a token boundary, nothing inside a token's byte chain.

    Which states are tails, and the stored rows of the branching ones, are :class:`TailLayout`'s. What a tail row
    reads instead of the token trie: ``tail_tokens[tail_token_offsets[i]:tail_token_offsets[i + 1]]``, value i's
    canonical tokens that spell its tail bytes (``state_byte[tail_first[i] .. value_state[i]]``; none where value i
    has no tail). The first leaves the branching state the tail hangs from (its row is stored); token j > first
    is allowed at the state where token j - 1 ends, leading to where token j ends: ``ends`` (int32 [T]), each
    token's last state, derived on first use from the tokens' byte lengths in the token index (O(T)).
    """

    def __init__(self, *, tail_tokens: np.ndarray, tail_token_offsets: np.ndarray, **fields: Any) -> None:
        super().__init__(**fields)
        self.tail_tokens = tail_tokens
        self.tail_token_offsets = tail_token_offsets
        self._tok_ends: np.ndarray | None = None
        self._pairs_all: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._toff = np.ascontiguousarray(tail_token_offsets).data
        self._e = memoryview(b"")  # token_ends(), as read per step

    @property
    def num_tail_tokens(self) -> int:
        return int(self.tail_tokens.shape[0])

    def token_lengths(self) -> np.ndarray:
        """Each tail token's byte length (int32 [T]; 0 for an id the token index does not hold)."""
        ix = self.index
        lengths = np.zeros(self.vocab_size + 1, dtype=np.int32)
        ids = np.minimum(np.asarray(ix.ids).view(np.uint32), np.uint32(self.vocab_size))  # checked in range before
        lengths[ids] = np.repeat(np.diff(ix.key_offsets).astype(np.int32), np.diff(ix.id_offsets))
        lengths[self.vocab_size] = 0
        toks = np.ascontiguousarray(self.tail_tokens, dtype=np.int32).view(np.uint32)  # a negative id: past the mask
        out: np.ndarray = lengths[np.minimum(toks, np.uint32(self.vocab_size))]
        return out

    def token_values(self) -> np.ndarray:
        """The value of each tail token (int64 [T])."""
        return np.repeat(np.arange(self.value_state.shape[0], dtype=np.int64), _counts(self.tail_token_offsets))

    def token_ends(self) -> np.ndarray:
        """The state where each tail token's byte chain ends (int32 [T], ascending), built once."""
        if self._tok_ends is None:
            lengths = self.token_lengths()
            owner = self.token_values()
            cs = np.cumsum(lengths)
            before = np.concatenate([[0], cs])[np.asarray(self.tail_token_offsets[:-1], dtype=np.int64)]
            ends = cs - before[owner] + (self.tail_first.astype(np.int64)[owner] - 1)
            self._tok_ends = ends.astype(np.int32)
            self._tok_ends.flags.writeable = False
            self._e = self._tok_ends.data
        return self._tok_ends

    def _at(self, state: int, v: int) -> int:
        """The tail token after which tail state ``state`` of value ``v`` lies at a boundary and another follows,
        or -1 (inside a chain, or the value's last state)."""
        if self._tok_ends is None:
            self.token_ends()
        lo, hi = self._toff[v], self._toff[v + 1]
        e = self._e
        j = bisect_left(e, state, lo, hi)
        return j if j < hi - 1 and e[j] == state else -1

    def row(self, state: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        j = self._at(state, bisect_left(self._ends, end))
        if j < 0:
            return _NO_TOKENS, _NO_TOKENS
        return self.tail_tokens[j + 1 : j + 2].astype(np.int32), self.token_ends()[j + 1 : j + 2]

    def allowed_row(self, state: int) -> tuple[np.ndarray, bool]:
        ends = self._ends
        v = bisect_left(ends, state)
        if state >= self._first[v]:
            j = self._at(state, v)
            return (_NO_TOKENS if j < 0 else self.tail_tokens[j + 1 : j + 2]), state == ends[v]
        r = state - self._before[v]
        return (self.pairs[self._offs[r] : self._offs[r + 1]] & self.token_mask).view(np.int32), state == ends[v]

    def step(self, state: int, token: int) -> int:
        v = bisect_left(self._ends, state)
        if state >= self._first[v]:
            j = self._at(state, v)
            if j < 0 or int(self.tail_tokens[j + 1]) != token:
                return -1
            return int(self._e[j + 1])
        return super().step(state, token)  # a stored row (TailLayout's search; the any path keeps its own inline)

    def expand(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every tail pair: (the state where token j - 1 ends, token j, where token j ends) for every tail token j
        but its value's first, int64, sorted by state (one pair a state). O(T), built once."""
        if self._pairs_all is None:
            ends = self.token_ends().astype(np.int64)
            off = np.asarray(self.tail_token_offsets, dtype=np.int64)
            first = np.zeros(ends.shape[0], dtype=bool)
            starts = off[:-1][off[1:] > off[:-1]]
            first[starts] = True
            j = np.flatnonzero(~first)
            self._pairs_all = (ends[j - 1], self.tail_tokens[j].astype(np.int64), ends[j])
        return self._pairs_all

    def expand_states(self, states: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s, t, n = self.expand()
        states = np.asarray(states, dtype=np.int64)
        at = np.minimum(np.searchsorted(states, s), max(states.shape[0] - 1, 0))
        hit = states[at] == s if states.shape[0] else np.zeros(s.shape[0], dtype=bool)
        return s[hit], t[hit], n[hit]

    def tail_counts(self, chunk: int = 1 << 21) -> np.ndarray:
        states, _ = self.tail_states()
        out = np.zeros(states.shape[0], dtype=np.int64)
        out[np.searchsorted(states, self.expand()[0])] = 1
        return out


def full_rows(layout: TailLayout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The present layout's three arrays (CSR over every state) from the branching rows and the expanded tails."""
    offsets, tokens, nxt = layout.offsets, layout.tokens, layout.next
    n = layout.num_states
    branch = layout.row_states()
    counts_b = np.diff(offsets.astype(np.int64))
    ts, tt, tn = layout.expand()
    per_state = np.zeros(n, dtype=np.int64)
    per_state[branch] = counts_b
    np.add.at(per_state, ts, 1)
    full = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(per_state, out=full[1:])
    total = int(full[-1])
    out_t = np.empty(total, dtype=np.int32)
    out_n = np.empty(total, dtype=np.int32)
    # branching rows, in their order, at their states' offsets
    pos_b = concat_ranges(full[branch], counts_b)
    out_t[pos_b] = tokens
    out_n[pos_b] = nxt
    # tail rows: sorted by state already; each state's first pair at its offset
    if ts.shape[0]:
        first = np.ones(ts.shape[0], dtype=bool)
        first[1:] = ts[1:] != ts[:-1]
        run_start = np.maximum.accumulate(np.where(first, np.arange(ts.shape[0]), 0))
        pos_t = full[ts] + (np.arange(ts.shape[0]) - run_start)
        out_t[pos_t] = tt
        out_n[pos_t] = tn
    dtype = np.uint32 if total < 2**32 else np.int64
    return full.astype(dtype), out_t, out_n


def token_bits(vocab_size: int) -> int:
    """Bits of a packed pair that hold the token id (the rest hold the delta to the next state)."""
    return max(1, (int(vocab_size) - 1).bit_length())


def pack_pairs(
    offsets: np.ndarray, tokens: np.ndarray, nxt: np.ndarray, row_states: np.ndarray, vocab_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pairs, far pairs, far next) of stored rows: each pair ``token | (next - state) << token_bits`` as uint32,
    a delta that does not fit written 0 and its target kept in the far table."""
    bits = token_bits(vocab_size)
    owner = np.repeat(row_states.astype(np.int64), _counts(offsets))
    delta = nxt.astype(np.int64) - owner
    far = np.flatnonzero(delta >= (1 << (32 - bits)))
    far_next = nxt[far].astype(np.int32)
    delta[far] = 0
    packed = (delta << bits) | tokens.astype(np.int64)
    return packed.astype(np.uint32), far.astype(np.uint32), far_next
