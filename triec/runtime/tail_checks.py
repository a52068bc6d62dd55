"""The loader's checks of a tail table (format version 4, docs/format.md "What the loader checks"), numpy only.

:func:`check_tail_indices` runs at every ``triec.load`` of a tail table: every index the serving code of
:mod:`triec.runtime.tails` follows lies in range, and what makes ``allowed`` and ``advance`` agree on the stored
rows and the token index holds (:func:`check_served_rows`, :func:`check_token_index`); a canonical table's tail
tokens too (:func:`check_canonical_tails`). :func:`validate_tail_contents` (``verify=True``) adds what makes the
rows right beyond their indices. :mod:`triec.runtime.validate` calls both for a mask table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

import numpy as np

from triec._arrays import concat_ranges
from triec.errors import ArtifactContentError
from triec.runtime.tails import CanonicalTailLayout, TailIndex, TailLayout


def _fail(source: str, section: str, message: str) -> NoReturn:
    raise ArtifactContentError(f"{source}: section {section}: {message}")


def check_canonical_tails(layout: CanonicalTailLayout, eos_token_ids: Sequence[int], source: str) -> None:
    """A canonical tail table's tail tokens in range (docs/format.md, version 4): K + 1 offsets from 0 to the token
    count, never decreasing; every token an id of the token index (so in the mask, with bytes, not EOS); the
    tokens of each value exactly as long as its tail. O(T + K) vectorized; that they spell the tail's bytes is
    checked with verify=True (:func:`validate_tail_contents`)."""
    off = layout.tail_token_offsets
    k = int(layout.value_state.shape[0])
    t = layout.num_tail_tokens
    if off.shape[0] != k + 1:
        _fail(
            source, "tail_token_offsets", f"expected {k + 1} offsets (one per value and one more), found {off.shape[0]}"
        )
    if int(off[0]) != 0 or int(off[-1]) != t:
        _fail(
            source,
            "tail_token_offsets",
            f"expected to run from 0 to {t} (the tail token count), found {off[0]}..{off[-1]}",
        )
    if k > 1 and (off[1:] < off[:-1]).any():
        _fail(source, "tail_token_offsets", "expected non-decreasing offsets")
    toks = np.asarray(layout.tail_tokens)
    if t:
        if int(toks.view(np.uint32).max()) >= layout.vocab_size:
            _fail(source, "tail_tokens", f"expected token ids in 0..{layout.vocab_size - 1}")
        if np.isin(toks, np.asarray(eos_token_ids, dtype=np.int32)).any():
            _fail(source, "tail_tokens", "EOS ids must not appear among a value's tail tokens")
    lengths = layout.token_lengths()
    if t and not lengths.all():
        _fail(source, "tail_tokens", "expected ids of content tokens (every one in the token index)")
    total = np.zeros(t + 1, dtype=np.int64)
    np.cumsum(lengths, out=total[1:])
    wide = np.asarray(off, dtype=np.int64)
    spelled = total[wide[1:]] - total[wide[:-1]]
    if not np.array_equal(spelled, layout.tail_len):
        i = int(np.flatnonzero(spelled != layout.tail_len)[0])
        _fail(
            source,
            "tail_tokens",
            f"value {i}'s tail tokens spell {int(spelled[i])} bytes, its tail holds {int(layout.tail_len[i])}",
        )


def check_tail_indices(layout: TailLayout, source: str, eos_token_ids: Sequence[int] = ()) -> None:
    """Every index a tail table follows in range (docs/format.md, version 4): the stored rows (B + 1 offsets from 0
    to P, never decreasing; every token in the mask; every near target ``state + delta`` and far target in the
    table; the far pairs ascending, in range, exactly the pairs with delta 0) and the token index (offsets from 0 to
    their data's length, strictly increasing; every id in the mask); a canonical table's tail tokens
    (:func:`check_canonical_tails`). O(P + K + T) vectorized, no O(S) array."""
    offsets, pairs, vocab_size = layout.offsets, layout.pairs, layout.vocab_size
    b, p, s = layout.num_branch, layout.num_pairs, layout.num_states
    if layout.num_tails > s - 1 or b < 1:
        _fail(source, "value_lcp", "the tails it implies leave no room for the start state")
    if offsets.shape[0] != b + 1:
        _fail(
            source,
            "allowed_offsets",
            f"expected {b + 1} offsets (one per branching state and one more), found {offsets.shape[0]}",
        )
    off = offsets
    if int(off[0]) != 0 or int(off[-1]) != p:
        _fail(source, "allowed_offsets", f"expected to run from 0 to {p} (the pair count), found {off[0]}..{off[-1]}")
    if b > 1 and (off[1:] < off[:-1]).any():
        _fail(source, "allowed_offsets", "expected non-decreasing offsets")
    far_pairs, far_next = layout.far_pairs, layout.far_next
    f = int(far_pairs.shape[0])
    if far_next.shape[0] != f:
        _fail(source, "far_next", f"expected {f} entries (one per far pair), found {far_next.shape[0]}")
    if p:
        if int((pairs & layout.token_mask).max()) >= vocab_size:
            _fail(source, "allowed_pairs", f"expected token ids in 0..{vocab_size - 1}")
        # next states: only a row whose state lies within the largest delta of the end can reach past it
        limit = 1 << (32 - layout.token_bits)
        vs = layout.value_state
        v = int(vs.searchsorted(vs.dtype.type(max(0, s - limit))))
        r0 = (int(vs[v - 1]) + 1 if v else 0) - int(layout.tails_before[v])
        near = layout.branch_states(v)  # the states of rows r0 .. B - 1
        if near.shape[0] != b - r0:
            _fail(source, "allowed_offsets", "expected one row per branching state")
        sub = off[r0:].astype(np.int64)
        rows = np.flatnonzero(sub[1:] > sub[:-1])
        if rows.size:
            delta = pairs[int(sub[0]) :] >> np.uint32(layout.token_bits)
            widest = np.maximum.reduceat(delta, sub[rows] - sub[0]).astype(np.int64)
            if int((widest + near[rows]).max()) >= s:
                _fail(source, "allowed_pairs", f"expected next states in 0..{s - 1}")
    if f:
        if int(far_pairs.max()) >= p or (f > 1 and (far_pairs[1:] <= far_pairs[:-1]).any()):
            _fail(source, "far_pairs", f"expected strictly increasing pair indices in 0..{p - 1}")
        if int((pairs[far_pairs] >> np.uint32(layout.token_bits)).max()) != 0:
            _fail(source, "far_pairs", "expected only pairs whose delta is 0")
        # (that every pair of delta 0 has its entry is checked with verify=True: a missing one reads another's)
        if int(far_next.view(np.uint32).max()) >= s:
            _fail(source, "far_next", f"expected states in 0..{s - 1}")
    ix = layout.index
    d = ix.num_keys
    if d < 0 or ix.id_offsets.shape[0] != d + 1:
        _fail(source, "token_id_offsets", f"expected {d + 1} offsets, found {ix.id_offsets.shape[0]}")
    ko, io = ix.key_offsets, ix.id_offsets
    if int(ko[0]) != 0 or int(ko[-1]) != ix.key_bytes.shape[0] or (d and (ko[1:] <= ko[:-1]).any()):
        _fail(source, "token_key_offsets", "expected strictly increasing offsets from 0 to the key bytes' length")
    if int(io[0]) != 0 or int(io[-1]) != ix.ids.shape[0] or (d and (io[1:] <= io[:-1]).any()):
        _fail(source, "token_id_offsets", "expected strictly increasing offsets from 0 to the id count")
    if ix.ids.shape[0] and int(ix.ids.view(np.uint32).max()) >= vocab_size:
        _fail(source, "token_ids", f"expected ids in 0..{vocab_size - 1}")
    check_served_rows(layout, source)
    check_token_index(ix, vocab_size, eos_token_ids, source)
    if isinstance(layout, CanonicalTailLayout):  # a canonical table's tail tokens (after the index they read)
        check_canonical_tails(layout, eos_token_ids, source)


def check_served_rows(layout: TailLayout, source: str) -> None:
    """What makes ``allowed`` and ``advance`` agree on the stored rows (indices already in range): tokens strictly
    ascending within each row (``advance`` binary-searches a row that ``allowed`` lists whole), and a far-table
    entry for every pair of delta 0 (``advance`` reads one for it). Two O(P) passes over uint32 words (about 2 ms
    at 1.9 million pairs), no int64 copy: the price of the range checks."""
    p = layout.num_pairs
    if not p:
        return
    pairs, mask = layout.pairs, layout.token_mask
    tokens = pairs & mask
    bad = tokens[1:] <= tokens[:-1]  # pair j + 1 not above pair j ...
    off = np.asarray(layout.offsets[1:-1], dtype=np.int64)
    bad[off[(off > 0) & (off < p)] - 1] = False  # ... unless it starts a row
    if bad.any():
        _fail(source, "allowed_pairs", "expected strictly ascending token ids within each row")
    zero = int(np.count_nonzero(pairs <= mask))  # delta 0: nothing above the token bits
    if zero != layout.far_pairs.shape[0]:
        _fail(
            source,
            "far_pairs",
            f"expected one entry per pair whose delta is 0 ({zero}), found {layout.far_pairs.shape[0]}",
        )


def check_token_index(index: TailIndex, vocab_size: int, eos_token_ids: Sequence[int], source: str) -> None:
    """What makes a tail's ``allowed`` (the prefix rows built over the index's keys) and ``advance`` (an id's key
    compared with the rest of the value) agree, indices already in range: every id spells one key only and is not
    EOS (a repeated id is listed under two keys and advanced by one), and the keys strictly ascend bytewise (the
    prefix rows' trie is built from sorted keys). O(V + key bytes) vectorized: a count per id and the keys' common
    prefixes."""
    ids = np.asarray(index.ids)
    if ids.shape[0]:
        seen = np.bincount(ids.view(np.uint32), minlength=vocab_size)
        if int(seen.max()) > 1:
            _fail(source, "token_ids", "expected every id once (an id spelling two keys)")
        eos = np.asarray([e for e in eos_token_ids if 0 <= e < vocab_size], dtype=np.int64)
        if eos.size and seen[eos].any():
            _fail(source, "token_ids", "EOS ids must not appear among content tokens")
    if index.num_keys > 1 and not keys_ascending(index.key_bytes, index.key_offsets):
        _fail(source, "token_key_bytes", "expected distinct token bytes in strictly increasing order")


def keys_ascending(data: np.ndarray, offsets: np.ndarray) -> bool:
    """Whether the keys ``data[offsets[i]:offsets[i + 1]]`` (non-empty) strictly ascend bytewise, vectorized: each
    pair of neighbours compares 8 bytes at a time as big-endian integers (zero past a key's end), and only the
    pairs still tied go on to the next 8 (about 2 ms at 150,000 keys)."""
    off = np.asarray(offsets, dtype=np.int64)
    k = off.shape[0] - 1
    if k < 2:
        return True
    starts, lengths = off[:-1], off[1:] - off[:-1]
    padded = np.concatenate([np.ascontiguousarray(data, dtype=np.uint8), np.zeros(8, dtype=np.uint8)])
    window = np.lib.stride_tricks.sliding_window_view(padded, 8)
    lane = np.arange(8)

    def heads(keys: np.ndarray, depth: int) -> np.ndarray:
        block = window[starts[keys] + depth]
        block = np.where(lane < (lengths[keys] - depth)[:, None], block, 0).astype(np.uint8)
        return np.ascontiguousarray(block).view(">u8")[:, 0]

    pairs = np.arange(k - 1)
    depth = 0
    while pairs.size:
        a, b = heads(pairs, depth), heads(pairs + 1, depth)
        if (b < a).any():
            return False
        pairs = pairs[a == b]
        rest_a, rest_b = lengths[pairs] - depth, lengths[pairs + 1] - depth
        ends = (rest_a <= 8) | (rest_b <= 8)  # tied up to a key's end: ascending only if the first is shorter
        if (ends & (rest_a >= rest_b)).any():
            return False
        pairs = pairs[~ends]
        depth += 8
    return True


def validate_tail_contents(layout: TailLayout, eos_token_ids: Sequence[int], source: str) -> None:
    """What makes tail rows right beyond their indices: every pair of delta 0 in the far table; keys strictly
    ascending (so distinct), ids ascending within a key, every id spelled once, no EOS id among them; a canonical
    table's tail tokens spelling exactly each value's tail bytes (O(tail bytes))."""
    zero = int(np.count_nonzero((layout.pairs >> np.uint32(layout.token_bits)) == 0))
    if zero != layout.far_pairs.shape[0]:
        _fail(
            source,
            "far_pairs",
            f"expected one entry per pair whose delta is 0 ({zero}), found {layout.far_pairs.shape[0]}",
        )
    ix = layout.index
    keys = ix.keys()
    if any(a >= b for a, b in zip(keys, keys[1:], strict=False)):
        _fail(source, "token_key_bytes", "expected distinct token bytes in strictly increasing order")
    ids = ix.ids.astype(np.int64)
    if np.unique(ids).shape[0] != ids.shape[0]:
        _fail(source, "token_ids", "expected every id once")
    if np.isin(ids, np.asarray(eos_token_ids, dtype=np.int64)).any():
        _fail(source, "token_ids", "EOS ids must not appear among content tokens")
    if ids.shape[0] > 1:
        step = np.diff(ids)
        inner = ix.id_offsets[1:-1].astype(np.int64) - 1
        boundary = np.zeros(ids.shape[0] - 1, dtype=bool)
        boundary[inner[(inner >= 0) & (inner < ids.shape[0] - 1)]] = True
        if ((step <= 0) & ~boundary).any():
            _fail(source, "token_ids", "expected ascending ids within each token's bytes")
    if isinstance(layout, CanonicalTailLayout):
        _check_spelling(layout, source)


def _check_spelling(layout: CanonicalTailLayout, source: str) -> None:
    """Each value's tail tokens spell exactly its tail bytes (O(tail bytes); lengths already checked to agree)."""
    ix = layout.index
    id_key = np.full(layout.vocab_size, -1, dtype=np.int64)
    id_ends = np.asarray(ix.id_offsets, dtype=np.int64)
    id_key[np.asarray(ix.ids, dtype=np.int64)] = np.repeat(
        np.arange(ix.num_keys, dtype=np.int64), id_ends[1:] - id_ends[:-1]
    )
    keys = id_key[np.asarray(layout.tail_tokens, dtype=np.int64)]
    spelled = ix.key_bytes[concat_ranges(ix.key_offsets[keys].astype(np.int64), layout.token_lengths())]
    tails = layout.state_byte[concat_ranges(layout.tail_first.astype(np.int64), layout.tail_len.astype(np.int64))]
    if not np.array_equal(spelled, tails):
        at = int(np.flatnonzero(spelled != tails)[0])
        v = int(np.searchsorted(np.cumsum(layout.tail_len, dtype=np.int64), at, side="right"))
        _fail(source, "tail_tokens", f"value {v}'s tail tokens do not spell its tail bytes")
