"""A slot: one finite set's trie inside a larger output, and every token that crosses its edges.

A slot's keys are its values' JSON string literals, after a literal prefix when
the slot starts the output (``{"name": "get_user"``). Around the trie:

* **exits**: a token may close a key and read on. The compile's walk reports
  each (trie state, head) where a partial token is alive at a key's end
  (:attr:`~triec.compiler.walk.Transitions.leaf_entries`); a head's tokens carry a
  *rest* past the closing quote;
* **tail**: literal text every value is followed by (``, "arguments": ``), served
  from precomputed rows like the trie's;
* **enters**: when a grammar engine hands over to the slot, a token may start in
  the engine's text and run into a value (``' "get'``: a space, then a value).

Each crossing token is classified once against the tail: it lands in the trie
(``TRIE``), in the tail (``TAIL``), at the handover with a rest already known to
be viable (``HANDOVER``: usually no rest; a rest only in tables converted from
the first schema format, judged when they were compiled), or past the handover
with a rest that the grammar after the value must accept (``DYNAMIC``, judged at
serving time, once per grammar or once per visit). Everything here is a pure function of the keys, the tail and
the vocabulary; the rows are (word, bits) pairs as in
:mod:`triec.runtime.word_masks`.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from triec._arrays import concat_ranges, find_sorted
from triec.runtime.word_masks import StateWords, words_from_pairs
from triec.tokenizer.index import TokenIndex, token_index

if TYPE_CHECKING:
    from triec.runtime.table import MaskTable
    from triec.tokenizer.vocabulary import Vocabulary

TRIE, TAIL, HANDOVER, DYNAMIC = 0, 1, 2, 3
OTHER = "\U000ffffd"
"""A character every free string takes and no marker is: at a slot's opening quote the engine takes the slot's
marker and refuses this one, where a free string (an extra key, a string value) would take both."""
KINDS = ("trie", "tail", "handover", "dynamic")

Candidate = tuple[int, int, int, int, bytes]  # token, kind, target, leaf, rest


@dataclass(frozen=True)
class Groups:
    """Crossing tokens in groups (CSR): one group per head, per tail offset, or per entering head."""

    offsets: np.ndarray  # int64 [G + 1]
    tokens: np.ndarray  # int32 [N], strictly ascending within a group
    kind: np.ndarray  # int8 [N]: TRIE, TAIL, HANDOVER or DYNAMIC
    target: np.ndarray  # int32 [N]: trie state (TRIE) or tail offset (TAIL), else -1
    leaf: np.ndarray  # int32 [N]: the value whose key the token closes, -1 where the group's user knows it
    rest_offsets: np.ndarray  # int64 [N + 1]
    rest: np.ndarray  # uint8: the bytes a DYNAMIC token carries past the tail
    rest_token: np.ndarray  # int32 [N]: a token spelling exactly that rest, -1 if none
    labels: list[bytes]  # per group: the head's bytes (b"" for tail offsets)

    @property
    def num_groups(self) -> int:
        return int(self.offsets.shape[0]) - 1

    def span(self, g: int) -> tuple[int, int]:
        return int(self.offsets[g]), int(self.offsets[g + 1])

    def rest_of(self, k: int) -> bytes:
        return self.rest[int(self.rest_offsets[k]) : int(self.rest_offsets[k + 1])].tobytes()

    def find(self, g: int, token: int) -> int:
        """The candidate index of ``token`` in group g, or -1."""
        lo, hi = self.span(g)
        i = find_sorted(self.tokens[lo:hi], token) + lo
        return i if i < hi and int(self.tokens[i]) == token else -1

    @staticmethod
    def pack(groups: list[list[Candidate]], labels: list[bytes], first_id: dict[bytes, int]) -> Groups:
        flat = [c for g in groups for c in g]
        offsets = np.zeros(len(groups) + 1, dtype=np.int64)
        np.cumsum([len(g) for g in groups], out=offsets[1:])
        rests = [c[4] for c in flat]
        rest_offsets = np.zeros(len(flat) + 1, dtype=np.int64)
        np.cumsum([len(x) for x in rests], out=rest_offsets[1:])
        return Groups(
            offsets=offsets,
            tokens=np.array([c[0] for c in flat], dtype=np.int32),
            kind=np.array([c[1] for c in flat], dtype=np.int8),
            target=np.array([c[2] for c in flat], dtype=np.int32),
            leaf=np.array([c[3] for c in flat], dtype=np.int32),
            rest_offsets=rest_offsets,
            rest=np.frombuffer(b"".join(rests), dtype=np.uint8).copy(),
            rest_token=np.array([first_id.get(c[4], -1) if c[1] == DYNAMIC else -1 for c in flat], dtype=np.int32),
            labels=list(labels),
        )

    @staticmethod
    def concat(parts: list[Groups]) -> Groups:
        """Groups after groups (each part's groups keep their order)."""
        if not parts:
            return Groups.pack([], [], {})
        offsets = [np.zeros(1, dtype=np.int64)]
        rest_offsets = [np.zeros(1, dtype=np.int64)]
        n = r = 0
        for g in parts:
            offsets.append(g.offsets[1:] + n)
            rest_offsets.append(g.rest_offsets[1:] + r)
            n += int(g.offsets[-1])
            r += int(g.rest_offsets[-1])
        return Groups(
            offsets=np.concatenate(offsets),
            tokens=np.concatenate([g.tokens for g in parts]),
            kind=np.concatenate([g.kind for g in parts]),
            target=np.concatenate([g.target for g in parts]),
            leaf=np.concatenate([g.leaf for g in parts]),
            rest_offsets=np.concatenate(rest_offsets),
            rest=np.concatenate([g.rest for g in parts]),
            rest_token=np.concatenate([g.rest_token for g in parts]),
            labels=[lab for g in parts for lab in g.labels],
        )


def below_group(ti: TokenIndex, prefix: bytes, tail: bytes, label: bytes) -> Groups:
    """One group: every token longer than ``prefix`` that starts with it, classified by what it carries past
    ``prefix`` against ``tail`` (vectorized: a group can hold every token that starts with a space)."""
    ids, start, end = ti.below_arrays(prefix)
    length = end - start
    n = len(tail)
    ok = np.ones(ids.shape[0], dtype=bool)
    top = ti.flat.shape[0] - 1
    for j in range(n):
        has = length > j
        ok &= ~has | (ti.flat[np.minimum(start + j, top)] == tail[j])
    kind = np.where(length < n, TAIL, np.where(length == n, HANDOVER, DYNAMIC)).astype(np.int8)
    target = np.where(kind == TAIL, length, -1).astype(np.int32)
    ids, kind, target, start, end = ids[ok], kind[ok], target[ok], start[ok], end[ok]
    rstart = np.where(kind == DYNAMIC, start + n, end)  # only a DYNAMIC token's rest is kept
    rlen = end - rstart
    rest_offsets = np.zeros(ids.shape[0] + 1, dtype=np.int64)
    np.cumsum(rlen, out=rest_offsets[1:])
    rest = ti.flat[concat_ranges(rstart, rlen)]
    raw = rest.tobytes()
    first_id = ti.first_id
    ro = rest_offsets.tolist()
    rest_token = np.array(
        [first_id.get(raw[ro[k] : ro[k + 1]], -1) if kind[k] == DYNAMIC else -1 for k in range(ids.shape[0])],
        dtype=np.int32,
    )
    order = np.argsort(ids, kind="stable")
    if not np.array_equal(order, np.arange(order.shape[0])):  # ids are ascending within equal bytes only
        ids, kind, target = ids[order], kind[order], target[order]
        rl = rlen[order]
        idx = concat_ranges(rest_offsets[:-1][order], rl)
        rest = rest[idx]
        rest_offsets = np.zeros(ids.shape[0] + 1, dtype=np.int64)
        np.cumsum(rl, out=rest_offsets[1:])
        rest_token = rest_token[order]
    return Groups(
        offsets=np.array([0, ids.shape[0]], dtype=np.int64),
        tokens=ids.astype(np.int32),
        kind=kind,
        target=target,
        leaf=np.full(ids.shape[0], -1, dtype=np.int32),
        rest_offsets=rest_offsets,
        rest=rest,
        rest_token=rest_token,
        labels=[label],
    )


_HEADS: OrderedDict[tuple[str, int, bytes, bytes], Groups] = OrderedDict()
_HEADS_KEPT = 256  # (vocabulary, head, tail) groups kept: registries and enums share their few key endings


def head_group(vocab: Vocabulary, ti: TokenIndex, head: bytes, tail: bytes) -> Groups:
    """:func:`below_group` of an exit head, computed once per (vocabulary, head, tail) in a process: the keys of
    every registry end alike (``", "arguments": `` in tool-call begins, ``"`` in enums), and a group over a
    common head (a space) is a pass over a third of the vocabulary."""
    key = (vocab.fingerprint, vocab.vocab_size, head, tail)
    found = _HEADS.get(key)
    if found is None:
        found = _HEADS[key] = below_group(ti, head, tail, head)
        while len(_HEADS) > _HEADS_KEPT:
            _HEADS.popitem(last=False)
    else:
        _HEADS.move_to_end(key)
    return found


_TAILS: OrderedDict[tuple[str, int, bytes], Groups] = OrderedDict()
_TAILS_KEPT = 32  # (vocabulary, tail) pairs kept; a tail's groups can hold every token that starts with a space


def tail_groups(vocab: Vocabulary, tail: bytes) -> Groups:
    """Group i: the tokens at tail offset i (inside the tail, ending at its end, or reading past it).

    A pure function of (vocabulary, tail), computed once per process for each tail (the largest group holds every
    token that starts with the tail's last byte)."""
    key = (vocab.fingerprint, vocab.vocab_size, tail)
    found = _TAILS.get(key)
    if found is None:
        ti = token_index(vocab)
        parts = []
        for i in range(len(tail)):
            spine = tail[i:]
            inside: list[Candidate] = []
            for k in range(1, len(spine) + 1):
                for t in ti.spelling(spine[:k]):
                    inside.append((t, TAIL, i + k, -1, b"") if k < len(spine) else (t, HANDOVER, -1, -1, b""))
            past = below_group(ti, spine, b"", b"")
            parts.append(_merge(Groups.pack([sorted(inside)], [b""], ti.first_id), past))
        found = Groups.concat(parts) if parts else Groups.pack([], [], ti.first_id)
        _TAILS[key] = found
        while len(_TAILS) > _TAILS_KEPT:
            _TAILS.popitem(last=False)
    else:
        _TAILS.move_to_end(key)
    return found


def _merge(a: Groups, b: Groups) -> Groups:
    """Two one-group Groups with disjoint tokens as one group, tokens ascending."""
    both = Groups.concat([a, b])
    order = np.argsort(both.tokens, kind="stable")
    rl = np.diff(both.rest_offsets)[order]
    rest_offsets = np.zeros(order.shape[0] + 1, dtype=np.int64)
    np.cumsum(rl, out=rest_offsets[1:])
    return Groups(
        offsets=np.array([0, order.shape[0]], dtype=np.int64),
        tokens=both.tokens[order],
        kind=both.kind[order],
        target=both.target[order],
        leaf=both.leaf[order],
        rest_offsets=rest_offsets,
        rest=both.rest[concat_ranges(both.rest_offsets[:-1][order], rl)],
        rest_token=both.rest_token[order],
        labels=[b""],
    )


def classify(rest: bytes, tail: bytes) -> tuple[int, int, bytes] | None:
    """Where ``rest`` (the bytes a token carries past a key's end) lands: (kind, tail offset, rest past the tail)."""
    n = len(tail)
    if len(rest) < n:
        return (TAIL, len(rest), b"") if tail.startswith(rest) else None
    if not rest.startswith(tail):
        return None
    x = rest[n:]
    return (DYNAMIC, -1, x) if x else (HANDOVER, -1, b"")


@dataclass(eq=False)
class Slot:
    """One finite set's trie, its crossing tokens and its static rows.

    Source rows (what a position's static row is indexed by): trie states
    ``0 .. S-1``, tail offsets ``S .. S+T-1``, entering heads ``S+T ..``.
    """

    trie: MaskTable
    tail: bytes
    enter_state: int  # the trie state an engine hands over at (before the opening quote); -1: never entered
    marker: str  # the character the grammars hold instead of the values ("" for a slot only at the start)
    exits: Groups
    entry_state: np.ndarray  # int32 [E], ascending: trie states where a head closes a key
    entry_group: np.ndarray  # int32 [E]: the head (a group of ``exits``)
    entry_leaf: np.ndarray  # int32 [E]: the value index the head closes
    tails: Groups | None  # group i: the tokens at tail offset i; None until :meth:`bind` derives them
    enters: Groups  # group j: tokens read from the engine through head ``labels[j]`` into the trie
    value_grammar: np.ndarray | None = None  # per value, the grammar that follows; None: the entering one resumes
    open: int = 0x22  # the byte every key starts with after the entry state, shared with the placeholder ('"')
    words: StateWords = field(init=False, repr=False)
    dynamic: np.ndarray = field(init=False, repr=False)  # bool per source row: some token needs the grammar after
    has_values: ClassVar[bool] = True
    """Whether the slot's keys are a list of values a matcher records when one is read (a pattern slot's are not)."""

    def __post_init__(self) -> None:
        if self.tails is not None:
            self.words, self.dynamic = static_rows(self)

    @property
    def bound(self) -> bool:
        return self.tails is not None

    def bind(self, vocab: Vocabulary) -> None:
        """Derive the tail's groups from the vocabulary (an artifact does not store them: a pure function of the
        vocabulary and the tail, they can hold every token that starts with the tail's last byte) and the rows."""
        if self.tails is None:
            self.tails = tail_groups(vocab, self.tail)
            self.words, self.dynamic = static_rows(self)

    @property
    def num_states(self) -> int:
        return self.trie.num_states

    @property
    def num_values(self) -> int:
        return self.trie.num_values

    @property
    def keys(self) -> list[bytes]:
        return self.trie.value_bytes

    def entries_at(self, state: int) -> range:
        lo = find_sorted(self.entry_state, state, "left")
        hi = find_sorted(self.entry_state, state, "right")
        return range(lo, hi)

    def tail_row(self, offset: int) -> int:
        return self.num_states + offset

    def enter_row(self, group: int) -> int:
        return self.num_states + len(self.tail) + group

    def leaf_value(self, state: int) -> int:
        """The value whose key ends at ``state``, or -1."""
        vs = self.trie.value_state
        i = find_sorted(vs, state)
        return i if i < vs.shape[0] and int(vs[i]) == state else -1

    def walk_bytes(self, state: int, data: bytes) -> tuple[int, int, bytes] | None:
        """Read ``data`` from trie state ``state``: (-1, state', b"") inside a key, (value, -1, rest) when it
        closes value's key with ``rest`` left over, None when no key fits. O(log K)."""
        keys = self.keys
        w = self.trie.prefix(state) + data
        i = bisect.bisect_left(keys, w)
        if i < len(keys) and keys[i] == w:
            return (i, -1, b"")
        if i < len(keys) and keys[i].startswith(w):
            return (-1, int(self.trie.value_state[i]) - (len(keys[i]) - len(w)), b"")
        if i > 0 and w.startswith(keys[i - 1]):  # keys are prefix-free (each ends at its closing quote)
            return (i - 1, -1, w[len(keys[i - 1]) :])
        return None

    def forced(self, state: int) -> bytes:
        """The bytes every key below ``state`` continues with (through the tail if only one key is left)."""
        keys = self.keys
        p = self.trie.prefix(state)
        lo = bisect.bisect_left(keys, p)
        from triec.tokenizer.index import successor

        hi = bisect.bisect_left(keys, successor(p), lo)
        if lo >= hi:
            return b""
        a, b = keys[lo], keys[hi - 1]
        k, limit = len(p), min(len(a), len(b))
        while k < limit and a[k] == b[k]:
            k += 1
        return a[len(p) : k] + (self.tail if hi - lo == 1 else b"")


def build_values_slot(
    keys: list[bytes],
    vocab: Vocabulary,
    *,
    tail: bytes = b"",
    enter_state: int = -1,
    marker: str = "",
    value_grammar: np.ndarray | None = None,
    open: int = 0x22,
) -> Slot:
    """A slot over sorted, unique keys: trie, walk (with the partial tokens alive at key ends), every crossing token
    classified."""
    from triec.compiler.entry import mask_table
    from triec.compiler.walk import walk
    from triec.trie import build_trie

    trie = build_trie(keys)
    tr = walk(trie, vocab.automaton, vocab.vocab_size, leaf_entries=True)
    trie_table = mask_table(trie, tr.offsets, tr.tokens, tr.next_state, vocab, keys=keys)
    assert tr.leaf_entries is not None
    ti = token_index(vocab)
    start, v, leaf_node = (np.asarray(a, dtype=np.int64) for a in tr.leaf_entries)
    leaf = np.searchsorted(np.asarray(trie_table.value_state, dtype=np.int64), leaf_node)
    # exits: one group per head (a vocabulary-trie node; its bytes are the end of any key it closes)
    _, first, inverse = np.unique(v, return_index=True, return_inverse=True)
    labels = [keys[int(leaf[i])][int(trie.depth[start[i]]) :] for i in first.tolist()]
    head_groups = [head_group(vocab, ti, h, tail) for h in labels]
    live = np.array([int(g.offsets[-1]) > 0 for g in head_groups], dtype=bool)
    keep = live[inverse] if inverse.size else np.zeros(0, dtype=bool)
    remap = np.cumsum(live) - 1
    e_state, e_group, e_leaf = start[keep], remap[inverse[keep]], leaf[keep]
    order = np.lexsort((e_group, e_state))
    exits = (
        Groups.concat([g for g, ok in zip(head_groups, live.tolist(), strict=True) if ok])
        if live.any()
        else Groups.pack([], [], ti.first_id)
    )
    tails = tail_groups(vocab, tail)
    enters = Groups.pack([], [], ti.first_id)
    slot = Slot(
        trie_table,
        tail,
        enter_state,
        marker,
        exits,
        e_state[order].astype(np.int32),
        e_group[order].astype(np.int32),
        e_leaf[order].astype(np.int32),
        tails,
        enters,
        value_grammar,
        open,
    )
    if enter_state >= 0:
        slot.enters = enter_groups(slot, vocab)
        slot.words, slot.dynamic = static_rows(slot)
    return slot


def enter_groups(slot: Slot, vocab: Vocabulary) -> Groups:
    """Tokens h + o + y with h non-empty (o the slot's opening byte): the engine reads h, the slot o + y from its entry."""
    ti = token_index(vocab)
    found: dict[bytes, list[Candidate]] = {}
    tb_all = vocab.token_bytes
    opened = slot.walk_bytes(slot.enter_state, bytes([slot.open]))  # after the opening byte: its tokens' first bytes
    if opened is None or opened[0] >= 0:
        return Groups.pack([], [], ti.first_id)
    toks, _ = slot.trie.transitions(opened[1])
    second = {tb_all[t][0] for t in toks.tolist() if tb_all[t]}
    for t, i in ti.positions(slot.open):
        tb = tb_all[t]
        if i + 1 < len(tb) and tb[i + 1] not in second:
            continue
        got = slot.walk_bytes(slot.enter_state, tb[i:])
        if got is None:
            continue
        val, state, rest = got
        if val < 0:
            c: Candidate | None = (t, TRIE, state, -1, b"")
        else:
            cl = classify(rest, slot.tail)
            c = None if cl is None else (t, cl[0], cl[1], val, cl[2])
        if c is not None:
            found.setdefault(tb[:i], []).append(c)
    labels = sorted(found)
    return Groups.pack([sorted(found[h]) for h in labels], labels, ti.first_id)


def static_rows(slot: Slot) -> tuple[StateWords, np.ndarray]:
    """(word, bits) rows of every source row from the tokens whose landing needs no engine, and which rows
    also hold DYNAMIC tokens."""
    trie = slot.trie
    assert slot.tails is not None, "bind the slot to its vocabulary first"
    s, n, ge = trie.num_states, len(slot.tail), slot.enters.num_groups
    off = np.asarray(trie.allowed_offsets, dtype=np.int64)
    rows = [np.repeat(np.arange(s, dtype=np.int64), np.diff(off))]
    toks = [np.asarray(trie.allowed_tokens, dtype=np.int64)]
    dynamic = np.zeros(s + n + ge, dtype=bool)
    # exits: each entry repeats its head's static tokens at its state (a head's DYNAMIC tokens, often most of
    # them, are only flagged: an entry per key times every token below '"' would be 10^8 pairs at K = 100,000)
    ex = slot.exits
    g = ex.num_groups
    g_of = np.repeat(np.arange(g, dtype=np.int64), np.diff(ex.offsets))
    keep = ex.kind != DYNAMIC
    st_tokens = ex.tokens[keep].astype(np.int64)
    st_off = np.zeros(g + 1, dtype=np.int64)
    np.cumsum(np.bincount(g_of[keep], minlength=g), out=st_off[1:])
    has_dynamic = np.bincount(g_of[~keep], minlength=g) > 0
    e_group = slot.entry_group.astype(np.int64)
    e_state = slot.entry_state.astype(np.int64)
    lo = st_off[e_group]
    cnt = st_off[e_group + 1] - lo
    rows.append(np.repeat(e_state, cnt))
    toks.append(st_tokens[concat_ranges(lo, cnt)])
    dynamic[e_state[has_dynamic[e_group]]] = True
    # tail offsets and entering heads: one source row per group
    for groups, base in ((slot.tails, s), (slot.enters, s + n)):
        g_of = np.repeat(np.arange(groups.num_groups, dtype=np.int64), np.diff(groups.offsets)) + base
        static = groups.kind != DYNAMIC
        rows.append(g_of[static])
        toks.append(groups.tokens[static].astype(np.int64))
        dynamic[g_of[~static]] = True
    words = words_from_pairs(s + n + ge, np.concatenate(rows), np.concatenate(toks), trie.words_per_row)
    return words, dynamic
